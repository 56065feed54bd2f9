package dispatch

import (
	"bytes"
	"errors"
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
	if low, ok := d.mu.commits.lowestOf(t.hash); ok {
		// A message of the subject is committed, or about to be, and not
		// yet told of (see commits.go): the scan starts at it if it lies
		// below the cursor, or below where a scan of a subject held for a
		// group resumes (see groupResumeAt), as after its tell's rewind.
		t.rewindLocked(low)
	}
	resume := t.groupResumeAt()
	from, single, limit := t.beginScan(pass, limit)
	if resume != nil && bytes.Compare(resume, from) > 0 {
		from, single = resume, nil
	} else {
		resume = nil
	}
	d.mu.Unlock()

	r, err := d.readDue(t, from, single, now, limit)
	if err != nil {
		d.log.Warn("scanning due messages", "topic", t.hash, "err", err)
		d.mu.Lock()
		t.scanning = false
		d.mu.subjects.reschedule(t, after(now, d.cfg.NoRespondersBackoff))
		d.mu.Unlock()
		return 0, false
	}

	if d.afterReadDue != nil {
		d.afterReadDue(r.goneKeys())
	}

	// No seek past the due range for the topic's next message: the
	// due index brings that to the topic when it is due (advanceFrontier),
	// so a topic with nothing due now leaves memory at the next pass.
	next := r.notDue
	if r.full {
		next = now
	}

	d.mu.Lock()
	t.scanning = false
	if t.subject == "" && len(r.due) > 0 {
		t.subject = r.due[0].msg.Subject
	}
	if resume != nil {
		r.wait = resumedWait(t, r.wait)
	}
	// NB: a topic read for the first time learns its subject, and so its
	// limits, only now; and the limits may have changed during the scan.
	// What they do not allow stays behind the cursor for a later pass.
	if allow := d.mu.subjects.allow(t, now); len(r.due) > allow {
		for _, f := range r.due[allow:] {
			if r.held == nil || bytes.Compare(f.k[:], r.held) < 0 {
				r.held = f.k.Bytes()
			}
		}
		d.mu.subjects.unadmit(r.due[allow:], now)
		r.due, r.full, next = r.due[:allow], true, now
	}
	t.moveCursor(from, r)
	taken := d.takeLocked(t, r.due, out)
	r.gone = d.claimExpiredLocked(r.gone)
	probe := d.mu.subjects.scanned(t, taken, r.full, next, now)
	if r.wait.g != nil || t.wokenBy != nil {
		d.mu.subjects.scannedGroups(t, r.wait, r.full || probe, now)
	}
	d.mu.Unlock()

	for _, g := range r.gone {
		d.settleExpired(g.k, g.msg, nil)
	}
	return taken, probe
}

// claimExpiredLocked marks settled the expired messages of gone that
// nothing settled since the scan read them, and returns those, which the
// scan settles. One marked meanwhile, by the expiry sweep (Expire), an
// answer or a cancel, is left to whatever marked it: settling it here too
// would dead-letter it and count it expired a second time. Its cursor
// may pass it: a settling that fails rewinds to it (restoreLocked). mu
// must be held.
func (d *Dispatcher) claimExpiredLocked(gone []found) []found {
	mine := gone[:0]
	for _, g := range gone {
		if d.mu.flights.settled(g.k) {
			continue
		}
		d.mu.flights.cancel(g.k)
		mine = append(mine, g)
	}
	return mine
}

// found is a message a scan read, under its key, with the group of a
// grouped limit it was admitted to, if any (see groups.go): its own, kept
// with it when a coarse bucket's messages are put in fire order.
type found struct {
	k   keys.Key
	msg *delaystore.StoredMessage
	g   *group
}

// dueRead is what readDue found in a topic's due range.
type dueRead struct {
	due, gone  []found // to deliver, in order; expired
	held       []byte  // first key not yet due: the cursor stops there
	lastPassed keys.Key
	passed     bool
	notDue     int64 // when the first message not yet due is scannable
	full       bool  // limit reached before the end of the range
	// wait is the first group of a grouped limit that was full, whose
	// messages stay behind the cursor (see groups.go).
	wait groupWait
	// gl is the topic's grouped limit, once resolved (see readDue).
	gl       *groupLimit
	resolved bool
}

// goneKeys is the keys of the expired messages r read.
func (r *dueRead) goneKeys() []keys.Key {
	ks := make([]keys.Key, len(r.gone))
	for i, g := range r.gone {
		ks[i] = g.k
	}
	return ks
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
		busy := d.mu.flights.busy(k)
		if !r.resolved {
			// In r, not a variable of its own: the closure escapes, and
			// so would it, once per scan.
			r.gl, r.resolved = d.mu.subjects.groupRuleOf(t, m), true
		}
		var g *group
		admitted := true
		if r.gl != nil {
			r.wait.readTo = k
			if !busy && m.FireAtNs <= now && !expired(m, now) {
				g, admitted = d.mu.subjects.admitToGroup(r.gl, m, now, &r.wait)
			}
		}
		d.mu.Unlock()
		switch {
		case !admitted:
			// Its group is full: it stays behind the cursor, and the
			// scan goes on to the topic's messages of other groups.
			if r.held == nil {
				r.held = k.Bytes()
			}
			return true
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
			r.gone = append(r.gone, found{k: k, msg: m})
		default:
			r.due = append(r.due, found{k, m, g})
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

// takeLocked makes a flight of each message of due that is not canceled
// since the scan read it, and adds it to out; it returns how many. mu
// must be held.
func (d *Dispatcher) takeLocked(t *topic, due []found, out *[]outgoing) int {
	taken := 0
	for _, f := range due {
		if d.mu.flights.isCanceled(f.k) {
			// NB: ACKed, TERMed, canceled or expired after the scan read it.
			// Its delete may be committed already, and the answer sent, so
			// it must not go out again.
			if f.g != nil {
				d.mu.subjects.groupLost(f.g, d.nowNs())
			}
			continue
		}
		taken++
		counted := d.mu.flights.takeCounted(f.k, f.msg.Attempt)
		var fl *flight
		if f.msg.ClientId == "" && f.msg.Recurrence == nil {
			// NB: not for an occurrence: planning it changes its expiry
			// and its schedule index entry, which a delete must see.
			fp := &pendingFlight{pending: delaystore.StoredMessage{Subject: f.msg.Subject, ExpireAtNs: f.msg.ExpireAtNs, WrittenOnce: f.msg.WrittenOnce}}
			fl = &fp.flight
			fl.pending = &fp.pending
		} else {
			fl = new(flight)
		}
		fl.key, fl.topic, fl.state, fl.idx = f.k, t, stateRetry, -1
		fl.attempt, fl.counted = counted+1, counted
		fl.ackNone = f.msg.AckPolicy == delaystore.AckPolicy_ACK_NONE
		fl.maxDeliver = d.maxDeliver(f.msg)
		fl.group = f.g
		fl.about = d.aboutOf(f.msg)
		d.mu.flights.add(fl)
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
		if f.topic.stoppedPass == pass {
			// An earlier message of its subject in this pass did not go
			// out: this one stays behind it, or order per subject would
			// break as soon as the fence is held again, or the connection
			// takes deliveries again, in the middle of the pass.
			d.mu.flights.sent(f, pass, now)
			d.unsendLocked(f)
			d.mu.Unlock()
			continue
		}
		// NB: one planned ahead whose schedule was canceled or replaced
		// by Delay-Id before it fell due was withdrawn then, and marked
		// settled (see aheadTable.end): it is not sent.
		d.mu.ahead.take(f.key)
		d.mu.flights.sent(f, pass, now)
		if f.pending == nil {
			f.pending = plannedPending(o.msg)
		}
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
			f.topic.stoppedPass = pass
			if d.mu.flights.byKey[f.key] == f && f.state == stateSent {
				d.unsendLocked(f)
				d.mu.subjects.reschedule(f.topic, now)
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
			f.topic.stoppedPass = pass
			if d.mu.flights.byKey[f.key] == f && f.state == stateSent {
				d.unsendLocked(f)
				d.mu.subjects.block(f.topic, now)
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

// plannedPending is what deleting m needs to know of it (see
// flight.pending) if m is an occurrence as planned, without a client id:
// nil otherwise. Planned, it no longer changes: its expiry is set, its
// entries in the schedule index have moved to its successor, and a
// schedule edit refuses it. Without a client id (it passed it on to its
// successor), no new message can replace it. So its delete after the
// ACK need not read it, as for a plain message (see takeLocked). Planned
// without a rewrite, it is still written once, and its delete may be a
// single delete (the repository knows the keys it rewrote since a copy
// that says so was read).
func plannedPending(m *delaystore.StoredMessage) *delaystore.StoredMessage {
	if !m.GetRecurrence().GetPlanned() || m.ClientId != "" {
		return nil
	}
	return &delaystore.StoredMessage{Subject: m.Subject, ExpireAtNs: m.ExpireAtNs, WrittenOnce: m.WrittenOnce}
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
				d.mu.flights.markSettling(f.key)
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
		f.parked = true
		d.mu.flights.retryAt(f, never)
	}
	d.mu.Unlock()
	d.log.Error("message can never be delivered: parked, pending until canceled or expired (LIST shows it, CANCEL removes it)",
		"tag", f.key, "err", cause)
}

// forgetLocked drops f from the flight table and from its topic's count.
// If that makes room in a full in-flight window, it wakes the loop, which
// does not wait for due topics while the window is full (see untilNext).
// mu must be held.
func (d *Dispatcher) forgetLocked(f *flight) {
	if d.mu.flights.drop(f) {
		d.forgottenLocked(f)
	}
}

// forgottenLocked tells what waits for room that f, just taken out of
// the flight table, left some. mu must be held.
func (d *Dispatcher) forgottenLocked(f *flight) {
	if d.mu.subjects.lostFlight(f.topic) {
		d.signal()
	}
	if f.group != nil && d.mu.subjects.groupLost(f.group, d.nowNs()) {
		d.signal()
	}
	if len(d.mu.flights.byKey) == d.cfg.MaxInFlight-1 && (len(d.mu.subjects.due) > 0 || len(d.mu.subjects.released) > 0 || d.mu.frontier.next != never) {
		d.signal()
	}
}

// unsendLocked forgets a delivery that did not reach anyone, so the next
// scan of its topic delivers it again in order, as the same attempt.
// mu must be held.
func (d *Dispatcher) unsendLocked(f *flight) {
	d.mu.flights.unsend(f)
	d.forgetLocked(f)
	f.topic.rewindLocked(f.key)
}

// restoreLocked takes back the mark that a settling of k which failed
// (a move refused, a dead letter not published) put on it, and makes k
// deliverable again from at: a scan that ran meanwhile passed k as
// settled and left its topic's cursor above it, so unless a flight of k
// delivers it, its topic's next scan starts at k again. mu must be held.
func (d *Dispatcher) restoreLocked(k keys.Key, at int64) {
	d.mu.flights.uncancel(k)
	if d.mu.flights.byKey[k] != nil {
		return
	}
	t := d.mu.subjects.topic(k.TopicHash())
	t.rewindLocked(k)
	if t.limited || t.released {
		return // its cursor is at k or before; room or its turn brings it back
	}
	d.mu.subjects.reschedule(t, at)
	if t.idx == 0 {
		d.signal()
	}
}

// waitingLongLocked is told that f now waits until its deadline. If that
// is longer than the ack wait, f may be evicted from a full window, so the
// next pass looks again; it reports whether the loop should be woken for
// that (the window is full and topics wait for room). mu must be held.
func (d *Dispatcher) waitingLongLocked(f *flight, now int64) bool {
	return d.mu.flights.waitsLong(f, now) && d.mu.flights.full() && len(d.mu.subjects.due) > 0
}

// evictLongWaitsLocked makes room in a full in-flight window for the
// first deliveries of due topics, so that flights waiting a long time (a
// -NAK with a long delay, a long back-off, a parked message) cannot hold
// every slot and freeze every other subject. The flight table picks them
// (see flightTable.longWaits), and it returns how many. An evicted
// flight's message stays in the store, and its topic is held back until
// the flight's deadline and rewound to it: the message goes out again at
// its deadline, never before, ahead of its topic's later messages, which
// wait with it. mu must be held.
func (d *Dispatcher) evictLongWaitsLocked(now int64) int {
	long := d.mu.flights.longWaits(now)
	if len(long) == 0 {
		return 0
	}
	for _, f := range long {
		if f.parked {
			// Behind its topic's cursor, out of memory, it stays parked
			// until a restart scans the topic from the start.
			d.forgetLocked(f)
			continue
		}
		t := f.topic
		t.blockedUntil = max(t.blockedUntil, f.deadline)
		d.unsendLocked(f)
		d.mu.subjects.reschedule(t, t.blockedUntil)
	}
	d.stats.evicted.Add(uint64(len(long)))
	d.mu.flights.evicted(len(long), now)
	return len(long)
}
