package dispatch

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"natsdelay/delaystore"
	"natsdelay/keys"
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
func (d *Dispatcher) Move(k keys.Key, to delaystore.MoveFunc, movedBy string, sync delaystore.SyncMode) (keys.Key, error) {
	if d.del == nil {
		return keys.Key{}, ErrClosed
	}
	// NB: marked as in Cancel, so nothing of k goes out from here until
	// the move commits.
	d.mu.Lock()
	_, marked := d.mu.flights.canceled[k]
	flying := d.mu.flights.byKey[k] != nil || d.del.queued(k)
	if !flying && !marked {
		d.mu.flights.canceled[k] = struct{}{}
	}
	d.waitUnpublishedLocked(k)
	d.mu.Unlock()
	if flying || marked {
		if !flying {
			// Marked with nothing in flight or queued: a delete or a move
			// of k that has committed (its mark goes at the next pass), or
			// another Move under way. Only the store tells them apart.
			if _, err := d.repo.Get(k); errors.Is(err, delaystore.ErrNotFound) {
				return keys.Key{}, fmt.Errorf("dispatch: move %s: %w", k, err)
			}
		}
		return keys.Key{}, fmt.Errorf("%w: %s", ErrInFlight, k)
	}
	var fireAtNs int64
	s, err := d.repo.Move(k, func(m *delaystore.StoredMessage) (int64, error) {
		at, err := to(m)
		fireAtNs = at
		return at, err
	}, movedBy, sync)
	if err != nil {
		d.mu.Lock()
		delete(d.mu.flights.canceled, k)
		d.mu.Unlock()
		return keys.Key{}, err
	}
	d.Notify(s, fireAtNs)
	return s.Key, nil
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
// with their deletes committed together, and returns how many were
// pending. Once it returns none of them is published again. It does not
// end recurring schedules: cancel an occurrence through Cancel for that.
func (d *Dispatcher) CancelMany(ctx context.Context, ks []keys.Key) (int, error) {
	if d.del == nil {
		return 0, ErrClosed
	}
	d.mu.Lock()
	for _, k := range ks {
		d.markSettlingLocked(k)
	}
	for d.mu.inPublish && slices.Contains(ks, d.mu.publishing) {
		d.waitPublishLocked() // as in waitUnpublishedLocked
	}
	d.mu.Unlock()
	type result struct {
		applied bool
		err     error
	}
	ch := make(chan result, len(ks))
	for _, k := range ks {
		d.del.delete(k, func(applied bool, err error) { ch <- result{applied, err} })
	}
	n := 0
	var first error
	for range ks {
		select {
		case r := <-ch:
			if r.applied {
				n++
			}
			if r.err != nil && first == nil {
				first = r.err
			}
		case <-ctx.Done():
			return n, fmt.Errorf("dispatch: cancel %d messages: %w", len(ks), ctx.Err())
		}
	}
	d.stats.canceled.Add(uint64(n))
	return n, first
}
