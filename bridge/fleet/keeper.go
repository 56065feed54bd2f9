package fleet

import (
	"encoding/json"
	"fmt"
)

// A cell that is a Raft cluster keeps its record in the cell's replicated
// store, not in a file of each node's: every change of it (a move's
// steps, the partitions owned, the epoch) is a write that a quorum holds
// before the step goes on, and the node that leads next reads the record
// the last leader left and carries its move on from there. Each node's
// data dir keeps only the record it started the cell with.

// Keeper is what a Node of a cluster cell needs of its service to keep
// the cell's record in the replicated store (a *bridge.Service is one).
type Keeper interface {
	// FleetRecord returns the record stored, or nil.
	FleetRecord() ([]byte, error)
	// SetFleetRecord stores the record, once a quorum holds it.
	SetFleetRecord(b []byte) error
	// OnServe has f run each time the node starts to serve as the
	// cluster's leader, before it takes work, every topic frozen until
	// then; nil ends it (see bridge.Service.OnServe).
	OnServe(f func() error) error
}

// takeOver is the serve hook of a cluster cell's node: it reads the
// record the last leader left (the first leader of the cell stores the
// one it started with), puts it in force, and carries on the move out it
// names, if any.
func (n *Node) takeOver() error {
	b, err := n.keeper.FleetRecord()
	if err != nil {
		return fmt.Errorf("fleet: read the cell's replicated record: %w", err)
	}
	n.writeMu.Lock()
	rec := n.rec
	if b == nil {
		err = n.persist(rec)
	} else if err = json.Unmarshal(b, &rec); err == nil && (rec.Cell != n.rec.Cell || rec.Partitions != n.rec.Partitions) {
		err = fmt.Errorf("it is cell %q of a fleet of %d partitions, not cell %q of %d", rec.Cell, rec.Partitions, n.rec.Cell, n.rec.Partitions)
	}
	if err == nil {
		err = n.install(rec)
	}
	n.writeMu.Unlock()
	if err != nil {
		return fmt.Errorf("fleet: the cell's replicated record: %w", err)
	}
	n.log.Info("leading the cell: its replicated record in force", "partitions", FormatRanges(rec.Owned), "epoch", rec.Epoch, "moving_out", rec.Out != nil, "moving_in", rec.In != nil)
	select {
	case <-n.stop:
		return nil
	default:
	}
	if rec.Out != nil && n.canMove() == nil {
		n.resumeOut(*rec.Out)
	}
	return nil
}
