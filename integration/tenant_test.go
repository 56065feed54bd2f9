package integration_test

import (
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge"
	"github.com/natsdelay/natsdelay/bridge/wire"
)

// tenantSize is the messages due of the busy tenant and the subjects they
// are spread over: 100,000 over 1,000 under NATSDELAY_SOAK=1 (make soak),
// 5,000 over 50 in make test. Either way its subjects together could
// take the whole in-flight window, each within its own default share.
func tenantSize() (due, subjects int) {
	if os.Getenv("NATSDELAY_SOAK") != "" {
		return 100_000, 1000
	}
	return 5_000, 50
}

// TestLimits_KeyHeader_TenantDoesNotDelayAnother checks a limit keyed on
// a header: with `--key-header Tenant --max-in-flight 50` on >, a tenant
// whose consumer never answers, with its messages due over many subjects
// (enough to fill the whole window by the subjects' own shares) and on a
// subject it shares with another tenant, has exactly 50 deliveries in
// flight, across all its subjects; the other tenant's first deliveries,
// on a subject of its own and on the shared one behind the busy tenant's
// backlog, are published within 5 s of their fire time (or their commit,
// if later), by the service's clock: the `at` of their delivered and
// scheduled events. Not a speed figure (the bench measures that): a bound
// far above a loaded machine's pass, and far below what the busy tenant's
// backlog cost before each of its subjects was read once (30 s at soak
// size under the race detector); without the limit they would wait for
// the busy tenant's hour-long ack wait.
func TestLimits_KeyHeader_TenantDoesNotDelayAnother(t *testing.T) {
	t.Parallel()
	due, subjects := tenantSize()
	const window, share = 2048, 50
	h := newHarness(t, func(c *bridge.Config) {
		c.Delivery.MaxInFlight, c.Delivery.AckWait = window, time.Hour
		c.Events, c.EventBuffer = true, 4*window
	})
	setLimit(t, h.nc, wire.Limit{Pattern: ">", KeyHeader: "Tenant", MaxInFlight: share})
	published := eventsAt(t, connect(t, h.srv), wire.EventDelivered, "tenant.>")
	stored := eventsAt(t, connect(t, h.srv), wire.EventScheduled, "tenant.>")

	var busy atomic.Int64 // deliveries of the busy tenant: never answered
	quiet := map[string]chan received{"tenant.b.own": make(chan received, 8), "tenant.shared": make(chan received, 8)}
	sub, err := h.nc.Subscribe("tenant.>", func(m *nats.Msg) {
		if m.Header.Get("Tenant") == "a" {
			busy.Add(1)
			return
		}
		_ = m.Respond([]byte(wire.AnswerAck))
		quiet[m.Subject] <- received{Msg: m, at: time.Now()}
	})
	if err != nil {
		t.Fatal(err)
	}
	_ = sub.SetPendingLimits(-1, -1)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := h.nc.Flush(); err != nil {
		t.Fatal(err)
	}

	for sent := 0; sent < due; sent += 10_000 {
		msgs := make([]*nats.Msg, min(10_000, due-sent))
		for i := range msgs {
			subject := "tenant.a." + strconv.Itoa((sent+i)%subjects)
			if (sent+i)%10 == 0 {
				subject = "tenant.shared" // a tenth share a subject with the other tenant
			}
			msgs[i] = newMsg(subject, strconv.Itoa(sent+i), "Tenant", "a")
		}
		scheduleMany(t, h.nc, msgs)
	}
	checkFor(t, wait, 10*time.Millisecond, func() error {
		if n := busy.Load(); n < share {
			return fmt.Errorf("%d deliveries to the busy tenant, want its share %d first", n, share)
		}
		return nil
	})

	at := time.Now().Add(500 * time.Millisecond)
	mine := []*nats.Msg{
		newMsg("tenant.b.own", "own", "Tenant", "b", wire.HeaderAt, at.UTC().Format(time.RFC3339Nano)),
		newMsg("tenant.shared", "shared", "Tenant", "b", wire.HeaderAt, at.UTC().Format(time.RFC3339Nano)),
	}
	tags := map[string]bool{}
	for _, s := range scheduleMany(t, h.nc, mine) {
		tags[s.Tag] = true
	}
	for subject, ch := range quiet {
		r := next(t, ch, "the other tenant's delivery on "+subject)
		if !tags[r.Header.Get(wire.HeaderTag)] {
			t.Fatalf("%s delivered %q, not the other tenant's", subject, r.Data)
		}
	}
	// Both are ACKed with +OK: the busy tenant's share alone is in flight.
	checkFor(t, wait, 10*time.Millisecond, func() error {
		if st := h.svc.Stats(); st.InFlight != share {
			return fmt.Errorf("%d in flight, want the busy tenant's %d", st.InFlight, share)
		}
		return nil
	})
	if n := busy.Load(); n != share {
		t.Fatalf("%d deliveries to the busy tenant, want exactly its share %d", n, share)
	}
	publishedAt := waitTags(t, published, tags)
	storedAt := waitTags(t, stored, tags)
	for tag := range tags {
		want := at.Truncate(time.Millisecond)
		if s := storedAt[tag]; s.After(want) {
			want = s
		}
		if late := publishedAt[tag].Sub(want); late > 5*time.Second {
			t.Fatalf("the other tenant's %s published %v after it was due and stored, want within 5s (stats %+v)", tag, late, h.svc.Stats())
		}
	}
}

// waitTags waits until l has recorded every tag of want, and returns when.
func waitTags(tb testing.TB, l *tagLog, want map[string]bool) map[string]time.Time {
	tb.Helper()
	out := make(map[string]time.Time, len(want))
	checkFor(tb, wait, 10*time.Millisecond, func() error {
		l.mu.Lock()
		defer l.mu.Unlock()
		for tag := range want {
			at, ok := l.at[tag]
			if !ok {
				return fmt.Errorf("no event of %s yet", tag)
			}
			out[tag] = at
		}
		return nil
	})
	return out
}

// TestLimits_Whole_BoundsThePatternTogether checks a limit on a pattern as
// a whole: with max in flight 5, three subjects with 20 messages due each
// have 5 deliveries in flight together, never more (each ACK confirmed
// before the next delivery is counted), and all 60 are delivered as ACKs
// make room, the wake passing from subject to subject; a subject outside
// the pattern is not bound by it.
func TestLimits_Whole_BoundsThePatternTogether(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	const whole = 5
	setLimit(t, h.nc, wire.Limit{Pattern: "whole.>", Whole: true, MaxInFlight: whole})
	got := subscribe(t, h.nc, "whole.>")
	for _, s := range []string{"whole.a", "whole.b", "whole.c"} {
		scheduleDue(t, h.nc, s, 20)
	}
	answered := map[string]bool{}
	for len(answered) < 60 {
		// Take what is out, then answer it all: no more than the bound
		// may be out unanswered at once, by tag (a redelivery is not a
		// second flight).
		r := next(t, got, fmt.Sprintf("delivery %d of 60", len(answered)+1))
		out := map[string]received{r.Header.Get(wire.HeaderTag): r}
		for drained := false; !drained; {
			select {
			case r := <-got:
				out[r.Header.Get(wire.HeaderTag)] = r
			default:
				drained = true
			}
		}
		if len(out) > whole {
			t.Fatalf("%d deliveries of whole.> unanswered at once, want at most %d", len(out), whole)
		}
		if st := h.svc.Stats(); st.InFlight > whole {
			t.Fatalf("%d in flight, want at most %d", st.InFlight, whole)
		}
		for tag, r := range out {
			if answered[tag] {
				t.Fatalf("%s delivered again after its +OK", tag)
			}
			ackSync(t, h.nc, r.Msg, "")
			answered[tag] = true
		}
	}
	waitPending(t, h.nc, 0)
	// Outside the pattern, the default share.
	other := subscribe(t, h.nc, "other.x")
	scheduleDue(t, h.nc, "other.x", 2*whole)
	for i := range 2 * whole {
		next(t, other, fmt.Sprintf("other delivery %d", i+1))
	}
}

// TestCluster_InProcess_TenantLimit_AcrossLeaderChange checks that a limit
// keyed on a header is replicated as every limit: set on one leader,
// which is then killed, the new leader answers it on LIMITS.GET and holds
// a tenant whose consumer never answers to its max in flight, over two
// subjects.
func TestCluster_InProcess_TenantLimit_AcrossLeaderChange(t *testing.T) {
	const share = 2
	srv := startServer(t)
	nodes := startInProcessCluster(t, srv, 3)
	nc := connect(t, srv)
	leader := serving(t, nodes)
	l := wire.Limit{Pattern: "ctenant.>", KeyHeader: "Tenant", MaxInFlight: share}
	setLimit(t, nc, l)
	leader.kill(t)
	leader = serving(t, nodes)
	var got wire.Limit
	apiCall(t, nc, wire.VerbLimitsGet, wire.PatternRequest{Pattern: "ctenant.>"}, &got)
	if got != l {
		t.Fatalf("LIMITS.GET on the new leader = %+v, want %+v", got, l)
	}
	var delivered atomic.Int64
	sub, err := nc.Subscribe("ctenant.>", func(*nats.Msg) { delivered.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		scheduleInCluster(t, nc, newMsg("ctenant."+strconv.Itoa(i%2), strconv.Itoa(i), "Tenant", "a"))
	}
	checkFor(t, wait, 10*time.Millisecond, func() error {
		if st := leader.svc.Stats(); st.InFlight != share || delivered.Load() != share {
			return fmt.Errorf("%d in flight on the new leader, %d delivered; want the tenant's %d", st.InFlight, delivered.Load(), share)
		}
		return nil
	})
}
