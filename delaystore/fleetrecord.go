package delaystore

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/natsdelay/natsdelay/keys"
)

// A cell of a fleet (package bridge/fleet) that is a cluster keeps its
// record of the fleet (the partitions it owns, its epoch, the moves under
// way) in the store with the messages, so that the cluster replicates it
// in the same log and a node that leads next carries a move on where the
// last leader left it:
//
//	metadata/event-repo/fleet-record -> the record, as package fleet encodes it
const fleetRecordKey = "metadata/event-repo/fleet-record"

var _ [len(fleetRecordKey) - keys.Len - 1]struct{} // see repokeys.go

// FleetRecord returns the fleet record stored, or nil when there is none.
func (r *Repository) FleetRecord() ([]byte, error) {
	if r.closed.Load() {
		return nil, ErrClosed
	}
	v, err := r.s.Get([]byte(fleetRecordKey))
	switch {
	case errors.Is(err, ErrNotFound):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("delaystore: read the fleet record: %w", err)
	}
	return bytes.Clone(v), nil
}

// SetFleetRecord stores b, not empty, as the fleet record, in a synced
// commit.
func (r *Repository) SetFleetRecord(b []byte) error {
	if len(b) == 0 {
		return fmt.Errorf("%w: an empty fleet record", ErrInvalidMessage)
	}
	r.wmu.Lock()
	defer r.wmu.Unlock()
	if r.closed.Load() {
		return ErrClosed
	}
	batch := r.s.NewBatch()
	defer batch.Close()
	if err := batch.Set([]byte(fleetRecordKey), b); err != nil {
		return fmt.Errorf("delaystore: write the fleet record: %w", err)
	}
	if err := batch.Commit(Sync); err != nil {
		return fmt.Errorf("delaystore: write the fleet record: %w", err)
	}
	return nil
}
