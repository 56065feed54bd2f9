package dispatch

import (
	"bytes"
	"errors"
	"math"
	"slices"
	"time"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/keys"
)

// scan reads topic t from its cursor to the due bound, registers up to limit
// due messages as flights and appends them to out. It returns how many it
// took and whether that one is a probe, and puts t back in the due heap at
// its next due time, except after a probe: the probe's flush does that.
func (d *Dispatcher) scan(t *topic, now int64, pass uint64, limit int, out *[]outgoing) (int, bool) {
	d.mu.Lock()
	from := t.cursor
	// A point read only while nothing but the entry can be in the
	// range: no message arrived or bounced below it since (rewind), and
	// the cursor is still at it.
	var single *keys.Key
	if t.single != nil && t.rewind == nil && bytes.Equal(from, t.single[:]) {
		single = t.single
	}
	t.single = nil
	t.rewind = nil
	if t.probing {
		limit = 1
		t.probePass = pass
	}
	d.mu.Unlock()

	r, err := d.readDue(t, from, single, now, limit)
	if err != nil {
		d.log.Warn("scanning due messages", "topic", t.hash, "err", err)
		d.mu.Lock()
		d.rescheduleLocked(t, after(now, d.cfg.NoRespondersBackoff))
		d.mu.Unlock()
		return 0, false
	}

	// No seek past the due range for the topic's next message: the
	// due index brings that to the topic when it is due (advanceFrontier),
	// so a topic with nothing due now leaves memory at the next pass.
	next := r.notDue
	if r.full {
		next = now
	}

	d.mu.Lock()
	if t.subject == "" && len(r.due) > 0 {
		t.subject = r.due[0].msg.Subject
	}
	// NB: a topic read for the first time learns its subject, and so its
	// limits, only now; and the limits may have changed during the scan.
	// What they do not allow stays behind the cursor for a later pass.
	if allow := d.allowLocked(t, now); len(r.due) > allow {
		for _, f := range r.due[allow:] {
			if r.held == nil || bytes.Compare(f.k[:], r.held) < 0 {
				r.held = f.k.Bytes()
			}
		}
		r.due, r.full, next = r.due[:allow], true, now
	}
	d.moveCursorLocked(t, from, r)
	taken := d.takeLocked(t, r.due, out)
	for _, g := range r.gone {
		d.mu.flights.canceled[g.k] = struct{}{}
	}
	probe := t.probing && taken > 0
	switch {
	case probe:
		t.probeOpen = true
	case r.full && d.roomOfLocked(t) <= 0:
		d.holdLocked(t, now)
	default:
		d.rescheduleLocked(t, next)
	}
	if t.idx < 0 && t.flights == 0 {
		d.mu.subjects.idleNow(t)
	}
	d.mu.Unlock()

	for _, g := range r.gone {
		d.settleExpired(g.k, g.msg, nil)
	}
	return taken, probe
}

// found is a message a scan read, under its key.
type found struct {
	k   keys.Key
	msg *delaystore.StoredMessage
}

// dueRead is what readDue found in a topic's due range.
type dueRead struct {
	due, gone  []found // to deliver, in order; expired
	held       []byte  // first key not yet due: the cursor stops there
	lastPassed keys.Key
	passed     bool
	notDue     int64 // when the first message not yet due is scannable
	full       bool  // limit reached before the end of the range
}

// readDue reads t's messages from from to the end of what is due at now,
// at most limit of them to deliver (a point read of single when it is
// set), skipping those in flight, canceled, or moved without sync and not
// yet flushed (see Move).
func (d *Dispatcher) readDue(t *topic, from []byte, single *keys.Key, now int64, limit int) (dueRead, error) {
	r := dueRead{notDue: int64(never)}
	upper := keys.DueUpperBound(t.hash, now/int64(time.Millisecond), d.bucketMs)
	visit := func(k keys.Key, m *delaystore.StoredMessage) bool {
		if len(r.due) >= limit {
			r.full = true
			return false
		}
		d.mu.Lock()
		_, busy := d.mu.flights.byKey[k]
		if !busy {
			_, busy = d.mu.flights.canceled[k]
		}
		busy = busy || d.mu.flights.held(k)
		d.mu.Unlock()
		switch {
		case busy:
		case m.FireAtNs > now:
			// Only possible with a coarse time bucket: the range includes
			// the whole current bucket.
			r.notDue = min(r.notDue, d.scannableAt(k, m.FireAtNs))
			if r.held == nil {
				r.held = k.Bytes()
			}
			return true
		case expired(m, now):
			r.gone = append(r.gone, found{k, m})
		default:
			r.due = append(r.due, found{k, m})
		}
		if r.held == nil {
			r.lastPassed, r.passed = k, true
		}
		return true
	}
	var err error
	if single != nil {
		err = d.readSingle(*single, upper, visit)
	} else {
		err = d.repo.ScanTopic(t.hash, from, upper, visit)
	}
	if err != nil {
		return r, err
	}
	if d.bucketMs > 0 {
		// Within a coarse bucket keys are in publish order; deliver in
		// (fire time, publish order) like raw-millisecond keys would.
		slices.SortStableFunc(r.due, func(a, b found) int {
			if c := keys.FireAtMs(a.msg.FireAtNs) - keys.FireAtMs(b.msg.FireAtNs); c != 0 {
				return int(min(max(c, -1), 1))
			}
			return int(min(max(int64(a.k.EventID())-int64(b.k.EventID()), -1), 1))
		})
	}
	return r, nil
}

// moveCursorLocked moves t's cursor past what a scan from from read, as r
// says, but not past a message that arrived or bounced below it during
// the scan. mu must be held.
func (d *Dispatcher) moveCursorLocked(t *topic, from []byte, r dueRead) {
	cursor := from
	switch {
	case r.held != nil:
		cursor = r.held
	case r.passed:
		cursor = r.lastPassed.Successor()
	}
	if !bytes.Equal(t.cursor, from) && (t.cursor == nil || bytes.Compare(t.cursor, cursor) < 0) {
		// A sooner message arrived, or a delivery bounced, during the scan.
		cursor = t.cursor
	}
	if t.rewind != nil && cursor != nil && bytes.Compare(t.rewind, cursor) < 0 {
		// One arrived or bounced during the scan above its start but
		// below where the scan got to; the scan did not deliver it.
		cursor = t.rewind
	}
	t.rewind = nil
	t.cursor = cursor
}

// takeLocked makes a flight of each message of due that is not canceled
// since the scan read it, and adds it to out; it returns how many. mu
// must be held.
func (d *Dispatcher) takeLocked(t *topic, due []found, out *[]outgoing) int {
	taken := 0
	for _, f := range due {
		if _, ok := d.mu.flights.canceled[f.k]; ok {
			// NB: ACKed, TERMed, canceled or expired after the scan read it.
			// Its delete may be committed already, and the answer sent, so
			// it must not go out again.
			continue
		}
		taken++
		counted := f.msg.Attempt
		if c, ok := d.mu.flights.unsent[f.k]; ok {
			counted = max(counted, c)
			delete(d.mu.flights.unsent, f.k)
		}
		fl := &flight{
			key:        f.k,
			topic:      t,
			state:      stateRetry,
			attempt:    counted + 1,
			counted:    counted,
			ackNone:    f.msg.AckPolicy == delaystore.AckPolicy_ACK_NONE,
			maxDeliver: d.maxDeliver(f.msg),
			idx:        -1,
		}
		if f.msg.ClientId == "" && f.msg.Recurrence == nil {
			// NB: not for an occurrence: planning it changes its expiry
			// and its schedule index entry, which a delete must see.
			fl.pending = &delaystore.StoredMessage{Subject: f.msg.Subject, ExpireAtNs: f.msg.ExpireAtNs, WrittenOnce: f.msg.WrittenOnce}
		}
		fl.about = d.aboutOf(f.msg)
		d.mu.flights.byKey[f.k] = fl
		t.flights++
		*out = append(*out, outgoing{f: fl, msg: f.msg})
	}
	return taken
}

// readSingle is a scan of a topic whose only message in range is k: a
// point read, which an engine answers from its filters and caches where a
// range scan positions an iterator in every level. Nothing under k means
// it was settled since its due-index entry was read.
func (d *Dispatcher) readSingle(k keys.Key, upper []byte, visit func(keys.Key, *delaystore.StoredMessage) bool) error {
	if upper != nil && bytes.Compare(k[:], upper) >= 0 {
		return nil
	}
	m, err := d.repo.Get(k)
	switch {
	case errors.Is(err, delaystore.ErrNotFound):
		return nil
	case err != nil:
		return err
	}
	visit(k, m)
	return nil
}

func (d *Dispatcher) maxDeliver(m *delaystore.StoredMessage) uint32 {
	if m.MaxDeliver > 0 {
		return m.MaxDeliver
	}
	return d.cfg.MaxDeliver
}

// rescheduleLocked puts t back in the due heap at next, unless something
// sooner scheduled it meanwhile, and never before its no-responders block
// ends. mu must be held.
func (d *Dispatcher) rescheduleLocked(t *topic, next int64) {
	if t.idx >= 0 {
		next = min(next, t.next)
	}
	if next == never {
		return
	}
	d.mu.subjects.due.schedule(t, max(next, t.blockedUntil))
}

// flushBatch is one pass's deliveries, waiting for the flush that tells
// which of them reached nobody.
type flushBatch struct {
	sent   []outgoing
	pass   uint64
	probed []*topic // topics whose probe is among sent, or bounced at once
}

// deliver publishes the delivery of f, which publish has marked as the
// one being published, and clears the mark: see waitUnpublishedLocked.
func (d *Dispatcher) deliver(f *flight, msg *delaystore.StoredMessage) error {
	// Checked per message, right before it goes out, so that a pause
	// anywhere in a long pass is noticed at the next message.
	err := errFenced
	if d.fenceHeld() {
		err = d.pub.Deliver(f.key, msg, f.attempt)
	}
	d.mu.Lock()
	d.mu.inPublish = false
	d.mu.published.Broadcast()
	d.mu.Unlock()
	return err
}

// waitUnpublishedLocked returns, d.mu held, once no pass is publishing k.
// Ack, +TERM, Cancel, Move and a replacing Notify call it after they
// marked k settled, so that once they return k is never published again:
//
//   - publish checks the mark and marks k as the key it publishes in one
//     hold of d.mu, and clears that only once the publish returned;
//   - so a mark made before that hold makes publish skip k, and a mark
//     made after it finds k being published and waits here until the
//     publish is over; later passes see the mark and skip k.
//
// Only a settling of the very key being published waits for its publish:
// a connection that stops taking deliveries holds up the answers to the
// others no more (no lock is held across a publish).
func (d *Dispatcher) waitUnpublishedLocked(k keys.Key) {
	for d.mu.inPublish && d.mu.publishing == k {
		d.waitPublishLocked()
	}
}

// waitPublishLocked waits, d.mu held, until the publish under way ends.
func (d *Dispatcher) waitPublishLocked() {
	if d.beforePublishWait != nil {
		d.beforePublishWait()
	}
	d.mu.published.Wait()
}

// publish sends the prepared deliveries and queues them for the flusher,
// which settles what needs no ACK and records attempt counts for the rest.
// The next pass need not wait for that: the flush is a round trip, and
// waiting for it left the dispatcher idle for as long as it took to publish.
func (d *Dispatcher) publish(out []outgoing, now int64, pass uint64, probed []*topic) {
	out = d.planOccurrences(out, now)
	sent := out[:0]
	for _, o := range out {
		f := o.f
		d.mu.Lock()
		if d.mu.flights.byKey[f.key] != f || f.state == stateSettling {
			// Canceled, ACKed by an earlier process's delivery, or replaced.
			d.mu.Unlock()
			continue
		}
		if d.mu.ahead.take(f.key) {
			// Planned ahead, then its schedule was canceled or replaced
			// by Delay-Id (which took the successor) before it fell due:
			// it ends with the schedule, unsent, as it would have had it
			// not been planned yet.
			d.markSettlingLocked(f.key)
			d.mu.Unlock()
			d.stats.withdrawn.Add(1)
			d.deleteThen(f.key, nil)
			continue
		}
		f.state = stateSent
		f.pass = pass
		d.mu.flights.timers.schedule(f, after(now, d.cfg.AckWait))
		d.mu.publishing, d.mu.inPublish = f.key, true
		d.mu.Unlock()
		err := d.deliver(f, o.msg)
		if errors.Is(err, ErrUndeliverable) {
			d.undeliverable(f, o.msg, err)
			continue
		}
		if err == errFenced {
			// Held back, not failed: it goes out as it was once the
			// fence is held again, with no back-off.
			d.mu.Lock()
			if d.mu.flights.byKey[f.key] == f && f.state == stateSent {
				d.unsendLocked(f)
				d.rescheduleLocked(f.topic, now)
			}
			d.mu.Unlock()
			d.stats.fenced.Add(1)
			continue
		}
		if err != nil {
			if ok, n := d.deliverWarn.allow(now); ok {
				d.log.Warn("publishing delivery", "tag", f.key, "err", err, "suppressed", n)
			}
			d.mu.Lock()
			if d.mu.flights.byKey[f.key] == f && f.state == stateSent {
				d.unsendLocked(f)
				d.blockLocked(f.topic, now)
			}
			d.mu.Unlock()
			continue
		}
		o.attempt, o.lateness = f.attempt, time.Duration(d.nowNs()-o.msg.FireAtNs)
		d.mu.Lock()
		o.held = f.topic.heldAt != 0 && o.msg.FireAtNs <= f.topic.heldAt
		d.mu.Unlock()
		sent = append(sent, o)
	}
	d.queueFlush(flushBatch{sent: sent, pass: pass, probed: probed})
}

// undeliverable deals with a message the publisher refused for good:
// trying it again would only fail again (and, backing off its subject,
// hold back the subject's later messages). It is dead-lettered if a
// dead-letter subject is set and takes it; otherwise it is parked: its
// flight waits with no deadline, holding its window slot, until the
// message is canceled or expires, and a restart tries it once more. It is
// never deleted unasked: it was acknowledged to its publisher.
func (d *Dispatcher) undeliverable(f *flight, msg *delaystore.StoredMessage, cause error) {
	d.stats.undeliverable.Add(1)
	if subj := d.cfg.DeadLetterSubject; subj != "" {
		reason := "undeliverable: " + cause.Error()
		err := d.pub.DeadLetter(subj, f.key, msg, f.attempt, reason)
		if err == nil {
			d.mu.Lock()
			mine := d.mu.flights.byKey[f.key] == f && f.state == stateSent
			if mine {
				d.markSettlingLocked(f.key)
			}
			d.mu.Unlock()
			if mine {
				d.log.Error("message can never be delivered: dead-lettered", "tag", f.key, "dead_letter", subj, "err", cause)
				d.stats.deadLettered.Add(1)
				d.happened(DeadLettered, f.key, msg, f.attempt, reason)
				d.keepDead(f.key, &delaystore.Dead{Reason: reason, Attempts: f.attempt, LastAnswer: f.answer, DiedAtNs: d.nowNs()}, nil)
			}
			return
		}
		if ok, n := d.deadWarn.allow(d.nowNs()); ok {
			d.log.Warn("publishing dead letter of an undeliverable message", "tag", f.key, "err", err, "suppressed", n)
		}
	}
	d.mu.Lock()
	if d.mu.flights.byKey[f.key] == f && f.state == stateSent {
		f.state, f.parked = stateRetry, true
		d.mu.flights.timers.schedule(f, never)
	}
	d.mu.Unlock()
	d.log.Error("message can never be delivered: parked, pending until canceled or expired (LIST shows it, CANCEL removes it)",
		"tag", f.key, "err", cause)
}

// unsendLocked forgets a delivery that did not reach anyone, so the next
// scan of its topic delivers it again in order, as the same attempt.
// mu must be held.
func (d *Dispatcher) unsendLocked(f *flight) {
	f.lostPass = f.pass
	if f.counted > 0 {
		d.mu.flights.unsent[f.key] = f.counted
	}
	d.forgetLocked(f)
	f.topic.rewindLocked(f.key)
}

// blockLocked backs topic t off after a delivery bounced, unless it is
// backing off already, and schedules it for when the back-off ends: the
// bounced message is due, so that is when t is due again, however much
// later its next message is. mu must be held.
func (d *Dispatcher) blockLocked(t *topic, now int64) {
	if t.blockedUntil <= now {
		t.backoff = min(max(t.backoff+min(t.backoff, math.MaxInt64-t.backoff), d.cfg.NoRespondersBackoff), d.cfg.NoRespondersMaxBackoff)
		t.blockedUntil = after(now, t.backoff)
		t.probing = true
	}
	// Not max(t.next, ...): the scan that delivered the bounced
	// message may have put t back at the time of the message after it.
	d.mu.subjects.due.schedule(t, t.blockedUntil)
}
