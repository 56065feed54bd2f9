package integration_test

import (
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge/wire"
)

// TestDueAtIngest_BehindOlderOnDisk checks per-subject order for
// messages due at ingest (docs/architecture.md, "A message due at
// ingest") against older messages of the same subject that the store
// holds and the dispatcher has not read: a restarted process, with 1,000
// due messages on disk under a pause, is resumed and at once given 100
// more due now, while the subject's in-flight limit of 4 keeps most of
// the 1,000 unread. Every message is delivered, the first deliveries in
// publish order, through the real process, store and server.
func TestDueAtIngest_BehindOlderOnDisk(t *testing.T) {
	t.Parallel()
	const old, fresh = 1000, 100
	srv := startServer(t)
	bin := natsdelayBinary(t)
	dir := t.TempDir()
	nc := connect(t, srv)

	p := startProcess(t, bin, srv.ClientURL(), dir, "--ack-wait", "30s")
	resume := pauseSubjects(t, nc, "handoff.order")
	var batch []*nats.Msg
	for i := range old {
		batch = append(batch, newMsg("handoff.order", strconv.Itoa(i), "Delay", "0s"))
	}
	scheduleMany(t, nc, batch)
	p.kill(t)

	firsts := make(chan int, old+fresh)
	sub, err := nc.Subscribe("handoff.order", func(m *nats.Msg) {
		if m.Header.Get(wire.HeaderAttempt) == "1" {
			n, _ := strconv.Atoi(string(m.Data))
			firsts <- n
		}
		_ = m.Respond([]byte("+ACK"))
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	p = startProcess(t, bin, srv.ClientURL(), dir, "--ack-wait", "30s", "--subject-max-in-flight", "4")
	t.Cleanup(func() { p.kill(t) })
	resume()
	for i := old; i < old+fresh; i++ {
		schedule(t, nc, newMsg("handoff.order", strconv.Itoa(i), "Delay", "0s"))
	}
	for i := range old + fresh {
		select {
		case n := <-firsts:
			if n != i {
				t.Fatalf("first delivery %d of handoff.order is message %d: out of publish order", i, n)
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("%d of %d messages of handoff.order delivered after a minute", i, old+fresh)
		}
	}
}

// TestDueAtIngest_IdleSubjects_HandedOff checks that the group commit
// hands a message due at its commit to the dispatcher (INFO's
// handed_off), through the real process: subjects with nothing ahead of
// them each get one message due now, published once the one before was
// delivered, so the frontier is clear at most commits (a pass reading
// the due index at that moment sends it through the scan instead, which
// is why the test asks for one, not all). Each is delivered once.
func TestDueAtIngest_IdleSubjects_HandedOff(t *testing.T) {
	t.Parallel()
	const solo = 20
	srv := startServer(t)
	nc := connect(t, srv)
	p := startProcess(t, natsdelayBinary(t), srv.ClientURL(), t.TempDir(), "--ack-wait", "30s")
	t.Cleanup(func() { p.kill(t) })

	var mu sync.Mutex
	seen := map[string]int{}
	sub, err := nc.Subscribe("handoff.>", func(m *nats.Msg) {
		mu.Lock()
		seen[m.Subject]++
		mu.Unlock()
		_ = m.Respond([]byte("+ACK"))
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	for i := range solo {
		subject := fmt.Sprintf("handoff.solo%d", i)
		schedule(t, nc, newMsg(subject, "x", "Delay", "0s"))
		checkFor(t, 30*time.Second, 10*time.Millisecond, func() error {
			mu.Lock()
			defer mu.Unlock()
			if seen[subject] == 0 {
				return fmt.Errorf("%s not delivered", subject)
			}
			return nil
		})
	}
	checkFor(t, 30*time.Second, 10*time.Millisecond, func() error {
		if n := info(t, nc).Counts.Pending; n != 0 {
			return fmt.Errorf("%d pending", n)
		}
		return nil
	})
	if got := info(t, nc).Stats.HandedOff; got == 0 {
		t.Fatalf("none of %d messages due at ingest on idle subjects handed off", solo)
	}
	mu.Lock()
	defer mu.Unlock()
	for s, n := range seen {
		if n != 1 {
			t.Fatalf("%s delivered %d times, want once", s, n)
		}
	}
}
