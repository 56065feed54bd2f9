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

// cellsCmd lists the cells of a fleet: every serving cell's answer to
// $DELAY.FLEET.CELLS.
type cellsCmd struct {
	clientFlags `embed:""`

	Wait time.Duration `help:"How long to listen for the cells' answers." default:"1s" env:"-"`
	JSON bool          `name:"json" help:"Print the cells' answers as JSON instead of a table." env:"-"`
}

func (c *cellsCmd) check() error {
	var p problems
	c.checkClient(&p)
	if c.Wait <= 0 {
		p.add("--wait %v: want a duration > 0, such as 1s", c.Wait)
	}
	return p.err()
}

// Run asks every serving cell for its status, and prints the answers that
// came within --wait, by cell name.
func (c *cellsCmd) Run(e *env) error {
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
	fmt.Fprintln(tw, "CELL\tSERVED BY\tPARTITIONS\tOWNED\tEPOCH\tPENDING\tSUBJECTS")
	for _, st := range cells {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d of %d\t%d\t%d\t%d\n", st.Cell, st.Node, fleet.FormatRanges(st.Owned),
			fleet.Count(st.Owned), st.Partitions, st.Epoch, st.Pending, st.Subjects)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err = e.stdout.Write(buf.Bytes())
	return err
}
