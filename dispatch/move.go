package dispatch

import (
	"errors"
	"fmt"

	"natsdelay/delaystore"
	"natsdelay/keys"
)

// ErrInFlight is returned by Move for a message delivered and not yet
// settled (waiting for an answer, or for its redelivery): its delivery's
// answer decides what becomes of it.
var ErrInFlight = errors.New("dispatch: message is in flight")

// Move gives the pending message under k the fire time that to chooses
// (see delaystore.Repository.Move), durably, and returns its new key. A
// message in flight, or whose settling is under way, is refused with
// ErrInFlight; one that is not pending with an error wrapping
// delaystore.ErrNotFound. No delivery of the message under k can begin
// while Move runs, and once it returns the message goes out at its new
// time: a scan that read it before is told it moved, as for a message
// replaced through its Delay-Id.
func (d *Dispatcher) Move(k keys.Key, to delaystore.MoveFunc) (keys.Key, error) {
	if d.del == nil {
		return keys.Key{}, ErrClosed
	}
	// NB: pubMu, as in Cancel: a pass checks the mark and publishes under
	// it, so nothing of k goes out from here until the move commits.
	d.pubMu.Lock()
	d.mu.Lock()
	_, marked := d.mu.flights.canceled[k]
	inFlight := d.mu.flights.byKey[k] != nil || marked || d.del.queued(k)
	if !inFlight {
		d.mu.flights.canceled[k] = struct{}{}
	}
	d.mu.Unlock()
	d.pubMu.Unlock()
	if inFlight {
		return keys.Key{}, fmt.Errorf("%w: %s", ErrInFlight, k)
	}
	var fireAtNs int64
	s, err := d.repo.Move(k, func(m *delaystore.StoredMessage) (int64, error) {
		at, err := to(m)
		fireAtNs = at
		return at, err
	}, delaystore.Sync)
	if err != nil {
		d.mu.Lock()
		delete(d.mu.flights.canceled, k)
		d.mu.Unlock()
		return keys.Key{}, err
	}
	d.Notify(s, fireAtNs)
	return s.Key, nil
}
