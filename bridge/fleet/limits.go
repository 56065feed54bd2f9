package fleet

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/dispatch"
)

// limitWrites are the verbs that change a limit: each is sent to every
// cell, and sent again it changes nothing more, so a write that some
// cells did not take can be retried whole.
var limitWrites = map[string]bool{
	wire.VerbLimitsSet: true, wire.VerbLimitsDelete: true, wire.VerbPause: true, wire.VerbResume: true,
}

// answerLimitWrite sends a write of a limit to every cell and answers
// with their answer when every cell took it. A cell that did not take it
// makes the answer an error naming it and the cells that did.
func (n *Node) answerLimitWrite(m *nats.Msg, verb string) {
	answers := n.askCells(verb, everyCell(m.Data))
	if len(answers) == 0 {
		answerError(n.nc, m, 503, "%s: no cell is known yet: try again", verb)
		return
	}
	if verb == wire.VerbLimitsDelete {
		answers = deletedSomewhere(answers)
	}
	failed := firstError(answers)
	if failed == nil {
		n.reply(m, answers[0].body)
		return
	}
	took := cellNames(answers, func(a cellAnswer) bool { return a.err == nil })
	if took == "none" && allSameError(answers) {
		answerError(n.nc, m, failed.Code, "%s", failed.Description)
		return
	}
	answerError(n.nc, m, failed.Code, "%s: not taken by every cell: %s; taken by: %s; it changes nothing more sent again: send it again",
		verb, cellErrors(answers), took)
}

// deletedSomewhere reads a 404 as done when another cell deleted the
// limit: a DELETE sent again after some cells took it finds it gone
// there.
func deletedSomewhere(answers []cellAnswer) []cellAnswer {
	i := slices.IndexFunc(answers, func(a cellAnswer) bool { return a.err == nil })
	if i < 0 {
		return answers
	}
	out := slices.Clone(answers)
	for j, a := range out {
		if a.err != nil && a.err.Code == 404 {
			out[j] = cellAnswer{cell: a.cell, body: answers[i].body}
		}
	}
	return out
}

// allSameError reports whether every cell answered the same error: bad
// input, refused alike everywhere.
func allSameError(answers []cellAnswer) bool {
	for _, a := range answers {
		if a.err == nil || *a.err != *answers[0].err {
			return false
		}
	}
	return true
}

// cellErrors names each cell that answered an error, with it.
func cellErrors(answers []cellAnswer) string {
	var b bytes.Buffer
	for _, a := range answers {
		if a.err != nil {
			if b.Len() > 0 {
				b.WriteString("; ")
			}
			fmt.Fprintf(&b, "cell %q: %s", a.cell, a.err.Error())
		}
	}
	return b.String()
}

// answerLimitGet answers LIMITS.GET with the limit every cell holds; a
// 404 if none holds one, and a 409 naming the cells when they differ
// (a write that did not reach every cell).
func (n *Node) answerLimitGet(m *nats.Msg) {
	answers := n.askCells(wire.VerbLimitsGet, everyCell(m.Data))
	if len(answers) == 0 {
		answerError(n.nc, m, 503, "LIMITS.GET: no cell is known yet: try again")
		return
	}
	if allSameError(answers) {
		answerError(n.nc, m, answers[0].err.Code, "%s", answers[0].err.Description)
		return
	}
	for _, a := range answers {
		if a.err != nil && a.err.Code != 404 {
			answerError(n.nc, m, a.err.Code, "%s", a.err.Description)
			return
		}
	}
	for _, a := range answers[1:] {
		if a.err != nil || !sameJSON(a.body, answers[0].body) {
			answerError(n.nc, m, 409, "LIMITS.GET: the cells hold different limits: %s: a write reached some cells only: send it again",
				limitsHeld(answers))
			return
		}
	}
	n.reply(m, answers[0].body)
}

// limitsHeld names what each cell answered.
func limitsHeld(answers []cellAnswer) string {
	var b bytes.Buffer
	for i, a := range answers {
		if i > 0 {
			b.WriteString(", ")
		}
		if a.err != nil {
			fmt.Fprintf(&b, "cell %q: none", a.cell)
			continue
		}
		fmt.Fprintf(&b, "cell %q: %s", a.cell, bytes.TrimSpace(a.body))
	}
	return b.String()
}

// answerLimitsList answers LIMITS.LIST with every cell's limits, most
// specific first; a pattern whose limit differs between cells, or that
// some cells lack, is a 409 naming it.
func (n *Node) answerLimitsList(m *nats.Msg) {
	answers := n.askCells(wire.VerbLimitsList, everyCell(m.Data))
	if err := firstError(answers); err != nil {
		answerError(n.nc, m, err.Code, "%s", err.Description)
		return
	}
	held := map[string]map[string]wire.Limit{}
	var out wire.LimitsReply
	for _, a := range answers {
		var r wire.LimitsReply
		if err := json.Unmarshal(a.body, &r); err != nil {
			answerError(n.nc, m, 503, "LIMITS.LIST: cell %q's answer: %v", a.cell, err)
			return
		}
		for _, l := range r.Limits {
			if held[l.Pattern] == nil {
				held[l.Pattern] = map[string]wire.Limit{}
				out.Limits = append(out.Limits, l)
			}
			held[l.Pattern][a.cell] = l
		}
	}
	for _, l := range out.Limits {
		for _, a := range answers {
			if got, ok := held[l.Pattern][a.cell]; !ok || got != l {
				answerError(n.nc, m, 409, "LIMITS.LIST: the cells hold different limits for %q: ask LIMITS.GET; a write reached some cells only: send it again", l.Pattern)
				return
			}
		}
	}
	slices.SortStableFunc(out.Limits, func(a, b wire.Limit) int { return dispatch.MoreSpecific(a.Pattern, b.Pattern) })
	if out.Limits == nil {
		out.Limits = []wire.Limit{}
	}
	b, _ := json.Marshal(out)
	n.reply(m, b)
}

// sameJSON reports whether a and b are the same JSON value.
func sameJSON(a, b []byte) bool {
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		return false
	}
	ja, _ := json.Marshal(va)
	jb, _ := json.Marshal(vb)
	return bytes.Equal(ja, jb)
}

// reply answers the requester of m, if it waits for an answer, with body.
func (n *Node) reply(m *nats.Msg, body []byte) {
	if m.Reply != "" {
		_ = n.nc.Publish(m.Reply, body)
	}
}
