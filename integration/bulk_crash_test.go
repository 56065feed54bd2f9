package integration_test

import (
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/keys"
)

// bulkCrashSize is the messages a bulk crash test acts on, the limit of
// its steps and how many of its steps it kills: a quick size in make
// test, 100,000 and 17 kills (as the report that found the bugs) under
// NATSDELAY_SOAK=1.
func bulkCrashSize() (messages, limit, kills int) {
	if os.Getenv("NATSDELAY_SOAK") != "" {
		return 100_000, 2000, 17
	}
	return 4000, 500, 4
}

// bulkKiller runs the steps of one bulk operation against the real
// binary and SIGKILLs it inside some of them. moved counts the
// rescheduled events the process publishes (RESCHEDULE and FIRE tell one
// per message moved, before the step's reply), which is how it knows a
// step is under way.
type bulkKiller struct {
	t             *testing.T
	srv           *server.Server
	bin, url, dir string
	proc          *serviceProcess
	nc            *nats.Conn
	moved         atomic.Int64
}

// startBulkKiller starts the binary with --events on a fresh data dir
// and counts its rescheduled events.
func startBulkKiller(t *testing.T) *bulkKiller {
	srv := startServer(t)
	b := &bulkKiller{t: t, srv: srv, bin: natsdelayBinary(t), url: srv.ClientURL(), dir: t.TempDir(), nc: connect(t, srv)}
	sub, err := b.nc.Subscribe(wire.DefaultEventPrefix+"."+wire.EventRescheduled+".>", func(*nats.Msg) { b.moved.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	_ = sub.SetPendingLimits(-1, -1)
	if err := b.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	b.start()
	t.Cleanup(func() {
		if b.proc != nil {
			b.proc.kill(t)
		}
	})
	return b
}

func (b *bulkKiller) start() {
	b.proc = startProcess(b.t, b.bin, b.url, b.dir, "--events")
}

// run runs BULK.<verb> req to its end. The first kills steps are each
// sent, given time to move inside messages (as its events tell) or to
// answer, and SIGKILLed with the process; the process restarts and the
// step is sent again as it was, with the cursor of the last step
// answered: the client of a step whose reply never came retries it. It
// returns the sum of the counts answered and the steps answered.
func (b *bulkKiller) run(verb string, req wire.BulkRequest, kills int, progress *atomic.Int64, inside int64) (count, steps int) {
	t := b.t
	for killed := 0; ; {
		if killed < kills {
			killed++
			if rep, ok := b.stepKilled(verb, req, progress, inside); ok {
				// The step ended before its kill: what it answered
				// stands, as for any reply.
				count, steps = count+rep.Count, steps+1
				if rep.Cursor == "" {
					return count, steps
				}
				req.Cursor = rep.Cursor
			}
			continue
		}
		var rep wire.BulkReply
		apiCall(t, b.nc, wire.VerbBulk+"."+verb, req, &rep)
		count, steps = count+rep.Count, steps+1
		if rep.Cursor == "" {
			return count, steps
		}
		req.Cursor = rep.Cursor
		if steps > 1000 {
			t.Fatalf("%d steps and not done", steps)
		}
	}
}

// stepKilled sends one step and SIGKILLs the process once the step moved
// inside messages or answered, whichever comes first, then restarts it.
// It returns the step's reply if it came before the kill.
func (b *bulkKiller) stepKilled(verb string, req wire.BulkRequest, progress *atomic.Int64, inside int64) (wire.BulkReply, bool) {
	t := b.t
	t.Helper()
	inbox := nats.NewInbox()
	replies := make(chan *nats.Msg, 1)
	sub, err := b.nc.ChanSubscribe(inbox, replies)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	body, _ := json.Marshal(req)
	base := progress.Load()
	if err := b.nc.PublishRequest(wire.DefaultAPIPrefix+"."+wire.VerbBulk+"."+verb, inbox, body); err != nil {
		t.Fatal(err)
	}
	var reply *nats.Msg
	checkFor(t, time.Minute, time.Millisecond, func() error {
		select {
		case reply = <-replies:
			return nil
		default:
		}
		if got := progress.Load() - base; got < inside {
			return fmt.Errorf("BULK.%s step under way: %d of %d", verb, got, inside)
		}
		return nil
	})
	b.proc.kill(t)
	b.proc = nil
	b.start()
	if reply == nil {
		return wire.BulkReply{}, false
	}
	if code := reply.Header.Get(wire.HeaderServiceErrorCode); code != "" {
		t.Fatalf("BULK.%s: error %s: %s", verb, code, reply.Header.Get(wire.HeaderServiceError))
	}
	var rep wire.BulkReply
	if err := json.Unmarshal(reply.Data, &rep); err != nil {
		t.Fatalf("BULK.%s reply %q: %v", verb, reply.Data, err)
	}
	return rep, true
}

// scheduleForBulk schedules n messages due at at (a second apart for each
// subject's batch, so they are not all in one time bucket) across
// subjects subjects under prefix, and returns their event IDs.
func scheduleForBulk(t *testing.T, nc *nats.Conn, prefix string, n, subjects int, at time.Time) map[uint64]bool {
	t.Helper()
	ids := make(map[uint64]bool, n)
	var batch []*nats.Msg
	flush := func() {
		for _, s := range scheduleMany(t, nc, batch) {
			ids[s.Key.EventID()] = true
		}
		batch = batch[:0]
	}
	for i := range n {
		batch = append(batch, newMsg(fmt.Sprintf("%s.s%d", prefix, i%subjects), fmt.Sprint(i),
			"Delay-At", at.UTC().Format(time.RFC3339Nano)))
		if len(batch) == 5000 {
			flush()
		}
	}
	flush()
	return ids
}

// TestBulk_Fire_SIGKILLInsideSteps_EachDeliveredUnderOneTag runs the real
// binary, schedules messages an hour out and fires them all with
// BULK.FIRE, SIGKILLing the process inside its first steps (while its
// moves commit and its messages, due now, go out) and retrying each
// killed step. A consumer ACKs every delivery. It checks that every
// message is delivered and that each is delivered under one tag: a
// redelivery of the same tag is at-least-once, but a message delivered
// under its new key before the move was on disk, and under its old key
// again after the crash undid the move, is delivered twice.
func TestBulk_Fire_SIGKILLInsideSteps_EachDeliveredUnderOneTag(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	t.Parallel()
	n, limit, kills := bulkCrashSize()
	b := startBulkKiller(t)
	var mu sync.Mutex
	tags := map[uint64]map[string]bool{} // event ID -> tags it was delivered under
	var delivered atomic.Int64
	consumer := connect(t, b.srv)
	sub, err := consumer.Subscribe("bulkf.>", func(m *nats.Msg) {
		k, err := keys.ParseTag(m.Header.Get(wire.HeaderTag))
		if err == nil {
			mu.Lock()
			if tags[k.EventID()] == nil {
				tags[k.EventID()] = map[string]bool{}
			}
			tags[k.EventID()][k.Tag()] = true
			mu.Unlock()
		}
		delivered.Add(1)
		_ = m.Respond(nil)
	})
	if err != nil {
		t.Fatal(err)
	}
	_ = sub.SetPendingLimits(-1, -1)
	if err := consumer.Flush(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	ids := scheduleForBulk(t, b.nc, "bulkf", n, 20, time.Now().Add(time.Hour))

	// NB: the filter ">" reads the due index: a fired message moves before
	// the cursor, so no later step meets it again.
	req := wire.BulkRequest{Filter: wire.Filter{Subject: ">"}, Limit: &limit}
	// A killed step is killed once some of its messages were delivered,
	// or once it answered.
	count, steps := b.run("FIRE", req, kills, &delivered, 1)
	waitPendingWithin(t, b.nc, 0, 2*time.Minute)
	checkFor(t, time.Minute, 10*time.Millisecond, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(tags) < len(ids) {
			return fmt.Errorf("%d of %d messages delivered", len(tags), len(ids))
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	twice := 0
	for id := range ids {
		if len(tags[id]) > 1 {
			if twice++; twice <= 5 {
				t.Errorf("event ID %d delivered under %d tags: %v", id, len(tags[id]), tags[id])
			}
		}
	}
	if twice > 0 {
		t.Errorf("%d of %d messages delivered under two tags or more", twice, len(ids))
	}
	t.Logf("fired %d (%d counted in %d steps answered, %d kills inside steps) in %v",
		len(ids), count, steps, kills, time.Since(start).Round(time.Millisecond))
	b.proc.stop(t)
	b.proc = nil
}

// TestBulk_Reschedule_SIGKILLRetrySameOp_MovesEachOnce runs the real
// binary, schedules messages all due at one time, and shifts them by 10
// minutes with BULK.RESCHEDULE under an operation id the client chose,
// SIGKILLing the process inside its first steps (the first of all
// before any reply came, so the retry starts from the start) and sending
// each killed step again with the same op. It checks that every message
// moved exactly once: all are due 10 minutes later, none 20.
func TestBulk_Reschedule_SIGKILLRetrySameOp_MovesEachOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	t.Parallel()
	n, limit, kills := bulkCrashSize()
	b := startBulkKiller(t)
	at := time.Now().Add(time.Hour).Truncate(time.Second)
	scheduleForBulk(t, b.nc, "bulkr", n, 20, at)
	start := time.Now()

	req := wire.BulkRequest{Filter: wire.Filter{Subject: ">"}, Limit: &limit, Op: "reschedule-once", Shift: "10m"}
	count, steps := b.run("RESCHEDULE", req, kills, &b.moved, int64(limit/4))

	// Each due at at + 10m, which a double move would take to at + 20m.
	dueAt := func(d time.Duration) int {
		q := wire.BulkRequest{DryRun: true, Limit: new(int), Filter: wire.Filter{Subject: ">",
			From: at.Add(d).UTC().Format(time.RFC3339Nano), To: at.Add(d + time.Second).UTC().Format(time.RFC3339Nano)}}
		*q.Limit = 10_000
		total := 0
		for {
			var rep wire.BulkReply
			apiCall(t, b.nc, wire.VerbBulk+".CANCEL", q, &rep)
			total += rep.Count
			if rep.Cursor == "" {
				return total
			}
			q.Cursor = rep.Cursor
		}
	}
	if p := pending(t, b.nc); p != uint64(n) {
		t.Fatalf("%d pending, want %d", p, n)
	}
	once, twice, never := dueAt(10*time.Minute), dueAt(20*time.Minute), dueAt(0)
	t.Logf("rescheduled %d (%d counted in %d steps answered, %d kills inside steps) in %v: %d moved once, %d twice, %d never",
		n, count, steps, kills, time.Since(start).Round(time.Millisecond), once, twice, never)
	if once != n {
		t.Errorf("%d of %d messages moved once by 10m; %d moved twice, %d not at all", once, n, twice, never)
	}
	b.proc.stop(t)
	b.proc = nil
}
