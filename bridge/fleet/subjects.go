package fleet

import (
	"encoding/json"
	"slices"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge/wire"
)

// defaultPage is the page size of SUBJECTS when the request gives none:
// the service's own default.
const defaultPage = 100

// answerSubjects answers SUBJECTS for the fleet. A subject lives in one
// cell, and every cell lists its subjects in subject order after the
// request's "after", so the same request to every cell, merged in subject
// order and cut at the limit, is the fleet's page, and its last subject is
// the cursor for the next page of every cell alike. A cell that does not
// answer fails the page with a 503: a page without it would skip its
// subjects for good.
func (n *Node) answerSubjects(m *nats.Msg) {
	if m.Reply == "" {
		return
	}
	var req wire.SubjectsRequest
	if err := json.Unmarshal(m.Data, &req); len(m.Data) > 0 && err != nil {
		answerError(n.nc, m, 400, "SUBJECTS: the request is not JSON: %v", err)
		return
	}
	limit := defaultPage
	if req.Limit != nil {
		limit = *req.Limit
	}
	replies, err := n.askEveryCell(wire.VerbSubjects, m.Data)
	if err != nil {
		answerError(n.nc, m, err.Code, "%s", err.Description)
		return
	}
	var out wire.SubjectsReply
	more := false
	for _, b := range replies {
		var r wire.SubjectsReply
		if err := json.Unmarshal(b, &r); err != nil {
			answerError(n.nc, m, 503, "SUBJECTS: a cell's answer: %v", err)
			return
		}
		out.Filter = r.Filter
		out.Subjects = append(out.Subjects, r.Subjects...)
		more = more || r.Next != ""
	}
	slices.SortFunc(out.Subjects, func(a, b wire.SubjectInfo) int { return strings.Compare(a.Subject, b.Subject) })
	if len(out.Subjects) > limit {
		out.Subjects, more = out.Subjects[:limit], true
	}
	if out.Subjects == nil {
		out.Subjects = []wire.SubjectInfo{}
	}
	if more && len(out.Subjects) > 0 {
		out.Next = out.Subjects[len(out.Subjects)-1].Subject
	}
	b, _ := json.Marshal(out)
	_ = n.nc.Publish(m.Reply, b)
}

// askEveryCell sends body to verb of every cell the map knows, at once,
// and returns their answers; the first error answer, or a 503 naming a
// cell that did not answer, instead.
func (n *Node) askEveryCell(verb string, body []byte) ([][]byte, *wire.ServiceError) {
	answers := n.askCells(verb, everyCell(body))
	if err := firstError(answers); err != nil {
		return nil, err
	}
	out := make([][]byte, len(answers))
	for i, a := range answers {
		out[i] = a.body
	}
	return out, nil
}
