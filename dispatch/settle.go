package dispatch

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/keys"
)

// Ack applies a consumer's answer for the message under k. done, if not nil,
// is called once the answer is applied: for +ACK and +TERM once the delete
// is committed. It gets nil, ErrUnknownTag or ErrNotInFlight for harmless
// no-ops, or another error if the answer could not be applied. Ack does not
// wait for the commit; it blocks only while the delete queue is full.
func (d *Dispatcher) Ack(k keys.Key, a Ack, done func(error)) {
	if done == nil {
		done = func(error) {}
	}
	if d.del == nil {
		done(ErrClosed)
		return
	}
	switch a.Kind {
	case AckDone:
		d.ackDone(k, done)
	case AckNak, AckProgress, AckFailed:
		d.ackRetry(k, a, done)
	case AckTerm:
		d.ackTerm(k, a.Reason, done)
	default:
		done(fmt.Errorf("dispatch: unknown ack kind %d", a.Kind))
	}
}

// ackDone settles k for good: it is deleted, and done is told once the
// delete is committed.
func (d *Dispatcher) ackDone(k keys.Key, done func(error)) {
	// Marked as in Cancel, so that no publish of k can follow the +OK.
	d.mu.Lock()
	// Only the first answer that settles a flight may delete it
	// unread: until then nothing else has queued a delete of it.
	var pending *delaystore.StoredMessage
	f := d.mu.flights.byKey[k]
	if f != nil && f.state != stateSettling {
		pending = f.pending
	}
	ab, attempt, tell := d.answeredLocked(k)
	// Mark it as Cancel does, so that a scan which read the message
	// before the delete commits does not deliver it after the +OK.
	d.mu.flights.markSettlingFlight(k, f)
	d.waitUnpublishedLocked(k)
	d.mu.Unlock()
	if tell && ab == nil {
		ab, attempt = d.aboutKey(k)
	}
	d.del.deletePending(k, pending, func(applied bool, err error) {
		switch {
		case err != nil:
			done(err)
		case !applied:
			done(ErrUnknownTag)
		default:
			d.stats.acked.Add(1)
			d.happenedTo(Acked, k, ab, attempt, "")
			done(nil)
		}
	})
}

// ackRetry applies an answer that keeps the delivery of k in flight with
// a new deadline: -NAK (redelivered after its delay), +WPI (a new ack
// wait) or a failed attempt (its back-off, or the ack wait).
func (d *Dispatcher) ackRetry(k keys.Key, a Ack, done func(error)) {
	now := d.nowNs()
	d.mu.Lock()
	f := d.mu.flights.byKey[k]
	if f == nil || f.state != stateSent {
		d.mu.Unlock()
		done(ErrNotInFlight)
		return
	}
	var naked *about
	attempt := f.attempt
	f.answer = a.String()
	switch a.Kind {
	case AckNak:
		d.mu.flights.retryAt(f, after(now, a.Delay))
		d.stats.nacked.Add(1)
		naked = f.about
	case AckFailed:
		wait := d.backoffAfter(f.attempt)
		if wait == 0 {
			wait = d.cfg.AckWait
		}
		d.mu.flights.retryAt(f, after(now, wait))
		d.stats.failed.Add(1)
	default:
		d.mu.flights.timers.schedule(f, after(now, d.cfg.AckWait))
		d.stats.progress.Add(1)
	}
	first := d.mu.flights.timers.first() == f || d.waitingLongLocked(f, now)
	d.mu.Unlock()
	if first {
		d.signal()
	}
	d.happenedTo(Naked, k, naked, attempt, "")
	done(nil)
}

// ackTerm ends k without a redelivery: it is dead-lettered with the
// reason, if any, and deleted.
func (d *Dispatcher) ackTerm(k keys.Key, why string, done func(error)) {
	reason := "term"
	if why != "" {
		reason = "term: " + why
	}
	var attempt uint32
	d.mu.Lock()
	if d.mu.flights.isCanceled(k) {
		// NB: settled already, by an earlier +TERM or +ACK, a cancel or
		// expiry, whose delete is under way: the message is still stored
		// until that commits, and dead-lettering it again would publish a
		// second dead letter, or delete it before the first +TERM's dead
		// letter has read it. A duplicate answer changes nothing.
		d.mu.Unlock()
		done(ErrNotInFlight)
		return
	}
	if f := d.mu.flights.byKey[k]; f != nil && f.state == stateSent && f.counted < f.attempt {
		// A delivery of it is under way, and whether that was an
		// attempt is known only once its pass has flushed: it may yet
		// bounce. The pass dead-letters it then (see publish).
		d.mu.flights.markSettling(k)
		f.term = &pendingTerm{reason: reason, answer: termAnswer(why), done: done}
		termed, attempt := f.about, f.attempt
		d.waitUnpublishedLocked(k) // as for ackDone
		d.mu.Unlock()
		d.stats.termed.Add(1)
		d.happenedTo(Termed, k, termed, attempt, why)
		return
	}
	if f := d.mu.flights.markSettling(k); f != nil {
		attempt = f.counted
	}
	d.waitUnpublishedLocked(k) // as for ackDone
	d.mu.Unlock()
	msg, err := d.repo.Get(k)
	if err != nil {
		// Still queue the delete: it lets the flight be forgotten.
		d.del.delete(k, nil)
		if errors.Is(err, delaystore.ErrNotFound) {
			err = ErrUnknownTag
		}
		done(err)
		return
	}
	attempt = max(attempt, msg.Attempt)
	d.stats.termed.Add(1)
	d.happened(Termed, k, msg, attempt, why)
	d.deadLetter(k, msg, attempt, reason, termAnswer(why), done)
}

// termAnswer is the answer a +TERM with the reason why was.
func termAnswer(why string) string {
	if why == "" {
		return "+TERM"
	}
	return "+TERM " + why
}

// NoResponders reports that the delivery under k reached no subscriber, and
// returns whether it took the report as that. The attempt does not count:
// the message stays pending, and its topic backs off. Unknown keys and
// settled messages are ignored (true).
//
// The server sends its notice as it processes the delivery, before the
// flush that follows the delivery's pass comes back. Once that flush has
// told that the delivery reached someone, or when no delivery of k is
// under way, a report cannot be the server's notice: NoResponders then
// changes nothing and returns false, and the caller should treat the
// message as a consumer's answer (a consumer can send a Status: 503
// header too, and a client library cannot tell the two apart).
func (d *Dispatcher) NoResponders(k keys.Key) bool {
	now := d.nowNs()
	d.mu.Lock()
	defer d.mu.Unlock()
	f := d.mu.flights.byKey[k]
	switch {
	case f == nil:
		return true
	case f.term != nil && f.counted < f.attempt:
		f.bounced = true
		return true
	case f.state == stateSettling:
		return true
	case f.state != stateSent || f.counted >= f.attempt:
		// Its last delivery reached a subscriber, or the next one is
		// not out yet.
		return false
	}
	d.stats.noResponders.Add(1)
	f.topic.noRespPass = f.pass
	d.unsendLocked(f)
	d.mu.subjects.block(f.topic, now)
	return true
}

// Cancel deletes the pending message under k. Once it returns, the message
// is never published again, also when it was in flight. It reports whether
// a pending message was deleted.
//
// Canceling an occurrence of a recurring schedule ends the schedule: when
// the occurrence was planned already, its successor is stored, and is
// canceled too (see cancelSchedule).
func (d *Dispatcher) Cancel(ctx context.Context, k keys.Key) (bool, error) {
	if d.del == nil {
		return false, ErrClosed
	}
	if m, err := d.repo.Get(k); err == nil && m.GetRecurrence() != nil {
		return d.cancelSchedule(ctx, k, m)
	}
	return d.cancel(ctx, k)
}

// cancel deletes the pending message under k; see Cancel.
func (d *Dispatcher) cancel(ctx context.Context, k keys.Key) (bool, error) {
	ab, attempt := d.aboutKey(k)
	d.mu.Lock()
	d.mu.flights.markSettling(k)
	// NB: canceling the successor of an occurrence planned ahead ends the
	// schedule before that occurrence: it must not go out either, and it
	// is deleted with k, so that nothing of the schedule is left pending
	// once the CANCEL is answered.
	withdrawn, ok := d.mu.ahead.end(k)
	if ok {
		d.mu.flights.markSettling(withdrawn)
	}
	d.waitUnpublishedLocked(k)
	d.mu.Unlock()

	type result struct {
		applied bool
		err     error
	}
	ch := make(chan result, 1)
	wch := make(chan error, 1)
	if ok {
		d.stats.withdrawn.Add(1)
		d.del.delete(withdrawn, func(_ bool, err error) { wch <- err })
	} else {
		wch <- nil
	}
	d.del.delete(k, func(applied bool, err error) { ch <- result{applied, err} })
	var r result
	select {
	case r = <-ch:
	case <-ctx.Done():
		return false, fmt.Errorf("dispatch: cancel %s: %w", k, ctx.Err())
	}
	select {
	case err := <-wch:
		r.err = cmp.Or(r.err, err)
	case <-ctx.Done():
		return false, fmt.Errorf("dispatch: cancel %s: %w", k, ctx.Err())
	}
	if r.applied {
		d.stats.canceled.Add(1)
		d.happenedTo(Canceled, k, ab, attempt, "")
	}
	return r.applied, r.err
}

// Expire removes the messages under ks that have expired, dead-lettering
// them when configured, and waits until their deletes are committed. Keys
// that are gone or not expired are skipped.
func (d *Dispatcher) Expire(ctx context.Context, ks []keys.Key) error {
	now := d.nowNs()
	errs := make(chan error, len(ks))
	n := 0
	for _, k := range ks {
		msg, err := d.repo.Get(k)
		if errors.Is(err, delaystore.ErrNotFound) || (err == nil && !expired(msg, now)) {
			continue
		}
		if err != nil {
			return fmt.Errorf("dispatch: read expired message %s: %w", k, err)
		}
		// Mark it so no scan or redelivery publishes it while its delete
		// is queued; the mark goes when the delete commits. One marked
		// already, or whose flight is settling, is being settled by an
		// answer, a cancel, its Delay-Max-Deliver or its expiry at
		// redelivery: expiring it too would dead-letter it a second time.
		d.mu.Lock()
		if d.mu.flights.settled(k) {
			d.mu.Unlock()
			continue
		}
		d.mu.flights.markSettling(k)
		d.mu.Unlock()
		n++
		d.settleExpired(k, msg, func(err error) { errs <- err })
	}
	var first error
	for range n {
		select {
		case err := <-errs:
			if err != nil && !errors.Is(err, ErrUnknownTag) && first == nil {
				first = err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return first
}

// settleExpired dead-letters msg if so configured and deletes it. The key
// must be marked canceled or settling, so no scan picks it up meanwhile.
func (d *Dispatcher) settleExpired(k keys.Key, msg *delaystore.StoredMessage, done func(error)) {
	d.stats.expired.Add(1)
	if d.cfg.Lifecycle != nil {
		d.happened(Expired, k, msg, max(msg.Attempt, d.Attempt(k)), "")
	}
	if d.cfg.DeadLetterExpired {
		d.deadLetter(k, msg, max(msg.Attempt, d.Attempt(k)), "expired", "", done)
		return
	}
	d.deleteThen(k, done)
}

// deadLetter publishes msg to the dead-letter subject, if any, and deletes
// it, keeping it as a dead letter in the same commit, with answer, the
// consumer's last answer (empty for none). If the dead letter cannot be
// published the message stays pending and is delivered again, so it is
// never lost.
func (d *Dispatcher) deadLetter(k keys.Key, msg *delaystore.StoredMessage, attempt uint32, reason, answer string, done func(error)) {
	if msg == nil {
		var err error
		if msg, err = d.repo.Get(k); err != nil {
			d.del.delete(k, nil)
			if errors.Is(err, delaystore.ErrNotFound) {
				err = ErrUnknownTag // settled meanwhile, by an ACK or a cancel
			}
			if done != nil {
				done(err)
			}
			return
		}
	}
	if subj := d.cfg.DeadLetterSubject; subj != "" {
		if err := d.pub.DeadLetter(subj, k, msg, attempt, reason); err != nil {
			if ok, n := d.deadWarn.allow(d.nowNs()); ok {
				d.log.Warn("publishing dead letter; keeping the message", "tag", k, "err", err, "suppressed", n)
			}
			retry := after(d.nowNs(), d.cfg.NoRespondersMaxBackoff)
			d.mu.Lock()
			if f := d.mu.flights.byKey[k]; f != nil {
				d.mu.flights.retryAt(f, retry)
			}
			d.restoreLocked(k, retry)
			d.mu.Unlock()
			if done != nil {
				done(fmt.Errorf("dispatch: dead letter %s: %w", k, err))
			}
			return
		}
	}
	d.stats.deadLettered.Add(1)
	d.happened(DeadLettered, k, msg, attempt, reason)
	d.keepDead(k, &delaystore.Dead{Reason: reason, Attempts: attempt, LastAnswer: answer, DiedAtNs: d.nowNs()}, done)
}

// keepDead deletes k, keeping it as the dead letter dead in the same
// commit; done, if not nil, is told once that commits.
func (d *Dispatcher) keepDead(k keys.Key, dead *delaystore.Dead, done func(error)) {
	d.del.deleteDead(k, dead, func(applied bool, err error) {
		if done == nil {
			return
		}
		if err == nil && !applied {
			err = ErrUnknownTag
		}
		done(err)
	})
}

func (d *Dispatcher) deleteThen(k keys.Key, done func(error)) {
	d.del.delete(k, func(applied bool, err error) {
		if done == nil {
			return
		}
		if err == nil && !applied {
			err = ErrUnknownTag
		}
		done(err)
	})
}
