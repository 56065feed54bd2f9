package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge/fleet"
	"github.com/natsdelay/natsdelay/bridge/wire"
)

// cellsMoveCmd moves partitions to a cell.
type cellsMoveCmd struct {
	clientFlags `embed:""`

	Partitions []string `arg:"" name:"partitions" help:"The partitions to move: numbers and ranges, such as 3 10-20 or 3,10-20."`
	To         string   `name:"to" required:"" help:"The cell to move them to." placeholder:"CELL" env:"-"`
	moveFlags  `embed:""`
}

// moveFlags are the waits of the commands that move partitions.
type moveFlags struct {
	Wait    time.Duration `help:"How long to listen for the cells' answers, to learn who owns what." default:"1s" env:"-"`
	Timeout time.Duration `help:"How long to wait for each move to finish." default:"2m" env:"-"`
}

// check adds what is wrong with the flags to p.
func (m moveFlags) check(p *problems) {
	if m.Wait <= 0 || m.Timeout <= 0 {
		p.add("--wait %v, --timeout %v: want durations > 0", m.Wait, m.Timeout)
	}
}

func (c *cellsMoveCmd) check() error {
	var p problems
	c.checkClient(&p)
	c.moveFlags.check(&p)
	return p.err()
}

// Run learns who owns each partition to move and asks each owner, in
// turn, to move its share to --to.
func (c *cellsMoveCmd) Run(e *env) error {
	nc, err := c.connect("natsdelay cells move", e.log)
	if err != nil {
		return err
	}
	defer nc.Close()
	cells, err := gatherFleet(nc, c.Wait)
	if err != nil {
		return err
	}
	n := cells[0].Partitions
	want, err := fleet.ParseRanges(strings.Join(c.Partitions, ","), n)
	if err != nil {
		return fmt.Errorf("%w; the fleet has %d partitions", err, n)
	}
	var plan []fleet.PlannedMove
	for _, st := range cells {
		if st.Cell == c.To {
			continue
		}
		if share := fleet.Subtract(want, fleet.Subtract(want, st.Owned, n), n); len(share) > 0 {
			plan = append(plan, fleet.PlannedMove{From: st.Cell, To: c.To, Partitions: share})
			want = fleet.Subtract(want, share, n)
		}
	}
	if !slices.ContainsFunc(cells, func(st fleet.Status) bool { return st.Cell == c.To }) {
		return fmt.Errorf("cell %q did not answer within %v: is it serving in the fleet?", c.To, c.Wait)
	}
	if left := fleet.Subtract(want, ownedBy(cells, c.To), n); len(left) > 0 {
		return fmt.Errorf("partitions %s: no cell that answered owns them", fleet.FormatRanges(left))
	}
	if len(plan) == 0 {
		_, err := fmt.Fprintf(e.stdout, "cell %s owns those partitions already\n", c.To)
		return err
	}
	return carryOut(nc, e, plan, c.Timeout)
}

// cellsRebalanceCmd plans, and with --yes carries out, the moves that even
// out the partitions over the serving cells.
type cellsRebalanceCmd struct {
	clientFlags `embed:""`

	Yes       bool `help:"Carry the plan out, one move after another." env:"-"`
	JSON      bool `name:"json" help:"Print the plan as JSON." env:"-"`
	moveFlags `embed:""`
}

func (c *cellsRebalanceCmd) check() error {
	var p problems
	c.checkClient(&p)
	c.moveFlags.check(&p)
	return p.err()
}

// Run prints the plan of the cells that answered, and carries it out
// with --yes.
func (c *cellsRebalanceCmd) Run(e *env) error {
	nc, err := c.connect("natsdelay cells rebalance", e.log)
	if err != nil {
		return err
	}
	defer nc.Close()
	cells, err := gatherFleet(nc, c.Wait)
	if err != nil {
		return err
	}
	plan := fleet.Rebalance(cells, cells[0].Partitions)
	if c.JSON {
		b, err := json.MarshalIndent(append([]fleet.PlannedMove{}, plan...), "", "  ")
		if err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "%s\n", b)
	} else {
		for _, mv := range plan {
			fmt.Fprintf(e.stdout, "move %s (%d) from %s to %s\n", fleet.FormatRanges(mv.Partitions), fleet.Count(mv.Partitions), mv.From, mv.To)
		}
		if len(plan) == 0 {
			fmt.Fprintf(e.stdout, "the %d cells own their even share already\n", len(cells))
		}
	}
	if !c.Yes || len(plan) == 0 {
		if len(plan) > 0 && !c.JSON {
			fmt.Fprintln(e.stdout, "run again with --yes to carry the plan out")
		}
		return nil
	}
	return carryOut(nc, e, plan, c.Timeout)
}

// gatherFleet returns the serving cells' statuses, by name, all of one
// fleet size.
func gatherFleet(nc *nats.Conn, wait time.Duration) ([]fleet.Status, error) {
	cells := fleet.GatherCells(nc, wait)
	if len(cells) == 0 {
		return nil, fmt.Errorf("no cell answered on %s within %v: is natsdelay serve --cell running on this NATS?", fleet.CellsSubject, wait)
	}
	slices.SortFunc(cells, func(a, b fleet.Status) int { return strings.Compare(a.Cell, b.Cell) })
	for _, st := range cells[1:] {
		if st.Partitions != cells[0].Partitions {
			return nil, fmt.Errorf("cells %s and %s have %d and %d partitions: two fleets on one NATS", cells[0].Cell, st.Cell, cells[0].Partitions, st.Partitions)
		}
	}
	return cells, nil
}

// ownedBy is what cell owns, as the cells answered.
func ownedBy(cells []fleet.Status, cell string) []fleet.Range {
	for _, st := range cells {
		if st.Cell == cell {
			return st.Owned
		}
	}
	return nil
}

// carryOut asks each move's source to carry it out, in turn, and prints
// what each did; it stops at the first that fails.
func carryOut(nc *nats.Conn, e *env, plan []fleet.PlannedMove, timeout time.Duration) error {
	for _, mv := range plan {
		b, _ := json.Marshal(fleet.MoveRequest{Partitions: mv.Partitions, To: mv.To})
		start := time.Now()
		r, err := nc.Request(fleet.MoveSubject(mv.From), b, timeout)
		if err == nil {
			err = wire.ParseError(r.Header, r.Data)
		}
		if err != nil {
			return fmt.Errorf("move %s from %s to %s: %w", fleet.FormatRanges(mv.Partitions), mv.From, mv.To, err)
		}
		var rep fleet.MoveReply
		if err := json.Unmarshal(r.Data, &rep); err != nil {
			return fmt.Errorf("move %s from %s to %s: the answer: %w", fleet.FormatRanges(mv.Partitions), mv.From, mv.To, err)
		}
		fmt.Fprintf(e.stdout, "moved %s from %s to %s at epoch %d: %d messages in %v\n", fleet.FormatRanges(rep.Partitions),
			rep.From, rep.To, rep.Epoch, rep.Messages, time.Since(start).Round(time.Millisecond))
	}
	return nil
}
