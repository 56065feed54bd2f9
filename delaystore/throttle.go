package delaystore

import "fmt"

// Throttling (Delay-Throttle): a message with ThrottleNs set is delivered
// at most once per window per (subject, client id). Its caller sets its
// fire time to the publish time; here, under wmu and in the batch that
// stores it, it becomes one of two things:
//
//   - the next delivery: due at the publish time, or when the window of
//     the delivery before it ends if that is later. The end of the new
//     window (its fire time plus ThrottleNs) is recorded;
//   - folded into the next delivery: when a throttled message of the same
//     (subject, client id) is held, not yet due (or earlier in the same
//     batch), the publish replaces it as any client id replacement does
//     and keeps its fire time, so the newest payload goes out in the
//     delivery already planned. Outcome.Folded says so.
//
// A held message that is already due may be on its way to the subscriber,
// so a publish that meets one is not folded into it: it is the next
// delivery, after that one's window.
//
// The window's end is a record of the duplicate window's kind
// (dedupThrottle) whose expiry is that end: the sweep of expired records
// removes it once it no longer holds anything back, and it is written in
// the batch that stores the message, so a crash keeps both or neither.

// dedupThrottle is the kind of a throttle record: its expiry is when the
// window of the last delivery of (subject, client id) ends, and its fire
// time that delivery's.
const dedupThrottle = 't'

// throttle makes m, a throttled message about to be stored at pos of
// stored (the messages of the batch stored before it), the next delivery
// of its (subject, client id) or folds it into the one held, and reports
// which. wmu must be held.
func (d *dedupBatch) throttle(m *StoredMessage, stored []*StoredMessage) (folded bool, err error) {
	e, err := d.entry(dedupThrottle, m.Subject, m.ClientId)
	if err != nil {
		return false, err
	}
	held, err := d.heldThrottle(m, stored)
	if err != nil {
		return false, err
	}
	if held != nil {
		setFireAt(m, held.FireAtNs)
		if e.dirty {
			// The record's message is the one m replaces in this batch,
			// which is never written; m takes its place.
			e.ref.pos = len(stored)
		}
		return true, nil
	}
	setFireAt(m, max(m.FireAtNs, e.expireNs))
	e.expireNs, e.dirty = m.FireAtNs+m.ThrottleNs, true
	e.ref = dedupRef{pos: len(stored), fireAtNs: m.FireAtNs}
	return false, nil
}

// heldThrottle returns the throttled message of m's (subject, client id)
// that m folds into, or nil: the last of stored with them when there is
// one (it is not delivered yet), else the pending one when it is
// throttled and not yet due.
func (d *dedupBatch) heldThrottle(m *StoredMessage, stored []*StoredMessage) (*StoredMessage, error) {
	for i := len(stored) - 1; i >= 0; i-- {
		if s := stored[i]; s.ClientId == m.ClientId && s.Subject == m.Subject {
			if s.ThrottleNs == 0 {
				return nil, nil // it replaces the pending one and holds nothing
			}
			return s, nil
		}
	}
	p, err := d.r.pendingOf(appendClientIDKey(nil, m.Subject, m.ClientId))
	if err != nil {
		return nil, fmt.Errorf("throttle client id: %w", err)
	}
	if p == nil || p.ThrottleNs == 0 || p.FireAtNs <= d.nowNs {
		return nil, nil
	}
	return p, nil
}

// setFireAt moves m's fire time to fireAtNs, and its expiry with it.
func setFireAt(m *StoredMessage, fireAtNs int64) {
	m.FireAtNs = fireAtNs
	if m.TtlNs != 0 {
		m.ExpireAtNs = fireAtNs + m.TtlNs
	}
}
