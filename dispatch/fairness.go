package dispatch

import (
	"slices"
	"time"

	"github.com/natsdelay/natsdelay/keys"
)

// Fairness: no topic holds more than its share of the in-flight window.
//
// A topic at its limit (Config.SubjectMaxInFlight) with more due is held:
// taken out of the due heap, its cursor kept at its first message not yet
// delivered, so no pass reads it again, nor pays for it, until one of its
// own flights is settled (see subjectTable.lostFlight). It then goes back in the
// due heap and its scan resumes at the cursor, so its messages still go
// out in fire order. Its redeliveries need no room (their flights hold
// their slots), so a subject whose consumers never answer is redelivered
// on its own schedule, within its own limit, while the rest of the window
// stays open to every other subject's first deliveries.

// limitWarnInterval is how often, at most, a WARN names a subject held at
// its limit; the gauge (Stats.Limited) has them all.
const limitWarnInterval = 10 * time.Second

// maxInFlightOf is the most flights topic t may hold.
func (st *subjectTable) maxInFlightOf(t *topic) int { return st.ruleOf(t).maxInFlight }

// roomOf is how many more first deliveries t may have now: none while it
// is paused.
func (st *subjectTable) roomOf(t *topic) int {
	r := st.ruleOf(t)
	if r.paused {
		return 0
	}
	return r.maxInFlight - t.flights
}

// hold takes t, at its limit with more due, out of the due heap until a
// flight of its own makes room. now is the pass's time.
func (st *subjectTable) hold(t *topic, now int64) {
	st.due.unschedule(t)
	t.next = never
	if t.limited {
		return
	}
	t.limited = true
	st.held[t] = struct{}{}
	if st.ruleOf(t).paused {
		t.pausedHeld = true
		st.paused++
		return // paused on purpose: nothing to warn about
	}
	st.limitedUnlogged++
	if now >= st.limitLogAt {
		st.log.Warn("subject at its in-flight limit: its next deliveries wait for answers to those in flight",
			"subject", t.subject, "in_flight", t.flights, "max_in_flight", st.maxInFlightOf(t),
			"subjects_limited", len(st.held)-st.paused, "suppressed", st.limitedUnlogged-1)
		st.limitedUnlogged, st.limitLogAt = 0, after(now, limitWarnInterval)
	}
}

// unhold clears t's mark of being held at its limit, when something else
// put it back in the due heap (a back-off, a probe's flush).
func (st *subjectTable) unhold(t *topic) {
	if t.limited {
		t.heldAt = st.now() // held until now
		t.limited = false
		delete(st.held, t)
	}
	if t.pausedHeld {
		t.pausedHeld = false
		st.paused--
	}
}

// release queues t, let go by a change of limits, to go back in the due
// heap when a pass has room for it.
func (st *subjectTable) release(t *topic) {
	if t.released {
		return
	}
	t.released = true
	st.released = append(st.released, t)
}

// readmitReleased puts topics released by a change of limits back in
// the due heap, due at now, in the order they were released, while fewer
// than a pass's worth of topics are due: so those due after a resume wait
// for a pass's worth of the resumed subjects, not for all of them, however
// many the resumed pattern has. The topics put back are taken first, ahead
// of what falls due later, as the backlog of one subject is.
func (st *subjectTable) readmitReleased(now int64) {
	if len(st.released) == 0 {
		return
	}
	n := min(len(st.released), max(0, st.passLimit-st.dueNow(now, st.passLimit)))
	for _, t := range st.released[:n] {
		t.released = false
		st.reschedule(t, now)
	}
	clear(st.released[:n])
	st.released = st.released[n:]
	if len(st.released) == 0 {
		st.released = nil // a burst gives its memory back
	}
}

// lostFlight is told that t lost a flight, and reports whether the loop
// must be woken for it: a held topic that this takes below its limit goes
// back in the due heap, due now.
func (st *subjectTable) lostFlight(t *topic) bool {
	if t.flights--; t.flights == 0 {
		st.idleNow(t)
	}
	// Its flight's group may have room now: its next scan reads from
	// its cursor (see groupResumeAt).
	t.groupResume = false
	if !t.limited || st.roomOf(t) <= 0 {
		return false
	}
	st.unhold(t)
	st.reschedule(t, st.now())
	return true
}

// SubjectState is what the dispatcher knows of one subject now.
type SubjectState struct {
	// InFlight counts its deliveries not yet settled.
	InFlight int
	// Limited is set while it is at its in-flight limit with more due:
	// its next first deliveries wait for answers to those in flight.
	Limited bool
	// Paused is set while it is held back by a pause, with due messages.
	Paused bool
}

// Subject reports the state of subject. A subject the dispatcher holds
// nothing of has the zero state. Subjects whose hashes collide share it.
func (d *Dispatcher) Subject(subject string) SubjectState {
	hash := keys.TopicHash(subject)
	d.mu.Lock()
	defer d.mu.Unlock()
	t := d.mu.subjects.byHash[hash]
	if t == nil {
		return SubjectState{}
	}
	return SubjectState{InFlight: t.flights, Limited: t.limited && !t.pausedHeld, Paused: t.pausedHeld}
}

// LimitedSubjects returns up to n of the subjects held at their in-flight
// limit, in subject order.
func (d *Dispatcher) LimitedSubjects(n int) []string {
	d.mu.Lock()
	out := make([]string, 0, len(d.mu.subjects.held))
	for t := range d.mu.subjects.held {
		if !t.pausedHeld {
			out = append(out, t.subject)
		}
	}
	d.mu.Unlock()
	slices.Sort(out)
	return out[:min(n, len(out))]
}
