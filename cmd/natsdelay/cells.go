package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/natsdelay/natsdelay/bridge/fleet"
)

// cellsCmd lists the cells of a fleet (its default), and moves
// partitions between them.
type cellsCmd struct {
	Ls        cellsLsCmd        `cmd:"" default:"withargs" help:"List the cells: the partitions each owns, the node that serves it, its counts, a move under way; the default."`
	Move      cellsMoveCmd      `cmd:"" help:"Move partitions to a cell: each cell that owns some of them hands them over, with their messages; their ingest answers 503 (retryable) meanwhile."`
	Rebalance cellsRebalanceCmd `cmd:"" help:"Plan the moves that even out the partitions over the serving cells and print them; --yes carries them out."`
}

// cellsLsCmd lists the cells of a fleet: every serving cell's answer to
// $DELAY.FLEET.CELLS.
type cellsLsCmd struct {
	clientFlags `embed:""`

	Wait time.Duration `help:"How long to listen for the cells' answers." default:"1s" env:"-"`
	JSON bool          `name:"json" help:"Print the cells' answers as JSON instead of a table." env:"-"`
}

func (c *cellsLsCmd) check() error {
	var p problems
	c.checkClient(&p)
	if c.Wait <= 0 {
		p.add("--wait %v: want a duration > 0, such as 1s", c.Wait)
	}
	return p.err()
}

// Run asks every serving cell for its status, and prints the answers that
// came within --wait, by cell name.
func (c *cellsLsCmd) Run(e *env) error {
	nc, err := c.connect("natsdelay cells", e.log)
	if err != nil {
		return err
	}
	defer nc.Close()
	cells := fleet.GatherCells(nc, c.Wait)
	if len(cells) == 0 {
		return fmt.Errorf("no cell answered on %s within %v: is natsdelay serve --cell running on this NATS?", fleet.CellsSubject, c.Wait)
	}
	slices.SortFunc(cells, func(a, b fleet.Status) int { return strings.Compare(a.Cell, b.Cell) })
	if c.JSON {
		b, err := json.MarshalIndent(cells, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(e.stdout, "%s\n", b)
		return err
	}
	var buf bytes.Buffer
	tw := tabwriter.NewWriter(&buf, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CELL\tSERVED BY\tPARTITIONS\tOWNED\tEPOCH\tPENDING\tSUBJECTS\tMOVING")
	for _, st := range cells {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d of %d\t%d\t%d\t%d\t%s\n", st.Cell, st.Node, fleet.FormatRanges(st.Owned),
			fleet.Count(st.Owned), st.Partitions, st.Epoch, st.Pending, st.Subjects, moving(st.Record))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err = e.stdout.Write(buf.Bytes())
	return err
}

// moving describes the moves under way in rec, "-" when none.
func moving(rec fleet.Record) string {
	var out []string
	if m := rec.Out; m != nil {
		out = append(out, fmt.Sprintf("%s to %s", fleet.FormatRanges(m.Partitions), m.Peer))
	}
	if m := rec.In; m != nil {
		out = append(out, fmt.Sprintf("%s from %s", fleet.FormatRanges(m.Partitions), m.Peer))
	}
	if len(out) == 0 {
		return "-"
	}
	return strings.Join(out, "; ")
}
