package fleet

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge/wire"
)

// cursorPrefix begins a fleet cursor, which holds each cell's own.
const cursorPrefix = "fleet:"

// fleetCursor is where a paged read or a bulk operation of the fleet
// stands in each cell: each cell's own cursor, or done. A cell it does not
// name begins from the start. Op is the bulk operation's id.
type fleetCursor struct {
	Op    string             `json:"op,omitempty"`
	Cells map[string]cellPos `json:"cells"`
}

type cellPos struct {
	At   string `json:"at,omitempty"`
	Done bool   `json:"done,omitempty"`
}

func (c fleetCursor) String() string {
	b, _ := json.Marshal(c)
	return cursorPrefix + base64.RawURLEncoding.EncodeToString(b)
}

// parseCursor reads a fleet cursor; "" is the start of every cell.
func parseCursor(s string) (fleetCursor, error) {
	c := fleetCursor{Cells: map[string]cellPos{}}
	if s == "" {
		return c, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(s, cursorPrefix))
	if err == nil && strings.HasPrefix(s, cursorPrefix) {
		err = json.Unmarshal(b, &c)
	}
	if err != nil || !strings.HasPrefix(s, cursorPrefix) || c.Cells == nil {
		return fleetCursor{}, fmt.Errorf("cursor %q is not one the fleet answered: want the previous reply's next or cursor, beginning %s", clip(s), cursorPrefix)
	}
	return c, nil
}

// more reports whether some cell has more to read.
func (c fleetCursor) more() bool {
	for _, p := range c.Cells {
		if !p.Done {
			return true
		}
	}
	return false
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// withField returns the JSON object body with field set to v.
func withField(body []byte, field string, v any) ([]byte, error) {
	obj := map[string]json.RawMessage{}
	if len(body) > 0 {
		if err := json.Unmarshal(body, &obj); err != nil {
			return nil, err
		}
	}
	if obj == nil {
		obj = map[string]json.RawMessage{}
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	obj[field] = b
	return json.Marshal(obj)
}

// pageItem is one item of a cell's page: its JSON as the cell answered
// it, the key it is ordered by, and the cell's index among the answers.
type pageItem struct {
	key  string
	cell int
	raw  json.RawMessage
}

// cellPage is a cell's page: its items, and its next cursor.
type cellPage struct {
	items []pageItem
	next  string
}

// readPages reads each cell's page from its answer: the items in field,
// each ordered by keyOf, and "next".
func readPages(answers []cellAnswer, field string, keyOf func(json.RawMessage) (string, error)) ([]cellPage, error) {
	pages := make([]cellPage, len(answers))
	for i, a := range answers {
		var r map[string]json.RawMessage
		var items []json.RawMessage
		err := json.Unmarshal(a.body, &r)
		if err == nil {
			err = json.Unmarshal(r[field], &items)
		}
		if err == nil && r["next"] != nil {
			err = json.Unmarshal(r["next"], &pages[i].next)
		}
		for _, raw := range items {
			key, kerr := keyOf(raw)
			err = cmpOr(err, kerr)
			pages[i].items = append(pages[i].items, pageItem{key: key, cell: i, raw: raw})
		}
		if err != nil {
			return nil, fmt.Errorf("cell %q's answer: %v", a.cell, err)
		}
	}
	return pages, nil
}

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// mergePages merges the cells' pages in key order into one of at most
// limit items and about budget bytes. It stops at the least next of a
// cell that has more: that cell's items after it are not read yet, and
// may come before the others'. full reports whether an item was left.
func mergePages(pages []cellPage, limit, budget int) (kept []pageItem, full bool) {
	var all []pageItem
	bound, bounded := "", false
	for _, p := range pages {
		all = append(all, p.items...)
		if p.next != "" && (!bounded || p.next < bound) {
			bound, bounded = p.next, true
		}
	}
	slices.SortStableFunc(all, func(a, b pageItem) int { return strings.Compare(a.key, b.key) })
	size := 0
	for _, it := range all {
		size += len(it.raw) + 1
		if len(kept) == limit || (bounded && it.key > bound) || (size > budget && len(kept) > 0) {
			return kept, true
		}
		kept = append(kept, it)
	}
	return kept, false
}

// pageLimit is a paged request's "limit", or the default page.
func pageLimit(body []byte) int {
	var r struct {
		Limit *int `json:"limit"`
	}
	if json.Unmarshal(body, &r) == nil && r.Limit != nil && *r.Limit > 0 {
		return *r.Limit
	}
	return defaultPage
}

// budget is the bytes of items a merged page may hold: a message's
// payload, less room for the rest of the reply.
func (n *Node) budget() int { return int(n.nc.MaxPayload()) - 1024 }

// answerSchedules answers SCHEDULES for the fleet. A subject lives in one
// cell, so (subject, name), the order and the cursor of every cell, is
// the fleet's too: the same request goes to every cell, the pages are
// merged, and the next cursor is the last schedule kept, or the least
// next of a cell that stopped short, for every cell alike.
func (n *Node) answerSchedules(m *nats.Msg) {
	answers := n.askCells(wire.VerbSchedules, everyCell(m.Data))
	if err := firstError(answers); err != nil {
		answerError(n.nc, m, err.Code, "%s", err.Description)
		return
	}
	pages, err := readPages(answers, "schedules", scheduleKey)
	if err != nil {
		answerError(n.nc, m, 503, "SCHEDULES: %v", err)
		return
	}
	kept, full := mergePages(pages, pageLimit(m.Data), n.budget())
	out := wire.SchedulesReply{Schedules: []wire.MessageInfo{}}
	_ = json.Unmarshal(m.Data, &struct {
		Subject *string `json:"subject"`
	}{&out.Subject})
	for _, it := range kept {
		var mi wire.MessageInfo
		_ = json.Unmarshal(it.raw, &mi)
		out.Schedules = append(out.Schedules, mi)
	}
	if full && len(kept) > 0 {
		out.Next = kept[len(kept)-1].key
	} else {
		out.Next = leastNext(pages)
	}
	b, _ := json.Marshal(out)
	n.reply(m, b)
}

// scheduleKey is a schedule's place in SCHEDULES: "<subject> <name>", the
// form of its cursor, which sorts as (subject, name) does, no subject
// holding a space.
func scheduleKey(raw json.RawMessage) (string, error) {
	var mi wire.MessageInfo
	if err := json.Unmarshal(raw, &mi); err != nil {
		return "", err
	}
	if mi.Schedule == nil {
		return "", fmt.Errorf("a schedule without its name")
	}
	return mi.Subject + " " + mi.Schedule.Name, nil
}

// leastNext is the least next cursor of the cells that have more.
func leastNext(pages []cellPage) string {
	least := ""
	for _, p := range pages {
		if p.next != "" && (least == "" || p.next < least) {
			least = p.next
		}
	}
	return least
}
