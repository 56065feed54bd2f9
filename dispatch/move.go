package dispatch

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/keys"
)

// ErrInFlight is returned by Move for a message delivered and not yet
// settled (waiting for an answer, or for its redelivery): its delivery's
// answer decides what becomes of it.
var ErrInFlight = errors.New("dispatch: message is in flight")

// Move gives the pending message under k the fire time that to chooses
// (see delaystore.Repository.Move), committed with sync, and returns its
// new key. A
// message in flight, or whose settling is under way, is refused with
// ErrInFlight; one that is not pending with an error wrapping
// delaystore.ErrNotFound. No delivery of the message under k can begin
// while Move runs, and once it returns the message goes out at its new
// time: a scan that read it before is told it moved, as for a message
// replaced through its Delay-Id.
//
// A move committed with NoSync goes out only once Flush has made it
// durable: a crash before then may undo it, and the message, delivered
// under its new key, would be pending under its old one again.
func (d *Dispatcher) Move(k keys.Key, to delaystore.MoveFunc, movedBy string, sync delaystore.SyncMode) (keys.Key, error) {
	if d.del == nil {
		return keys.Key{}, ErrClosed
	}
	// Until its new key is told of, nothing is handed off (see Committing).
	c := d.beginCommit(never, false)
	defer d.endCommit(c)
	if err := d.markMoving(k); err != nil {
		return keys.Key{}, err
	}
	var fireAtNs int64
	var held, prev *unflushedMove
	s, err := d.repo.Move(k, func(m *delaystore.StoredMessage) (int64, error) {
		at, err := to(m)
		fireAtNs = at
		d.commitDueAt(c, at)
		if err == nil && sync == delaystore.NoSync {
			// NB: held before the commit, so no scan that reads the new
			// key once it is committed can deliver it before Flush.
			held, prev = d.holdUnflushed(k)
		}
		return at, err
	}, movedBy, sync)
	if err != nil {
		d.mu.Lock()
		d.restoreLocked(k, d.nowNs())
		if held != nil && d.mu.flights.unflushed[k.EventID()] == held {
			// An earlier move without sync of the message, if any, is
			// still to flush.
			delete(d.mu.flights.unflushed, k.EventID())
			if prev != nil {
				d.mu.flights.unflushed[k.EventID()] = prev
			}
		}
		d.mu.Unlock()
		return keys.Key{}, err
	}
	if held == nil {
		// A move with sync makes an earlier one without sync durable
		// too: the message needs no Flush any more.
		d.mu.Lock()
		delete(d.mu.flights.unflushed, k.EventID())
		d.mu.Unlock()
		d.Notify(s, fireAtNs)
		return s.Key, nil
	}
	d.mu.Lock()
	x, withdrawing := d.replacedLocked(s.Replaced)
	held.committed, held.s, held.fireAtNs = true, s, fireAtNs
	d.mu.Unlock()
	if withdrawing {
		d.DeleteWithdrawn(x, nil)
	}
	return s.Key, nil
}

// markMoving marks k so that no delivery of it begins while Move runs,
// or returns why it cannot move (see Move).
func (d *Dispatcher) markMoving(k keys.Key) error {
	// NB: marked as in Cancel, and a publish of k under way waited for,
	// so nothing of k goes out from here until the move commits.
	d.mu.Lock()
	if slices.Contains(d.mu.flights.committed, k) {
		// Its delete has committed (an ACK answered, a TERM) and the
		// next pass has yet to drop its flight: it is gone, not in
		// flight, as its ACK's answer has already told.
		d.mu.Unlock()
		return fmt.Errorf("dispatch: move %s: %w", k, delaystore.ErrNotFound)
	}
	marked := d.mu.flights.isCanceled(k)
	flying := d.mu.flights.byKey[k] != nil || d.del.queued(k)
	if !flying && !marked {
		d.mu.flights.cancel(k)
	}
	d.waitUnpublishedLocked(k)
	d.mu.Unlock()
	if !flying && !marked {
		return nil
	}
	if !flying {
		// Marked with nothing in flight or queued: a delete or a move of
		// k that has committed (its mark goes at the next pass), or
		// another Move under way. Only the store tells them apart.
		if _, err := d.repo.Get(k); errors.Is(err, delaystore.ErrNotFound) {
			return fmt.Errorf("dispatch: move %s: %w", k, err)
		}
	}
	return fmt.Errorf("%w: %s", ErrInFlight, k)
}

// holdUnflushed holds the message of k (by its event ID, which its new
// key keeps) until Flush, and returns the hold and the one it replaced,
// of an earlier move without sync not yet flushed, if any.
func (d *Dispatcher) holdUnflushed(k keys.Key) (held, prev *unflushedMove) {
	held = &unflushedMove{}
	d.mu.Lock()
	prev = d.mu.flights.unflushed[k.EventID()]
	d.mu.flights.unflushed[k.EventID()] = held
	d.mu.Unlock()
	return held, prev
}

// Flush makes every write committed without sync durable (see
// delaystore.Repository.Flush), then lets the messages that Move moved
// without sync before it go out.
func (d *Dispatcher) Flush() error {
	// The moves it lets go are neither held nor told of for a while: until
	// they are, nothing is handed off (see Committing).
	defer d.endCommit(d.beginCommit(never, false))
	// NB: only moves committed before the flush begins are surely in it.
	var ready []*unflushedMove
	d.mu.Lock()
	for id, u := range d.mu.flights.unflushed {
		if u.committed {
			ready = append(ready, u)
			delete(d.mu.flights.unflushed, id)
		}
	}
	d.mu.Unlock()
	if err := d.repo.Flush(); err != nil {
		d.mu.Lock()
		for _, u := range ready {
			// Held again, unless another move of the message came since.
			if _, ok := d.mu.flights.unflushed[u.s.Key.EventID()]; !ok {
				d.mu.flights.unflushed[u.s.Key.EventID()] = u
			}
		}
		d.mu.Unlock()
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, u := range ready {
		d.arrivedLocked(u.s.Key, u.fireAtNs)
	}
	return nil
}

// InFlight reports whether the message under k is delivered and not yet
// settled in this process: waiting for an answer or for its redelivery.
func (d *Dispatcher) InFlight(k keys.Key) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	f := d.mu.flights.byKey[k]
	return f != nil && f.state != stateSettling
}

// CancelMany deletes the pending messages under ks, as Cancel does each,
// with their deletes committed together, tells each it deleted as
// Canceled, and returns how many were pending. Once it returns none of
// them is published again. It does not end recurring schedules: cancel an
// occurrence through Cancel for that.
func (d *Dispatcher) CancelMany(ctx context.Context, ks []keys.Key) (int, error) {
	return d.deleteMany(ctx, ks, true)
}

// DropMany deletes the pending messages under ks as CancelMany does, but
// as messages that go on elsewhere, not canceled: it tells nothing of
// them and counts none as canceled. A cell of a fleet drops the copies of
// a partition another cell now owns.
func (d *Dispatcher) DropMany(ctx context.Context, ks []keys.Key) (int, error) {
	return d.deleteMany(ctx, ks, false)
}

// deleteMany is CancelMany, telling and counting the deletes as canceled
// if canceled is set.
func (d *Dispatcher) deleteMany(ctx context.Context, ks []keys.Key, canceled bool) (int, error) {
	if d.del == nil {
		return 0, ErrClosed
	}
	// What the events tell of each, read before its delete (nothing when
	// nobody is told).
	type told struct {
		about   *about
		attempt uint32
	}
	var tell []told
	if d.cfg.Lifecycle != nil && canceled {
		tell = make([]told, len(ks))
		for i, k := range ks {
			tell[i].about, tell[i].attempt = d.aboutKey(k)
		}
	}
	d.mu.Lock()
	for _, k := range ks {
		d.mu.flights.markSettling(k)
	}
	for d.mu.inPublish && slices.Contains(ks, d.mu.publishing) {
		d.waitPublishLocked() // as in waitUnpublishedLocked
	}
	d.mu.Unlock()
	type result struct {
		i       int
		applied bool
		err     error
	}
	ch := make(chan result, len(ks))
	for i, k := range ks {
		d.del.delete(k, func(applied bool, err error) { ch <- result{i, applied, err} })
	}
	n := 0
	var first error
	for range ks {
		select {
		case r := <-ch:
			if r.applied {
				n++
				if tell != nil {
					d.happenedTo(Canceled, ks[r.i], tell[r.i].about, tell[r.i].attempt, "")
				}
			}
			if r.err != nil && first == nil {
				first = r.err
			}
		case <-ctx.Done():
			return n, fmt.Errorf("dispatch: cancel %d messages: %w", len(ks), ctx.Err())
		}
	}
	if canceled {
		d.stats.canceled.Add(uint64(n))
	}
	return n, first
}
