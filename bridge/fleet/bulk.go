package fleet

import (
	"encoding/json"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge/wire"
)

// maxSample is the most messages a bulk step's reply shows.
const maxSample = 10

// answerBulk runs one step of a bulk operation on every cell not done
// with it, each from its own cursor, and answers the steps summed, with a
// fleet cursor holding each cell's. Every cell's step carries the same
// operation id, chosen here when the request has none, so a step sent
// again, after some cells took it and another did not answer, moves
// nothing twice.
func (n *Node) answerBulk(m *nats.Msg, verb string) {
	var req struct {
		Cursor string `json:"cursor"`
		Op     string `json:"op"`
	}
	if err := json.Unmarshal(m.Data, &req); len(m.Data) > 0 && err != nil {
		answerError(n.nc, m, 400, "%s: the request is not JSON: %v", verb, err)
		return
	}
	cur, err := parseCursor(req.Cursor)
	if err != nil {
		answerError(n.nc, m, 400, `%s: "cursor": %v`, verb, err)
		return
	}
	switch {
	case req.Op != "" && cur.Op != "" && req.Op != cur.Op:
		answerError(n.nc, m, 400, `%s: "op" %q is not the operation of the cursor, %q`, verb, clip(req.Op), cur.Op)
		return
	case req.Op != "" && wire.CheckBulkOp(req.Op) != nil:
		answerError(n.nc, m, 400, `%s: "op" %q: %v`, verb, clip(req.Op), wire.CheckBulkOp(req.Op))
		return
	case req.Op != "":
		cur.Op = req.Op
	case cur.Op == "":
		cur.Op = wire.NewBulkOp()
	}
	answers := n.askCells(verb, func(cell string) []byte {
		if cur.Cells[cell].Done {
			return nil
		}
		body, _ := withField(m.Data, "cursor", cur.Cells[cell].At)
		body, _ = withField(body, "op", cur.Op)
		return body
	})
	if len(answers) > 0 && allSameError(answers) {
		answerError(n.nc, m, answers[0].err.Code, "%s", answers[0].err.Description)
		return
	}
	if err := firstError(answers); err != nil {
		answerError(n.nc, m, err.Code, "%s: the step was not taken by every cell: %s; taken by: %s; send it again as it was: a cell that took it moves nothing twice",
			verb, cellErrors(answers), cellNames(answers, func(a cellAnswer) bool { return a.err == nil }))
		return
	}
	out, err := sumSteps(verb, cur, answers)
	if err != nil {
		answerError(n.nc, m, 503, "%s: %v", verb, err)
		return
	}
	b, _ := json.Marshal(out)
	n.reply(m, b)
}

// sumSteps sums the cells' steps into the fleet's, and moves each cell's
// position in cur to its step's cursor.
func sumSteps(verb string, cur fleetCursor, answers []cellAnswer) (wire.BulkReply, error) {
	out := wire.BulkReply{Verb: strings.TrimPrefix(verb, wire.VerbBulk+"."), Sample: []wire.BulkSample{}, Op: cur.Op}
	next := fleetCursor{Op: cur.Op, Cells: map[string]cellPos{}}
	for cell, p := range cur.Cells {
		next.Cells[cell] = p
	}
	for _, a := range answers {
		var r wire.BulkReply
		if err := json.Unmarshal(a.body, &r); err != nil {
			return wire.BulkReply{}, err
		}
		out.Verb, out.DryRun = r.Verb, r.DryRun
		out.Count += r.Count
		out.Skipped += r.Skipped
		out.Scanned += r.Scanned
		out.Already += r.Already
		out.Sample = append(out.Sample, r.Sample[:min(len(r.Sample), maxSample-len(out.Sample))]...)
		next.Cells[a.cell] = cellPos{At: r.Cursor, Done: r.Cursor == ""}
	}
	if next.more() {
		out.Cursor = next.String()
	}
	return out, nil
}
