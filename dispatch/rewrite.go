package dispatch

import (
	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/keys"
)

// Rewrite changes the occurrence of a recurring schedule still to plan
// under k as edit decides (see delaystore.Repository.Rewrite), committed
// with sync, and returns its new key and fire time. As for Move, an
// occurrence in flight is refused with ErrInFlight, no delivery of k can
// begin while Rewrite runs, and a scan that read it before is told it
// moved.
//
// Unlike a replace by Delay-Id, a rewrite keeps the schedule: an
// occurrence planned ahead whose successor is k still goes out, and its
// successor is now under the new key.
func (d *Dispatcher) Rewrite(k keys.Key, edit delaystore.RewriteFunc) (keys.Key, int64, error) {
	if d.del == nil {
		return keys.Key{}, 0, ErrClosed
	}
	// NB: with the planner's lock held no occurrence is planned meanwhile,
	// so the one under k stays the schedule's newest (see cancelSchedule).
	d.planning.Lock()
	defer d.planning.Unlock()
	// Until its new key is told of, nothing is handed off (see Committing).
	c := d.beginCommit(never, false)
	defer d.endCommit(c)
	if err := d.markMoving(k); err != nil {
		return keys.Key{}, 0, err
	}
	var fireAtNs int64
	s, err := d.repo.Rewrite(k, func(m *delaystore.StoredMessage) error {
		err := edit(m)
		fireAtNs = m.FireAtNs
		d.commitDueAt(c, fireAtNs)
		return err
	}, delaystore.Sync)
	d.mu.Lock()
	defer d.mu.Unlock()
	if err != nil {
		d.mu.flights.uncancel(k)
		return keys.Key{}, 0, err
	}
	if f := d.mu.flights.byKey[k]; f != nil {
		d.forgetLocked(f)
	}
	// As in replacedLocked, but the occurrence planned ahead of it, if
	// any, is not withdrawn: its successor is the rewritten one.
	d.mu.flights.settledUncommitted(k)
	// NB: the mark on k goes at the next pass, which an idle loop would
	// not start for up to an hour; until then a rewrite that kept the key
	// (a skip, an edit of the payload) made the next one find k marked
	// and answer that the schedule kept moving.
	d.signal()
	d.mu.ahead.moved(k, s.Key)
	d.waitUnpublishedLocked(k)
	d.arrivedLocked(s.Key, fireAtNs)
	return s.Key, fireAtNs, nil
}
