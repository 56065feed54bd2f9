package server

import (
	"cmp"
	"fmt"

	"github.com/natsdelay/natsdelay/bridge"
	"github.com/natsdelay/natsdelay/bridge/fleet"
	"github.com/natsdelay/natsdelay/bridge/wire"
)

// prepareFleet readies this cell of the fleet o.Fleet names, if any: its
// record (read from the data dir, or made by joining or creating the
// fleet) and the fleet's settings, and moves the service onto the cell's
// own subjects, since the fleet's are routed by the cell's fleet node.
func (s *Server) prepareFleet(o Options, dataDir string, cfg *bridge.Config) (fleet.Record, fleet.Config, error) {
	if o.Fleet == nil {
		return fleet.Record{}, fleet.Config{}, nil
	}
	fc := *o.Fleet
	fc.DataDir, fc.Logger = dataDir, s.log
	fc.IngestPrefix = cmp.Or(cfg.IngestPrefix, wire.DefaultIngestPrefix)
	fc.AckPrefix = cmp.Or(cfg.AckPrefix, wire.DefaultAckPrefix)
	fc.APIPrefix = cmp.Or(cfg.APIPrefix, wire.DefaultAPIPrefix)
	if o.Cluster != nil {
		fc.Node = o.Cluster.NodeID
		fc.Clustered = true
	}
	rec, err := fleet.Prepare(s.nc, fc)
	if err != nil {
		return rec, fc, settingsError{fmt.Errorf("cell %s: %w", fc.Cell, err)}
	}
	cfg.IngestPrefix, cfg.AckPrefix, cfg.APIPrefix = fleet.CellSubjects(rec.Cell)
	s.log.Info("cell of a fleet", "cell", rec.Cell, "partitions", rec.Partitions, "owned", fleet.FormatRanges(rec.Owned), "epoch", rec.Epoch)
	return rec, fc, nil
}

// startFleet starts the fleet node of this cell over the running service.
func (s *Server) startFleet(o Options, rec fleet.Record, fc fleet.Config) error {
	if o.Fleet == nil {
		return nil
	}
	node, err := fleet.New(s.nc, s.svc, rec, fc)
	if err != nil {
		return fmt.Errorf("start the fleet node: %w", err)
	}
	s.push("fleet node", node.Close)
	return nil
}

// frozenAtStart is what the service of cell rec holds still from its
// start: every partition rec does not own, or, in a cluster cell, every
// partition, since its record is the replicated one, which the fleet node
// reads when this node leads (see bridge.Service.OnServe).
func frozenAtStart(rec fleet.Record, fc fleet.Config) func(topicHash uint64) bool {
	if fc.Clustered {
		return func(uint64) bool { return true }
	}
	return fleet.Frozen(rec)
}
