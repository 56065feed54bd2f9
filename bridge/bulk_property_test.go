package bridge_test

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge"
	"github.com/natsdelay/natsdelay/bridge/bridgetest"
	"github.com/natsdelay/natsdelay/bridge/wire"
)

// modelMsg is a pending message as the model of the store holds it.
type modelMsg struct {
	subject, tenant, region string
	fireAt                  time.Time
	tag                     string
}

// bulkModel is what the store should hold: every pending message by its
// Delay-Id.
type bulkModel map[string]*modelMsg

// selects is the model's answer to a filter: the ids of the messages it
// selects.
func (m bulkModel) selects(f wire.Filter) map[string]bool {
	from, to := time.Time{}, time.Unix(1<<40, 0)
	if f.From != "" {
		from, _ = time.Parse(time.RFC3339, f.From)
	}
	if f.To != "" {
		to, _ = time.Parse(time.RFC3339, f.To)
	}
	out := map[string]bool{}
	for id, msg := range m {
		if !subjectMatches(f.Subject, msg.subject) || msg.fireAt.Before(from) || !msg.fireAt.Before(to) {
			continue
		}
		if t, ok := f.Headers["Tenant"]; ok && t != msg.tenant {
			continue
		}
		if r, ok := f.Headers["Region"]; ok && r != msg.region {
			continue
		}
		out[id] = true
	}
	return out
}

// subjectMatches is NATS subject matching, written again for the model:
// "*" is one token, a last ">" one or more.
func subjectMatches(pattern, subject string) bool {
	if pattern == "" {
		pattern = ">"
	}
	p, s := strings.Split(pattern, "."), strings.Split(subject, ".")
	for i, tok := range p {
		switch {
		case tok == ">":
			return len(s) > i
		case i >= len(s):
			return false
		case tok != "*" && tok != s[i]:
			return false
		}
	}
	return len(p) == len(s)
}

// bulkProperty is one run of the property: a service, its model, and the
// random source that draws messages, filters and limits.
type bulkProperty struct {
	t     *testing.T
	h     *bridgetest.Harness
	rng   *rand.Rand
	model bulkModel
	base  time.Time
	next  int
}

// TestBulk_Property_StepsSelectExactlyTheModel checks bulk steps against a
// model of the store: random messages on random subjects with random
// headers and fire times, random filters (wildcards, headers, fire
// times), random limits and bounds of the entries a step may read, and
// each operation stepped with its cursors to the end. The messages a dry
// run selects, over all its steps, are exactly those the model selects,
// each once; so are those the real run (CANCEL, or RESCHEDULE by a shift
// forward or back) changes, and afterwards the store holds exactly the
// model. A step that stops on its limit or its bound, wherever that falls
// (inside a subject, on a subject's last message, before a subject whose
// keys lie before the last one's), must resume exactly where it ended.
// NATSDELAY_SOAK=1 runs more rounds, on more messages, and rounds with the
// service's own bound of 10,000 entries and limits up to 10,000.
func TestBulk_Property_StepsSelectExactlyTheModel(t *testing.T) {
	// The small rounds keep at most "most" messages in the store; the big
	// ones fill it to "big", beyond a step's 10,000 entries.
	rounds, perRound, most, bigRounds, big := 30, 30, 300, 0, 0
	if os.Getenv("NATSDELAY_SOAK") != "" {
		rounds, perRound, most, bigRounds, big = 400, 400, 3000, 6, 12_000
	}
	// A failure logs its seed; NATSDELAY_BULK_SEED=<seed> plays it again.
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("NATSDELAY_BULK_SEED"); v != "" {
		var err error
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("NATSDELAY_BULK_SEED %q: %v", v, err)
		}
	}
	t.Logf("seed %d", seed)
	p := &bulkProperty{t: t, h: bridgetest.New(t, nil), rng: rand.New(rand.NewPCG(seed, 0)),
		model: bulkModel{}, base: time.Now().Add(48 * time.Hour).Truncate(time.Second)}
	for range rounds {
		p.add(min(p.rng.IntN(perRound+1), most-len(p.model)))
		scanned := 1 + p.rng.IntN(40)
		limit := 1 + p.rng.IntN(60)
		if p.rng.IntN(4) == 0 {
			limit = 10_000
		}
		p.round(scanned, limit)
	}
	for range bigRounds {
		p.add(big - len(p.model))
		p.round(10_000, []int{1 + p.rng.IntN(10_000), 10_000, 5_000 + p.rng.IntN(5_001)}[p.rng.IntN(3)])
	}
}

// add schedules n new messages, each on a random subject with random
// headers and a random fire time, and adds them to the model.
func (p *bulkProperty) add(n int) {
	p.t.Helper()
	if n <= 0 {
		return
	}
	subjects := []string{"pp.a", "pp.b", "pp.a.x", "pp.a.y", "pp.b.x", "pp.c.y", "pp.c.z", "pq.a.x", "pq.b", "pp.d.x.1"}
	for i := range 40 {
		subjects = append(subjects, "pp.n"+strconv.Itoa(i)+".x")
	}
	nc := p.h.Conn
	inbox := nats.NewInbox()
	replies := make(chan *nats.Msg, n)
	sub, err := nc.ChanSubscribe(inbox+".*", replies)
	if err != nil {
		p.t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	ids := make([]string, n)
	for i := range n {
		id := "m" + strconv.Itoa(p.next)
		p.next++
		msg := &modelMsg{subject: subjects[p.rng.IntN(len(subjects))], tenant: []string{"acme", "globex", ""}[p.rng.IntN(3)],
			region: []string{"eu", "us"}[p.rng.IntN(2)], fireAt: p.base.Add(time.Duration(p.rng.IntN(600)) * time.Minute)}
		m := nats.NewMsg(wire.DefaultIngestPrefix + "." + msg.subject)
		m.Header.Set(wire.HeaderAt, msg.fireAt.UTC().Format(time.RFC3339))
		m.Header.Set(wire.HeaderID, id)
		if msg.tenant != "" {
			m.Header.Set("Tenant", msg.tenant)
		}
		m.Header.Set("Region", msg.region)
		m.Reply = inbox + "." + strconv.Itoa(i)
		if err := nc.PublishMsg(m); err != nil {
			p.t.Fatal(err)
		}
		ids[i] = id
		p.model[id] = msg
	}
	for range n {
		select {
		case rep := <-replies:
			if code := rep.Header.Get(wire.HeaderServiceErrorCode); code != "" {
				p.t.Fatalf("schedule: error %s: %s", code, rep.Header.Get(wire.HeaderServiceError))
			}
			var r wire.ScheduleReply
			i, err := strconv.Atoi(rep.Subject[len(inbox)+1:])
			if err != nil || json.Unmarshal(rep.Data, &r) != nil {
				p.t.Fatalf("schedule: reply %q on %s", rep.Data, rep.Subject)
			}
			p.model[ids[i]].tag = r.Tag
		case <-time.After(time.Minute):
			p.t.Fatalf("schedule: %d messages, not all answered in a minute", n)
		}
	}
}

// filter draws a random filter.
func (p *bulkProperty) filter() wire.Filter {
	subjects := []string{"", ">", "pp.>", "pp.*.x", "pp.a.>", "pp.*", "pp.a.x", "*.b", "*.*.x", "pq.>", "pp.n1.x", "zz.>"}
	f := wire.Filter{Subject: subjects[p.rng.IntN(len(subjects))]}
	switch p.rng.IntN(4) {
	case 1:
		f.Headers = map[string]string{"Tenant": "acme"}
	case 2:
		f.Headers = map[string]string{"Tenant": "globex", "Region": "eu"}
	}
	if p.rng.IntN(3) == 0 {
		lo := p.rng.IntN(700) - 50
		f.From = p.base.Add(time.Duration(lo) * time.Minute).UTC().Format(time.RFC3339)
		f.To = p.base.Add(time.Duration(lo+1+p.rng.IntN(300)) * time.Minute).UTC().Format(time.RFC3339)
	}
	return f
}

// round draws a filter and a verb, runs the dry run and then the real run
// in steps of limit, reading at most scanned entries a step, and checks
// both against the model, and the store against the model after it.
func (p *bulkProperty) round(scanned, limit int) {
	t := p.t
	t.Helper()
	f := p.filter()
	want := p.model.selects(f)
	req := wire.BulkRequest{Filter: f}
	verb := "CANCEL"
	var shift time.Duration
	if p.rng.IntN(2) == 0 {
		verb, shift = "RESCHEDULE", []time.Duration{7 * time.Minute, -3 * time.Minute, 3 * time.Hour}[p.rng.IntN(3)]
		req.Shift = shift.String()
	}
	what := fmt.Sprintf("BULK.%s %+v, limit %d, %d entries a step", verb, req, limit, scanned)
	restore := bridge.SetBulkBounds(scanned, 10_000)
	defer restore()

	req.DryRun = true
	dry := p.run(verb, req, limit, what+" dry run")
	p.sameIDs(dry, want, what+" dry run")
	req.DryRun = false
	done := p.run(verb, req, limit, what)
	if verb == "CANCEL" {
		p.sameIDs(done, want, what)
		for id := range want {
			delete(p.model, id)
		}
	} else {
		if len(done) != len(want) {
			t.Fatalf("%s moved %d messages, the model selects %d", what, len(done), len(want))
		}
		for id := range want {
			p.model[id].fireAt = p.model[id].fireAt.Add(shift)
		}
	}
	p.checkStore(what)
}

// run steps BULK.<verb> with req to the end of its cursor, limit per step,
// and returns the tags the steps answered, in order.
func (p *bulkProperty) run(verb string, req wire.BulkRequest, limit int, what string) []string {
	p.t.Helper()
	req.Limit = &limit
	var tags []string
	for steps := 0; ; steps++ {
		rep, err := p.h.Service.Bulk(verb, req)
		if err != nil {
			p.t.Fatalf("%s: step %d: %v", what, steps, err)
		}
		if rep.Count > limit || len(rep.Sample) != rep.Count {
			p.t.Fatalf("%s: step %d counted %d with a sample of %d", what, steps, rep.Count, len(rep.Sample))
		}
		for _, s := range rep.Sample {
			tags = append(tags, s.Tag)
		}
		if rep.Cursor == "" {
			return tags
		}
		if steps > 2*len(p.model)+10 {
			p.t.Fatalf("%s: %d steps and not done", what, steps)
		}
		req.Cursor = rep.Cursor
	}
}

// sameIDs fails the test unless tags are the model's tags of the ids in
// want, each once.
func (p *bulkProperty) sameIDs(tags []string, want map[string]bool, what string) {
	p.t.Helper()
	byTag := map[string]string{}
	for id, m := range p.model {
		byTag[m.tag] = id
	}
	seen := map[string]bool{}
	for _, tag := range tags {
		id, ok := byTag[tag]
		switch {
		case !ok:
			p.t.Fatalf("%s selected %s, not a pending message", what, tag)
		case seen[id]:
			p.t.Fatalf("%s selected %s (%s) twice", what, id, tag)
		case !want[id]:
			m := p.model[id]
			p.t.Fatalf("%s selected %s (%s at %s, %s/%s), which the model does not", what, id, m.subject, m.fireAt, m.tenant, m.region)
		}
		seen[id] = true
	}
	for id := range want {
		if !seen[id] {
			m := p.model[id]
			p.t.Fatalf("%s missed %s (%s at %s, %s/%s): selected %d of the model's %d", what, id, m.subject, m.fireAt, m.tenant, m.region, len(seen), len(want))
		}
	}
}

// checkStore fails the test unless the service holds exactly the model's
// messages, at the model's fire times, and records their tags in it.
func (p *bulkProperty) checkStore(what string) {
	p.t.Helper()
	svc := p.h.Service
	found := 0
	subjects, err := svc.Subjects(wire.SubjectsRequest{Limit: ptr(1000)})
	if err != nil || subjects.Next != "" {
		p.t.Fatalf("SUBJECTS: %v, next %q", err, subjects.Next)
	}
	for _, s := range subjects.Subjects {
		for after := ""; ; {
			list, err := svc.List(wire.ListRequest{Subject: s.Subject, After: after, Limit: ptr(1000)})
			if err != nil {
				p.t.Fatalf("LIST %s: %v", s.Subject, err)
			}
			for _, got := range list.Messages {
				m := p.model[got.ID]
				at, _ := time.Parse(time.RFC3339Nano, got.FireAt)
				if m == nil || !at.Equal(m.fireAt) || m.subject != got.Subject {
					p.t.Fatalf("after %s the store holds %s (%s at %s), the model %+v", what, got.ID, got.Subject, got.FireAt, m)
				}
				m.tag = got.Tag
				found++
			}
			if list.Next == "" {
				break
			}
			after = list.Next
		}
	}
	if found != len(p.model) {
		p.t.Fatalf("after %s the store holds %d messages, the model %d", what, found, len(p.model))
	}
}

func ptr[T any](v T) *T { return &v }

// TestBulk_CursorOfAnotherSubjectsKey_BadRequest checks that a cursor
// naming a subject with a key that is not of that subject (no step
// answers one) is a 400, and the step changes nothing.
func TestBulk_CursorOfAnotherSubjectsKey_BadRequest(t *testing.T) {
	t.Parallel()
	h := bridgetest.New(t, nil)
	p := &bulkProperty{t: t, h: h, rng: rand.New(rand.NewPCG(1, 0)), model: bulkModel{}, base: time.Now().Add(time.Hour).Truncate(time.Second)}
	p.add(20)
	var tag string
	for _, m := range p.model {
		if m.subject != "pp.a.x" {
			tag = m.tag
		}
	}
	cursor := base64.RawURLEncoding.EncodeToString(fmt.Appendf(nil, `{"s":"pp.a.x","k":%q}`, tag))
	_, err := h.Service.Bulk("CANCEL", wire.BulkRequest{Filter: wire.Filter{Subject: "pp.>"}, Cursor: cursor})
	if !errors.Is(err, wire.ErrBadRequest) || !strings.Contains(err.Error(), `"cursor"`) {
		t.Fatalf("BULK.CANCEL with a cursor of another subject's key: %v, want a 400 about the cursor", err)
	}
	p.checkStore("the refused step")
}
