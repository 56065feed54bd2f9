package integration_test

import (
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge"
	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/dispatch"
)

// TestConsumers_BadOnesDoNotStallOthers checks that misbehaving consumers
// cost the others nothing: while a subscriber on A never ACKs, a slow
// consumer on B has messages dropped by its client library, and nobody
// listens on C with a large backlog due, the service keeps ingesting and
// delivering D to a normal subscriber; memory stays bounded (in flight
// never exceeds dispatch's MaxInFlight); the silent subject costs one probe
// per back-off rather than a busy loop; and once C gets a subscriber its
// whole backlog comes out, each message first as attempt 1.
func TestConsumers_BadOnesDoNotStallOthers(t *testing.T) {
	t.Parallel()
	const (
		// ackWait is long beside a bounce's round trip even on a loaded
		// machine: a "no responders" that came back after the ack wait
		// would count the bounce as an unanswered attempt (at load 10
		// on two cores, C's first message bounced so, at 500 ms).
		ackWait = 5 * time.Second
		nA      = 50
		nB      = 200
		cBatch  = 5_000
		nD      = 500
		// maxProbes bounds the bounces over the observation window. The
		// back-off doubles from 50 ms, so a second holds a handful of
		// probes; a loop over the backlog would make thousands.
		maxProbes = 100
		window    = time.Second
	)
	// nC is the backlog due on the silent subject: 20,000 in make test,
	// and under NATSDELAY_SOAK=1 100,000, what a real outage leaves
	// behind (most of this test's minutes under -race on two cores).
	nC := 20_000
	if os.Getenv("NATSDELAY_SOAK") != "" {
		nC = 100_000
	}
	dPerRun := nD / (nC / cBatch)
	// MaxInFlight is not a bridge setting, so the service runs with
	// dispatch's default, and that is the bound memory must respect.
	maxInFlight := uint64(dispatch.DefaultConfig().MaxInFlight)

	h := newHarness(t, func(c *bridge.Config) { c.Delivery.AckWait = ackWait })

	// The in-flight gauge is sampled for the whole test, so a peak between
	// the checks below is seen too.
	var peak atomic.Uint64
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			if n := h.svc.Stats().InFlight; n > peak.Load() {
				peak.Store(n)
			}
			select {
			case <-stopSampling:
				return
			case <-tick.C:
			}
		}
	}()
	stopOnce := sync.OnceFunc(func() { close(stopSampling); <-sampled })
	t.Cleanup(stopOnce)

	// A: receives and never answers, so every message is redelivered each
	// ack wait for as long as the test runs.
	ncA := connect(t, h.srv)
	var gotA atomic.Int64
	if _, err := ncA.Subscribe("consumers.a", func(*nats.Msg) { gotA.Add(1) }); err != nil {
		t.Fatal(err)
	}

	// B: a slow consumer. Its handler blocks on the first message, and
	// with room for ten pending messages nats.go drops the rest: the server
	// did deliver them, so to the service they look like lost answers.
	ncB := connect(t, h.srv)
	ncB.SetErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}) // slow-consumer notices are expected
	unblockB := make(chan struct{})
	t.Cleanup(func() { close(unblockB) }) // runs before ncB closes
	subB, err := ncB.Subscribe("consumers.b", func(*nats.Msg) { <-unblockB })
	if err != nil {
		t.Fatal(err)
	}
	if err := subB.SetPendingLimits(10, 1024); err != nil {
		t.Fatal(err)
	}

	// D: the well-behaved consumer that must not notice the others.
	ncD := connect(t, h.srv)
	var muD sync.Mutex
	seenD := make(map[string]bool, nD)
	subD, err := ncD.Subscribe("consumers.d", func(m *nats.Msg) {
		muD.Lock()
		seenD[string(m.Data)] = true
		muD.Unlock()
		_ = m.Respond(nil)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := subD.SetPendingLimits(-1, -1); err != nil {
		t.Fatal(err)
	}
	for _, nc := range []*nats.Conn{ncA, ncB, ncD} {
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}

	batch := func(subject string, from, n int) []*nats.Msg {
		msgs := make([]*nats.Msg, n)
		for i := range msgs {
			msgs[i] = newMsg(subject, strconv.Itoa(from+i), wire.HeaderDelay, "0")
		}
		return msgs
	}
	scheduleMany(t, h.nc, batch("consumers.a", 0, nA))
	scheduleMany(t, h.nc, batch("consumers.b", 0, nB))

	// NB: one message of C goes first, and its bounce is awaited, so C is
	// backing off before the backlog lands. The backlog then meets a
	// blocked subject, and every later bounce is a probe; otherwise the
	// first pass's whole share of C would bounce at once, and the count
	// would measure the pass size instead of the back-off.
	scheduleMany(t, h.nc, batch("consumers.c", 0, 1))
	checkFor(t, wait, 10*time.Millisecond, func() error {
		if h.svc.Stats().NoResponders == 0 {
			return fmt.Errorf("the first message of C has not bounced yet")
		}
		return nil
	})

	// The backlog of C and the messages of D go in interleaved, so D is
	// ingested and delivered while C is piling up.
	ingestStart := time.Now()
	for i := 1; i < nC; i += cBatch {
		scheduleMany(t, h.nc, batch("consumers.c", i, min(cBatch, nC-i)))
		j := (i / cBatch) * dPerRun
		scheduleMany(t, h.nc, batch("consumers.d", j, dPerRun))
	}
	t.Logf("ingested %d messages for C and %d for D in %v", nC-1, nD, time.Since(ingestStart))

	checkFor(t, wait, 10*time.Millisecond, func() error {
		muD.Lock()
		n := len(seenD)
		muD.Unlock()
		if n != nD {
			return fmt.Errorf("D received %d of %d messages while A, B and C misbehave", n, nD)
		}
		return nil
	})
	// The bad consumers were really exercised: A got deliveries, and B's
	// client dropped some as a slow consumer.
	checkFor(t, wait, 10*time.Millisecond, func() error {
		if gotA.Load() == 0 {
			return fmt.Errorf("A received nothing")
		}
		if d, err := subB.Dropped(); err != nil || d == 0 {
			return fmt.Errorf("B dropped %d messages (err %v), want some", d, err)
		}
		return nil
	})
	if n := pendingFor(t, h.nc, "consumers.c"); n != uint64(nC) {
		t.Fatalf("pending for C = %d while nobody listens, want %d", n, nC)
	}

	// The window is an observation, not a synchronisation: it counts the
	// bounces made while the whole backlog is due and nobody listens.
	before := h.svc.Stats().NoResponders
	deadline := time.After(window)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
watch:
	for {
		select {
		case <-deadline:
			break watch
		case <-tick.C:
		}
		if n := h.svc.Stats().NoResponders - before; n >= maxProbes {
			t.Fatalf("%d no-responders answers within %v with %d due and nobody listening: the service is spinning", n, window, nC)
		}
	}
	probes := h.svc.Stats().NoResponders - before
	t.Logf("no-responders in a %v window with %d due on C: %d (total %d)", window, nC, probes, h.svc.Stats().NoResponders)

	// C's subscriber appears: the whole backlog arrives, and each message's
	// first delivery is attempt 1, because bounces were not counted.
	// Redeliveries after that are allowed, as ACKs under load can miss the
	// short ack wait.
	ncC := connect(t, h.srv)
	var muC sync.Mutex
	firstC := make(map[int]int, nC) // message -> attempt of its first delivery
	subC, err := ncC.Subscribe("consumers.c", func(m *nats.Msg) {
		i, err := strconv.Atoi(string(m.Data))
		if err != nil {
			t.Errorf("delivery on C with payload %q", m.Data)
			return
		}
		a, err := strconv.Atoi(m.Header.Get(wire.HeaderAttempt))
		if err != nil {
			t.Errorf("delivery on C with %s %q", wire.HeaderAttempt, m.Header.Get(wire.HeaderAttempt))
			return
		}
		muC.Lock()
		if _, ok := firstC[i]; !ok {
			firstC[i] = a
		}
		muC.Unlock()
		_ = m.Respond(nil)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := subC.SetPendingLimits(-1, -1); err != nil {
		t.Fatal(err)
	}
	if err := ncC.Flush(); err != nil {
		t.Fatal(err)
	}
	drainStart := time.Now()
	waitProgress(t, wait, nC, func() int {
		muC.Lock()
		defer muC.Unlock()
		return len(firstC)
	}, "C's backlog delivered")
	t.Logf("C's backlog of %d delivered in %v", nC, time.Since(drainStart))
	muC.Lock()
	for i := range nC {
		if a := firstC[i]; a != 1 {
			muC.Unlock()
			t.Fatalf("message %d of C was first delivered as attempt %d, want 1", i, a)
		}
	}
	muC.Unlock()
	// Everything ACKed is gone: what is left is A's and B's.
	checkFor(t, 3*wait, 20*time.Millisecond, func() error {
		if n := pendingFor(t, h.nc, "consumers.c"); n != 0 {
			return fmt.Errorf("pending for C = %d after all were delivered and ACKed", n)
		}
		if n := pendingFor(t, h.nc, "consumers.d"); n != 0 {
			return fmt.Errorf("pending for D = %d after all were delivered and ACKed", n)
		}
		return nil
	})

	stopOnce()
	if p := peak.Load(); p > maxInFlight {
		t.Fatalf("in flight peaked at %d, above MaxInFlight %d", p, maxInFlight)
	}
	t.Logf("in flight peaked at %d (MaxInFlight %d)", peak.Load(), maxInFlight)
}
