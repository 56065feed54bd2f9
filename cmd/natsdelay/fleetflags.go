package main

import (
	"strings"

	"github.com/natsdelay/natsdelay/bridge/fleet"
)

// fleetFlags are serve's flags for running as a cell of a fleet.
type fleetFlags struct {
	Cell       string   `name:"cell" help:"Serve a cell of a fleet on this NATS: several cells (each a node or a cluster) that share the fleet's partitions. The first cell creates the fleet; every node of a cluster gives the same name." placeholder:"NAME" group:"Fleet"`
	Partitions int      `name:"partitions" help:"The fleet's number of partitions, fixed when it is created (default 256); a cell joining a fleet takes the fleet's." default:"0" group:"Fleet"`
	FleetCells []string `name:"fleet-cells" help:"The cells that create the fleet together, each owning an even share of the partitions in this order, such as a,b,c: give the same list to each. Without it the first cell owns every partition and later ones none until partitions move." placeholder:"NAME" group:"Fleet"`
}

// checkFleet adds a problem to p for each bad fleet setting.
func (c *fleetFlags) checkFleet(p *problems) {
	if c.Cell == "" {
		if c.Partitions != 0 || len(c.FleetCells) > 0 {
			p.add("--partitions and --fleet-cells: only apply to a cell of a fleet: give --cell")
		}
		return
	}
	if err := c.fleetConfig().Validate(); err != nil {
		for _, e := range leaves(err) {
			msg := strings.TrimPrefix(e.Error(), fleet.ErrInvalidConfig.Error()+": ")
			switch {
			case strings.HasPrefix(msg, "partitions"):
				p.add("--%s", msg)
			case strings.HasPrefix(msg, "founding") || strings.Contains(msg, "founding cells"):
				p.add("--fleet-cells %s: %s", strings.Join(c.FleetCells, ","), msg)
			default:
				p.add("--%s", msg)
			}
		}
	}
}

// fleetConfig is the fleet's configuration from the flags; nil without
// --cell, where serve runs alone.
func (c *fleetFlags) fleetConfig() *fleet.Config {
	if c.Cell == "" {
		return nil
	}
	return &fleet.Config{Cell: c.Cell, Partitions: c.Partitions, Founders: c.FleetCells}
}
