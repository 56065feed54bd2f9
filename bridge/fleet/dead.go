package fleet

import (
	"encoding/json"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge/wire"
)

// answerDeadList answers DEAD.LIST for the fleet. Its order, by key, is
// by subject hash first, and the cells' partitions interleave in it, so
// no one cell's cursor serves the others: the fleet's cursor holds each
// cell's. Each cell is asked from its own, the pages are merged in key
// order, and each cell's cursor moves past what of it the page kept.
func (n *Node) answerDeadList(m *nats.Msg) {
	var req struct {
		After string `json:"after"`
	}
	if err := json.Unmarshal(m.Data, &req); len(m.Data) > 0 && err != nil {
		answerError(n.nc, m, 400, "DEAD.LIST: the request is not JSON: %v", err)
		return
	}
	cur, err := parseCursor(req.After)
	if err != nil {
		answerError(n.nc, m, 400, `DEAD.LIST: "after": %v`, err)
		return
	}
	answers := n.askCells(wire.VerbDeadList, func(cell string) []byte {
		if cur.Cells[cell].Done {
			return nil
		}
		body, _ := withField(m.Data, "after", cur.Cells[cell].At)
		return body
	})
	if err := firstError(answers); err != nil {
		answerError(n.nc, m, err.Code, "%s", err.Description)
		return
	}
	pages, perr := readPages(answers, "dead_letters", deadKey)
	if perr != nil {
		answerError(n.nc, m, 503, "DEAD.LIST: %v", perr)
		return
	}
	kept, _ := mergePages(pages, pageLimit(m.Data), n.budget())
	out := wire.DeadListReply{DeadLetters: []wire.DeadLetterInfo{}}
	for _, it := range kept {
		var d wire.DeadLetterInfo
		_ = json.Unmarshal(it.raw, &d)
		out.DeadLetters = append(out.DeadLetters, d)
	}
	if next := advance(cur, answers, pages, kept); next.more() {
		out.Next = next.String()
	}
	b, _ := json.Marshal(out)
	n.reply(m, b)
}

// deadKey is a dead letter's place in DEAD.LIST: its tag, the hex of its
// key.
func deadKey(raw json.RawMessage) (string, error) {
	var d struct {
		Tag string `json:"tag"`
	}
	err := json.Unmarshal(raw, &d)
	return d.Tag, err
}

// advance moves each asked cell's position in cur past what of its page
// was kept: to its own next cursor when the page kept all its items, else
// to the last item kept. A cell whose page was kept whole and had no next
// is done.
func advance(cur fleetCursor, answers []cellAnswer, pages []cellPage, kept []pageItem) fleetCursor {
	out := fleetCursor{Op: cur.Op, Cells: map[string]cellPos{}}
	for cell, p := range cur.Cells {
		out.Cells[cell] = p
	}
	keptOf := make([]int, len(pages))
	last := make([]string, len(pages))
	for _, it := range kept {
		keptOf[it.cell]++
		last[it.cell] = it.key
	}
	for i, a := range answers {
		switch p := pages[i]; {
		case keptOf[i] == len(p.items):
			out.Cells[a.cell] = cellPos{At: p.next, Done: p.next == ""}
		case keptOf[i] > 0:
			out.Cells[a.cell] = cellPos{At: last[i]}
		}
	}
	return out
}
