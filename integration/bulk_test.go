package integration_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge"
	"github.com/natsdelay/natsdelay/bridge/wire"
)

// bulkRun runs BULK.<verb> with req step by step, limit per step, until
// its cursor ends, and returns the counts summed and the steps taken.
func bulkRun(tb testing.TB, nc *nats.Conn, verb string, req wire.BulkRequest, limit int) (count, skipped, steps int) {
	tb.Helper()
	req.Limit = &limit
	for {
		var rep wire.BulkReply
		apiCall(tb, nc, wire.VerbBulk+"."+verb, req, &rep)
		if rep.Count > limit || len(rep.Sample) > min(rep.Count, 10) || rep.DryRun != req.DryRun {
			tb.Fatalf("BULK.%s step: count %d, sample %d, dry run %v; limit %d", verb, rep.Count, len(rep.Sample), rep.DryRun, limit)
		}
		count, skipped, steps = count+rep.Count, skipped+rep.Skipped, steps+1
		if rep.Cursor == "" {
			return count, skipped, steps
		}
		if steps > 100_000/limit+100 {
			tb.Fatalf("BULK.%s: %d steps and not done", verb, steps)
		}
		req.Cursor = rep.Cursor
	}
}

// TestBulk_DryRunCountEqualsRealCount checks, for every bulk verb and the
// kinds of filter (one subject, wildcards, every subject, fire times,
// header, id prefix, attempts, dead letters), that a dry run changes
// nothing and counts, in bounded steps, exactly what the real run then
// does, and that the real run does it to those messages only.
func TestBulk_DryRunCountEqualsRealCount(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *bridge.Config) { c.Delivery.AckWait = time.Minute })
	base := time.Now().Add(time.Hour).Truncate(time.Second)
	var msgs []*nats.Msg
	for i := range 60 {
		at := base.Add(time.Duration(i) * time.Minute).UTC().Format(time.RFC3339)
		tenant := []string{"acme", "globex"}[i%2]
		msgs = append(msgs, newMsg(fmt.Sprintf("bulk.dry.%d", i%7), "x", "Delay-At", at, "Tenant", tenant, "Delay-Id", fmt.Sprintf("job-%d", i)))
	}
	scheduleMany(t, h.nc, msgs)
	pending := func() uint64 { return info(t, h.nc).Counts.Pending }

	type tc struct {
		verb   string
		req    wire.BulkRequest
		want   int
		remain uint64
	}
	cut := base.Add(30 * time.Minute).UTC().Format(time.RFC3339)
	for _, c := range []tc{
		// 15 of the acme half fire before the cut.
		{"CANCEL", wire.BulkRequest{Filter: wire.Filter{Subject: "bulk.dry.>", To: cut, Headers: map[string]string{"Tenant": "acme"}}}, 15, 45},
		// bulk.dry.3 holds i = 3, 10, ..., 59: 9 messages, of which 10
		// and 24 were canceled.
		{"RESCHEDULE", wire.BulkRequest{Filter: wire.Filter{Subject: "bulk.dry.3"}, Shift: "24h"}, 7, 45},
		// Every subject, by id prefix: job-5, job-50 ... job-59, less the
		// canceled acme ones before the cut (none of them: all >= 30).
		{"FIRE", wire.BulkRequest{Filter: wire.Filter{IDPrefix: "job-5"}}, 11, 45},
	} {
		dry := c.req
		dry.DryRun = true
		n, _, _ := bulkRun(t, h.nc, c.verb, dry, 4)
		if n != c.want || pending() != 60-15*boolInt(c.verb != "CANCEL") {
			t.Fatalf("BULK.%s dry run counted %d, want %d; pending %d", c.verb, n, c.want, pending())
		}
		real, _, steps := bulkRun(t, h.nc, c.verb, c.req, 4)
		if real != n || steps < n/4 {
			t.Fatalf("BULK.%s real run did %d in %d steps, dry run counted %d", c.verb, real, steps, n)
		}
		checkFor(t, wait, 10*time.Millisecond, func() error {
			if p := pending(); p != c.remain {
				return fmt.Errorf("after BULK.%s pending %d, want %d", c.verb, p, c.remain)
			}
			return nil
		})
	}
	// The shifted messages of bulk.dry.3 are a day later; each was moved once.
	var list wire.ListReply
	apiCall(t, h.nc, wire.VerbList, wire.ListRequest{Subject: "bulk.dry.3"}, &list)
	for _, m := range list.Messages {
		if strings.HasPrefix(m.ID, "job-5") {
			continue // fired since
		}
		if at := parseTime(t, m.FireAt); at.Before(base.Add(24*time.Hour)) || at.After(base.Add(25*time.Hour)) {
			t.Fatalf("bulk.dry.3 message %s fires at %s, want a day after its time", m.ID, m.FireAt)
		}
	}
}

func boolInt(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// TestBulk_DeadLetters_ReplayOnceAndDelete checks BULK.REPLAY and
// BULK.DELETE on dead letters: the dry run counts what the real run does,
// a replayed dead letter is delivered again once (to its subject or to
// replay_to) and is no longer a dead letter, so replaying again does
// nothing, and DELETE removes the rest.
func TestBulk_DeadLetters_ReplayOnceAndDelete(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *bridge.Config) { c.Delivery.AckWait = time.Minute })
	got := subscribe(t, h.nc, "bulk.dead.>")
	other := subscribe(t, h.nc, "bulk.other")
	var msgs []*nats.Msg
	for i := range 12 {
		msgs = append(msgs, newMsg([]string{"bulk.dead.a", "bulk.dead.b"}[i%2], fmt.Sprint(i), "Tenant", []string{"acme", "globex"}[i/2%2]))
	}
	scheduleMany(t, h.nc, msgs)
	for range 12 {
		ackSync(t, h.nc, next(t, got, "delivery to TERM").Msg, "+TERM")
	}
	if n := info(t, h.nc).Counts.Dead; n != 12 {
		t.Fatalf("INFO dead = %d, want 12", n)
	}

	a := wire.BulkRequest{Filter: wire.Filter{Subject: "bulk.dead.a"}}
	dry := a
	dry.DryRun = true
	if n, _, _ := bulkRun(t, h.nc, "REPLAY", dry, 4); n != 6 {
		t.Fatalf("BULK.REPLAY dry run counted %d, want 6", n)
	}
	if n, _, _ := bulkRun(t, h.nc, "REPLAY", a, 4); n != 6 {
		t.Fatalf("BULK.REPLAY did %d, want 6", n)
	}
	for range 6 {
		r := next(t, got, "replayed delivery")
		wantAttempt(t, r.Msg, 1)
		if r.Subject != "bulk.dead.a" {
			t.Fatalf("replayed to %s, want bulk.dead.a", r.Subject)
		}
		ackSync(t, h.nc, r.Msg, "+ACK")
	}
	if n, _, _ := bulkRun(t, h.nc, "REPLAY", a, 4); n != 0 {
		t.Fatalf("BULK.REPLAY a second time did %d, want 0: a dead letter is replayed once", n)
	}
	quiet(t, got, 200*time.Millisecond, "a second replay")

	acme := wire.BulkRequest{Filter: wire.Filter{Subject: "bulk.dead.*", Headers: map[string]string{"Tenant": "acme"}}, ReplayTo: "bulk.other"}
	if n, _, _ := bulkRun(t, h.nc, "REPLAY", acme, 2); n != 3 {
		t.Fatalf("BULK.REPLAY to bulk.other did %d, want the 3 acme ones of bulk.dead.b", n)
	}
	for range 3 {
		ackSync(t, h.nc, next(t, other, "delivery replayed elsewhere").Msg, "+ACK")
	}
	del := wire.BulkRequest{Filter: wire.Filter{Subject: ">"}, DryRun: true}
	if n, _, _ := bulkRun(t, h.nc, "DELETE", del, 2); n != 3 {
		t.Fatalf("BULK.DELETE dry run counted %d, want 3", n)
	}
	del.DryRun = false
	if n, _, _ := bulkRun(t, h.nc, "DELETE", del, 2); n != 3 {
		t.Fatalf("BULK.DELETE did %d, want 3", n)
	}
	if n := info(t, h.nc).Counts.Dead; n != 0 {
		t.Fatalf("INFO dead = %d after DELETE, want 0", n)
	}
	for _, c := range []struct {
		verb string
		req  wire.BulkRequest
		want string
	}{
		{"CANCEL", wire.BulkRequest{Filter: wire.Filter{State: "dead"}}, "REPLAY and DELETE"},
		{"DELETE", wire.BulkRequest{Filter: wire.Filter{State: "pending"}}, "dead letters"},
		{"FIRE", wire.BulkRequest{Shift: "1h"}, "RESCHEDULE fields"},
		{"CANCEL", wire.BulkRequest{ReplayTo: "x"}, "REPLAY field"},
		{"RESCHEDULE", wire.BulkRequest{}, `give one of "at"`},
		{"CANCEL", wire.BulkRequest{Cursor: "nope"}, `"cursor"`},
		{"CANCEL", wire.BulkRequest{Filter: wire.Filter{State: "gone"}}, `"state"`},
		{"REPLAY", wire.BulkRequest{ReplayTo: "delay.x"}, "delay"},
	} {
		apiError(t, h.nc, wire.VerbBulk+"."+c.verb, c.req, 400, c.want)
	}
}

// TestCluster_InProcess_BulkResumesOnNewLeader checks that a BULK.CANCEL
// cursor from one leader is resumed by the next after the first is
// killed, leaving exactly the messages outside the filter pending, and
// that a dead letter written before the change is replayed once by the
// new leader.
func TestCluster_InProcess_BulkResumesOnNewLeader(t *testing.T) {
	srv := startServer(t)
	nodes := startInProcessCluster(t, srv, 3)
	serving(t, nodes)
	nc := connect(t, srv)
	got := subscribe(t, nc, "cbulk.dead")
	dead := scheduleInCluster(t, nc, newMsg("cbulk.dead", "x"))
	ackSync(t, nc, next(t, got, "delivery to TERM").Msg, "+TERM")
	var msgs []*nats.Msg
	for i := range 300 {
		msgs = append(msgs, newMsg(fmt.Sprintf("cbulk.s.%d", i%30), "x", "Delay", "1h", "Delay-Id", fmt.Sprint(i)))
	}
	for i := range 20 {
		msgs = append(msgs, newMsg("cbulk.keep", "x", "Delay", "1h", "Delay-Id", fmt.Sprint(i)))
	}
	for _, m := range msgs {
		scheduleInCluster(t, nc, m)
	}

	limit := 40
	req := wire.BulkRequest{Filter: wire.Filter{Subject: "cbulk.s.*"}, Limit: &limit}
	canceled := 0
	for i := 0; ; i++ {
		if i == 3 {
			serving(t, nodes).kill(t)
		}
		var rep wire.BulkReply
		clusterCall(t, nc, wire.VerbBulk+".CANCEL", req, &rep)
		canceled += rep.Count
		if rep.Cursor == "" {
			break
		}
		req.Cursor = rep.Cursor
	}
	var inf wire.InfoReply
	clusterCall(t, nc, wire.VerbInfo, struct{}{}, &inf)
	if canceled != 300 || inf.Counts.Pending != 20 {
		t.Fatalf("canceled %d and %d pending across a leader change; want 300 and the 20 others", canceled, inf.Counts.Pending)
	}
	var rep wire.BulkReply
	clusterCall(t, nc, wire.VerbBulk+".REPLAY", wire.BulkRequest{Filter: wire.Filter{Subject: "cbulk.dead"}}, &rep)
	r := next(t, got, "replayed delivery")
	if rep.Count != 1 || string(r.Data) != "x" || r.Header.Get(wire.HeaderTag) == dead.Tag {
		t.Fatalf("REPLAY on the new leader: count %d, delivered %q with tag %s", rep.Count, r.Data, r.Header.Get(wire.HeaderTag))
	}
	ackSync(t, nc, r.Msg, "+ACK")
	clusterCall(t, nc, wire.VerbBulk+".REPLAY", wire.BulkRequest{Filter: wire.Filter{Subject: "cbulk.dead"}}, &rep)
	if rep.Count != 0 {
		t.Fatalf("a second REPLAY did %d, want 0", rep.Count)
	}
}
