package integration_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge"
	"github.com/natsdelay/natsdelay/bridge/wire"
)

// deadGet returns the dead letter kept under tag, through DEAD.GET.
func deadGet(tb testing.TB, h *harness, tag string) wire.DeadLetterInfo {
	tb.Helper()
	var out wire.DeadLetterInfo
	apiCall(tb, h.nc, wire.VerbDeadGet, wire.MessageRef{Tag: tag}, &out)
	return out
}

// deadList lists every dead letter that matches f, page by page.
func deadList(tb testing.TB, h *harness, f wire.Filter, limit int) []wire.DeadLetterInfo {
	tb.Helper()
	var all []wire.DeadLetterInfo
	after := ""
	for {
		var page wire.DeadListReply
		apiCall(tb, h.nc, wire.VerbDeadList, wire.DeadListRequest{Filter: f, Limit: &limit, After: after}, &page)
		all = append(all, page.DeadLetters...)
		if page.Next == "" {
			return all
		}
		after = page.Next
	}
}

// TestDeadStore_KeptWithReasonAndSurvivesRestart checks, on each durable
// engine, that a dead letter is kept in the store with its reason,
// attempts, last answer and time of death even with no dead-letter
// subject, is counted in INFO and SUBJECTS, is listed by DEAD.LIST with a
// filter and paging, and is all still there after a restart.
func TestDeadStore_KeptWithReasonAndSurvivesRestart(t *testing.T) {
	t.Parallel()
	for _, e := range engines {
		if !e.durable {
			continue
		}
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			srv := startServer(t)
			nc := connect(t, srv)
			mod := func(c *bridge.Config) { c.Delivery.AckWait = 200 * time.Millisecond }
			svc := startService(t, srv, e.open(t, dir), mod)
			h := &harness{srv: srv, svc: svc, nc: nc}
			got := subscribe(t, nc, "dead.kept.>")

			term := schedule(t, nc, newMsg("dead.kept.a", "t", "Tenant", "acme"))
			r := next(t, got, "delivery to TERM")
			ackSync(t, nc, r.Msg, "+TERM bad payload")

			nak := schedule(t, nc, newMsg("dead.kept.b", "n", "Delay-Max-Deliver", "2", "Delay-Id", "order-7"))
			for i := 1; i <= 2; i++ {
				r := next(t, got, "delivery to NAK")
				wantAttempt(t, r.Msg, i)
				ackSync(t, nc, r.Msg, "-NAK")
			}
			waitGone(t, nc, nak.Key)
			kept := schedule(t, nc, newMsg("dead.kept.c", "k", "Delay", "1h"))

			check := func(h *harness) {
				t.Helper()
				checkFor(t, wait, 10*time.Millisecond, func() error {
					if n := info(t, h.nc).Counts.Dead; n != 2 {
						return fmt.Errorf("INFO dead = %d, want 2", n)
					}
					return nil
				})
				dl := deadGet(t, h, term.Tag)
				if dl.Reason != "term: bad payload" || dl.Attempts != 1 || dl.LastAnswer != "+TERM bad payload" ||
					dl.Subject != "dead.kept.a" || dl.Headers["Tenant"][0] != "acme" || dl.DiedAt == "" {
					t.Fatalf("dead letter of the TERMed message = %+v", dl)
				}
				dl = deadGet(t, h, nak.Tag)
				if dl.Reason != "max-deliver" || dl.Attempts != 2 || dl.LastAnswer != "-NAK" || dl.ID != "order-7" {
					t.Fatalf("dead letter of the NAKed message = %+v", dl)
				}
				if all := deadList(t, h, wire.Filter{Subject: "dead.kept.>"}, 1); len(all) != 2 {
					t.Fatalf("DEAD.LIST dead.kept.> by pages of 1 = %d dead letters, want 2", len(all))
				}
				if some := deadList(t, h, wire.Filter{Headers: map[string]string{"tenant": "acme"}}, 10); len(some) != 1 || some[0].Tag != term.Tag {
					t.Fatalf("DEAD.LIST by header = %+v, want the TERMed one", some)
				}
				if some := deadList(t, h, wire.Filter{Subject: "dead.kept.b", IDPrefix: "order-"}, 10); len(some) != 1 || some[0].Tag != nak.Tag {
					t.Fatalf("DEAD.LIST by subject and id prefix = %+v, want the NAKed one", some)
				}
				var subj wire.SubjectsReply
				apiCall(t, h.nc, wire.VerbSubjects, wire.SubjectsRequest{Filter: "dead.kept.>"}, &subj)
				want := []wire.SubjectInfo{{Subject: "dead.kept.a", Dead: 1}, {Subject: "dead.kept.b", Dead: 1}, {Subject: "dead.kept.c", Pending: 1}}
				if len(subj.Subjects) != len(want) {
					t.Fatalf("SUBJECTS = %+v, want %+v", subj.Subjects, want)
				}
				for i, w := range want {
					if g := subj.Subjects[i]; g.Subject != w.Subject || g.Dead != w.Dead || g.Pending != w.Pending {
						t.Fatalf("SUBJECTS[%d] = %+v, want %+v", i, g, w)
					}
				}
				if _, err := h.svc.Get(wire.MessageRef{Tag: kept.Tag}); err != nil {
					t.Fatalf("the pending message: %v", err)
				}
			}
			check(h)
			if err := svc.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			h.svc = startService(t, srv, e.open(t, dir), mod)
			check(h)
			apiError(t, nc, wire.VerbDeadGet, wire.MessageRef{Tag: kept.Tag}, 404, "no dead letter")
			apiError(t, nc, wire.VerbDeadList, wire.DeadListRequest{Filter: wire.Filter{State: "pending"}}, 400, `"state"`)
			apiError(t, nc, wire.VerbDeadList, wire.DeadListRequest{Filter: wire.Filter{From: "tomorrow"}}, 400, `"from"`)
		})
	}
}

// TestDeadStore_ExpiresAtRetention checks that a dead letter is removed
// once --dead-retention has passed since its death, and not before.
func TestDeadStore_ExpiresAtRetention(t *testing.T) {
	t.Parallel()
	const retention = 500 * time.Millisecond
	h := newHarness(t, func(c *bridge.Config) {
		c.Expiry.Interval = 20 * time.Millisecond
		c.Expiry.DeadRetention = retention
	})
	got := subscribe(t, h.nc, "dead.retention")
	rep := schedule(t, h.nc, newMsg("dead.retention", "x"))
	ackSync(t, h.nc, next(t, got, "delivery").Msg, "+TERM")
	dl := deadGet(t, h, rep.Tag)
	diedAt := parseTime(t, dl.DiedAt)
	checkFor(t, wait, 10*time.Millisecond, func() error {
		rep := apiRequest(t, h.nc, wire.VerbDeadGet, wire.MessageRef{Tag: rep.Tag})
		if rep.Header.Get(wire.HeaderServiceErrorCode) == "" {
			return fmt.Errorf("dead letter still kept")
		}
		return nil
	})
	if gone := time.Now(); gone.Before(diedAt.Add(retention)) {
		t.Fatalf("dead letter removed at %v, before its retention ended at %v", gone, diedAt.Add(retention))
	}
	if n := info(t, h.nc).Counts.Dead; n != 0 {
		t.Fatalf("INFO dead = %d after the retention, want 0", n)
	}
}

// clusterCall sends body to verb until a leader answers it (no responders,
// timeouts and 503s are elections under way) and decodes the success
// into out; any other error fails tb.
func clusterCall(tb testing.TB, nc *nats.Conn, verb string, body, out any) {
	tb.Helper()
	data, err := json.Marshal(body)
	if err != nil {
		tb.Fatal(err)
	}
	checkFor(tb, time.Minute, 20*time.Millisecond, func() error {
		rep, err := nc.Request(wire.DefaultAPIPrefix+"."+verb, data, wait)
		if err != nil {
			return err
		}
		switch code := rep.Header.Get(wire.HeaderServiceErrorCode); code {
		case "":
		case "503":
			return fmt.Errorf("%s: 503 %s", verb, rep.Header.Get(wire.HeaderServiceError))
		default:
			tb.Fatalf("%s %s: %s %s", verb, data, code, rep.Header.Get(wire.HeaderServiceError))
		}
		return json.Unmarshal(rep.Data, out)
	})
}

// TestCluster_InProcess_DeadLettersSurviveLeaderChange checks that a dead
// letter written by one leader is replicated: after that leader is killed,
// the new one lists it, counts it and serves it.
func TestCluster_InProcess_DeadLettersSurviveLeaderChange(t *testing.T) {
	srv := startServer(t)
	nodes := startInProcessCluster(t, srv, 3)
	serving(t, nodes)
	nc := connect(t, srv)
	got := subscribe(t, nc, "cluster.dead")
	s := scheduleInCluster(t, nc, newMsg("cluster.dead", "x"))
	ackSync(t, nc, next(t, got, "delivery").Msg, "+TERM poison")

	leader := serving(t, nodes)
	var dl wire.DeadLetterInfo
	clusterCall(t, nc, wire.VerbDeadGet, wire.MessageRef{Tag: s.Tag}, &dl)
	leader.kill(t)
	now := serving(t, nodes)
	if now == leader {
		t.Fatalf("%s still serves after it was killed", leader.id)
	}
	clusterCall(t, nc, wire.VerbDeadGet, wire.MessageRef{Tag: s.Tag}, &dl)
	if dl.Reason != "term: poison" || dl.LastAnswer != "+TERM poison" || dl.Subject != "cluster.dead" {
		t.Fatalf("dead letter on the new leader %s = %+v", now.id, dl)
	}
	var list wire.DeadListReply
	clusterCall(t, nc, wire.VerbDeadList, wire.DeadListRequest{Filter: wire.Filter{Subject: "cluster.dead"}}, &list)
	var inf wire.InfoReply
	clusterCall(t, nc, wire.VerbInfo, struct{}{}, &inf)
	if len(list.DeadLetters) != 1 || inf.Counts.Dead != 1 {
		t.Fatalf("new leader %s: DEAD.LIST %d dead letters, INFO dead %d; want 1 and 1", now.id, len(list.DeadLetters), inf.Counts.Dead)
	}
}
