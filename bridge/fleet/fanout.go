package fleet

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/natsdelay/natsdelay/bridge/wire"
)

// cellAnswer is one cell's answer to a request the fleet sent every
// cell: its body, or its error.
type cellAnswer struct {
	cell string
	body []byte
	err  *wire.ServiceError
}

// askCells sends verb to every cell the map knows, at once, with the body
// bodyOf gives for the cell (nil: the cell is not asked), and returns the
// answers of those asked, in cell order. A cell not heard from for the
// silence, or that does not answer, has a 503 naming it.
func (n *Node) askCells(verb string, bodyOf func(cell string) []byte) []cellAnswer {
	var out []cellAnswer
	var bodies [][]byte
	for _, h := range n.table.heardCells() {
		body := bodyOf(h.status.Cell)
		if body == nil {
			continue
		}
		a := cellAnswer{cell: h.status.Cell}
		if since := time.Since(h.at); since > n.cfg.Silence && h.status.Cell != n.rec.Cell {
			a.err = &wire.ServiceError{Code: 503, Description: fmt.Sprintf("cell %q is unavailable: not heard from for %v: try again", h.status.Cell, since.Round(time.Millisecond))}
		}
		out = append(out, a)
		bodies = append(bodies, body)
	}
	var wg sync.WaitGroup
	for i := range out {
		if out[i].err != nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i].body, out[i].err = n.askCell(out[i].cell, verb, bodies[i])
		}()
	}
	wg.Wait()
	return out
}

// askCell sends body to verb of cell's API and returns its answer.
func (n *Node) askCell(cell, verb string, body []byte) ([]byte, *wire.ServiceError) {
	_, _, api := CellSubjects(cell)
	r, err := n.nc.Request(api+"."+verb, body, 5*time.Second)
	if err != nil {
		return nil, &wire.ServiceError{Code: 503, Description: fmt.Sprintf("cell %q did not answer %s: %v: try again", cell, verb, err)}
	}
	if err := wire.ParseError(r.Header, r.Data); err != nil {
		return nil, wire.NewServiceError(err)
	}
	return r.Data, nil
}

// everyCell is a bodyOf for askCells that sends body to every cell.
func everyCell(body []byte) func(string) []byte {
	if body == nil {
		body = []byte{}
	}
	return func(string) []byte { return body }
}

// firstError is the first error among answers, or nil.
func firstError(answers []cellAnswer) *wire.ServiceError {
	for _, a := range answers {
		if a.err != nil {
			return a.err
		}
	}
	return nil
}

// cellNames lists the cells of answers that keep says to, or "none".
func cellNames(answers []cellAnswer, keep func(cellAnswer) bool) string {
	var names []string
	for _, a := range answers {
		if keep(a) {
			names = append(names, a.cell)
		}
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}
