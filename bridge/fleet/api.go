package fleet

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge/wire"
)

// Info is the fleet's answer to INFO: the cells' INFO summed (version,
// engine and config of the cell that answered), and each cell's.
type Info struct {
	wire.InfoReply
	Fleet FleetInfo `json:"fleet"`
}

// FleetInfo describes the fleet in INFO.
type FleetInfo struct {
	Partitions int        `json:"partitions"`
	Cells      []CellInfo `json:"cells"`
}

// CellInfo is one cell in the fleet's INFO: its status, and its counts,
// storage and version, or why it did not answer. Cells may run different
// versions while they are upgraded one at a time, and one cell's store
// may fail while the others' serve: the fleet's own fields show only one.
type CellInfo struct {
	Status
	Version string       `json:"version,omitempty"`
	Storage string       `json:"storage,omitempty"`
	Counts  *wire.Counts `json:"counts,omitempty"`
	Error   string       `json:"error,omitempty"`
}

// routedByRef are the verbs whose request names one message, by tag or by
// subject: each goes to the cell that owns it.
var routedByRef = map[string]bool{
	wire.VerbGet: true, wire.VerbCancel: true, wire.VerbReschedule: true, wire.VerbFire: true,
	wire.VerbList: true, wire.VerbDeadGet: true,
	wire.VerbSchedulePause: true, wire.VerbScheduleResume: true, wire.VerbScheduleTrigger: true,
	wire.VerbScheduleEdit: true, wire.VerbScheduleSkip: true,
}

// routeAPI answers INFO for the fleet and sends the verbs that name one
// message or one subject to its cell's API, keeping the requester's
// reply subject. The others address one cell: they are refused with the
// subject that reaches it.
func (n *Node) routeAPI(m *nats.Msg) {
	verb := m.Subject[len(n.cfg.APIPrefix)+1:]
	switch {
	case verb == wire.VerbInfo:
		n.answerInfo(m)
	case verb == wire.VerbSubjects:
		n.answerSubjects(m)
	case verb == wire.VerbSchedules:
		n.answerSchedules(m)
	case verb == wire.VerbDeadList:
		n.answerDeadList(m)
	case isBulk(verb):
		n.answerBulk(m, verb)
	case limitWrites[verb]:
		n.answerLimitWrite(m, verb)
	case verb == wire.VerbLimitsGet:
		n.answerLimitGet(m)
	case verb == wire.VerbLimitsList:
		n.answerLimitsList(m)
	case routedByRef[verb]:
		var ref struct {
			Tag     string `json:"tag"`
			Subject string `json:"subject"`
		}
		if err := json.Unmarshal(m.Data, &ref); err != nil {
			answerError(n.nc, m, 400, "%s: the request is not JSON: %v", verb, err)
			return
		}
		p, ok := n.partitionOf(m, verb, ref.Tag, ref.Subject)
		if ok {
			n.forwardTo(m, p, func(cell string) string { _, _, api := CellSubjects(cell); return api + "." + verb })
		}
	default:
		_, _, api := CellSubjects("<cell>")
		answerError(n.nc, m, 400, "%s is not served across a fleet of cells yet: ask one cell on %s.%s", verb, api, verb)
	}
}

// isBulk reports whether verb is one of BULK.<verb>.
func isBulk(verb string) bool {
	v, ok := strings.CutPrefix(verb, wire.VerbBulk+".")
	return ok && slices.Contains(wire.BulkVerbs, v)
}

// partitionOf is the partition a request names by tag or else by subject;
// a request that names neither, or a bad tag, is answered with a 400.
func (n *Node) partitionOf(m *nats.Msg, verb, tag, subject string) (int, bool) {
	switch {
	case tag != "":
		p, err := TagPartition(tag, n.rec.Partitions)
		if err != nil {
			answerError(n.nc, m, 400, "%s: %v", verb, err)
			return 0, false
		}
		return p, true
	case subject != "":
		return Partition(subject, n.rec.Partitions), true
	}
	answerError(n.nc, m, 400, "%s: want a tag, or a subject", verb)
	return 0, false
}

// forwardTo sends m, keeping its reply subject, to the subject that
// subjectOf names for the cell that owns partition p.
func (n *Node) forwardTo(m *nats.Msg, p int, subjectOf func(cell string) string) {
	cell, at, ok := n.ownerOf(p)
	switch {
	case !ok:
		answerError(n.nc, m, 503, "partition %d has no owner this node knows of yet: try again", p)
	case cell != n.rec.Cell && time.Since(at) > n.cfg.Silence:
		answerError(n.nc, m, 503, "cell %q, the owner of partition %d, is unavailable: not heard from for %v: try again", cell, p, time.Since(at).Round(time.Millisecond))
	default:
		out := &nats.Msg{Subject: subjectOf(cell), Reply: m.Reply, Header: m.Header, Data: m.Data}
		if err := n.nc.PublishMsg(out); err != nil {
			answerError(n.nc, m, 503, "forwarding to cell %q: %v", cell, err)
		}
	}
}

// routeAckHeader sends an answer published to the ack prefix with the
// message's tag in a header to the ack prefix of the tag's cell.
func (n *Node) routeAckHeader(m *nats.Msg) {
	tag := ""
	for k, v := range m.Header {
		if strings.EqualFold(k, wire.HeaderTag) && len(v) > 0 {
			tag = v[0]
		}
	}
	if p, ok := n.partitionOf(m, "ACK", tag, ""); ok {
		n.forwardTo(m, p, func(cell string) string { _, ack, _ := CellSubjects(cell); return ack })
	}
}

// routeAckSubject sends an answer to <ack prefix>.<tag> to the tag's cell.
func (n *Node) routeAckSubject(m *nats.Msg) {
	tag := m.Subject[len(n.cfg.AckPrefix)+1:]
	if p, ok := n.partitionOf(m, "ACK", tag, ""); ok {
		n.forwardTo(m, p, func(cell string) string { _, ack, _ := CellSubjects(cell); return ack + "." + tag })
	}
}

// answerCells answers CELLS with this cell's status and counts.
func (n *Node) answerCells(m *nats.Msg) {
	if m.Reply == "" {
		return
	}
	st := n.status()
	if info, err := n.svc.Info(); err == nil {
		st.Pending, st.Subjects = info.Counts.Pending, info.Counts.Subjects
	}
	b, _ := json.Marshal(st)
	_ = n.nc.Publish(m.Reply, b)
}

// GatherCells asks every serving cell for its status and returns the
// answers heard within wait, one a cell. It asks again every fifth of
// wait, so a cell that begins to serve meanwhile is heard too.
func GatherCells(nc *nats.Conn, wait time.Duration) []Status {
	inbox := nc.NewInbox()
	ch := make(chan *nats.Msg, 4096)
	sub, err := nc.ChanSubscribe(inbox, ch)
	if err != nil {
		return nil
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.PublishRequest(CellsSubject, inbox, nil); err != nil {
		return nil
	}
	again := time.NewTicker(max(wait/5, time.Millisecond))
	defer again.Stop()
	seen := map[string]bool{}
	var out []Status
	deadline := time.After(wait)
	for {
		select {
		case m := <-ch:
			var st Status
			if json.Unmarshal(m.Data, &st) == nil && st.Cell != "" && !seen[st.Cell] {
				seen[st.Cell] = true
				out = append(out, st)
			}
		case <-again.C:
			_ = nc.PublishRequest(CellsSubject, inbox, nil)
		case <-deadline:
			return out
		}
	}
}

// answerInfo answers INFO with every cell's INFO, asked at once, summed.
func (n *Node) answerInfo(m *nats.Msg) {
	if m.Reply == "" {
		return
	}
	cells := n.table.heardCells()
	infos := make([]CellInfo, len(cells))
	replies := make([]*wire.InfoReply, len(cells))
	var wg sync.WaitGroup
	for i, h := range cells {
		infos[i].Status = h.status
		if since := time.Since(h.at); since > n.cfg.Silence && h.status.Cell != n.rec.Cell {
			infos[i].Error = fmt.Sprintf("unavailable: not heard from for %v", since.Round(time.Millisecond))
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			replies[i], infos[i].Error = n.cellInfo(h.status.Cell)
		}()
	}
	wg.Wait()
	out := Info{Fleet: FleetInfo{Partitions: n.rec.Partitions}}
	for i := range cells {
		if r := replies[i]; r != nil {
			infos[i].Counts, infos[i].Storage, infos[i].Version = &r.Counts, r.Storage, r.Version
			out.add(infos[i].Cell, *r)
		}
	}
	out.Fleet.Cells = infos
	b, _ := json.Marshal(out)
	_ = n.nc.Publish(m.Reply, b)
}

// cellInfo asks one cell for its INFO.
func (n *Node) cellInfo(cell string) (*wire.InfoReply, string) {
	_, _, api := CellSubjects(cell)
	r, err := n.nc.Request(api+"."+wire.VerbInfo, nil, 2*time.Second)
	if err != nil {
		return nil, err.Error()
	}
	if err := wire.ParseError(r.Header, r.Data); err != nil {
		return nil, err.Error()
	}
	var info wire.InfoReply
	if err := json.Unmarshal(r.Data, &info); err != nil {
		return nil, err.Error()
	}
	return &info, ""
}

// add sums a cell's INFO into the fleet's; the first cell's version,
// engine and config stand for the fleet's. The fleet's storage is "ok"
// only while every cell that answered says so; else it is "failing: "
// and each failing cell's cause, so a client that checks the prefix sees
// a fault in any cell.
func (i *Info) add(cell string, r wire.InfoReply) {
	if i.Version == "" {
		i.Version, i.Engine, i.Config = r.Version, r.Engine, r.Config
	}
	switch {
	case r.Storage == "ok" && i.Storage == "":
		i.Storage = "ok"
	case r.Storage != "ok":
		cause := fmt.Sprintf("cell %q: %s", cell, strings.TrimPrefix(r.Storage, "failing: "))
		if i.Storage == "" || i.Storage == "ok" {
			i.Storage = "failing: " + cause
		} else {
			i.Storage += "; " + cause
		}
	}
	c, rc := &i.Counts, r.Counts
	c.Pending += rc.Pending
	c.Subjects += rc.Subjects
	c.InFlight += rc.InFlight
	c.DueNow += rc.DueNow
	c.NextMinute += rc.NextMinute
	c.NextHour += rc.NextHour
	c.NextDay += rc.NextDay
	c.Schedules += rc.Schedules
	c.Dead += rc.Dead
}
