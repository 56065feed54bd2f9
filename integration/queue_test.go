package integration_test

import (
	"fmt"
	"github.com/natsdelay/natsdelay/bridge/wire"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"
)

// TestQueueGroup_ExactlyOnce checks that a queue group of three consumers,
// each on its own connection, gets every message exactly once between
// them, and that all their ACKs are applied: nothing stays pending and
// nothing is redelivered.
func TestQueueGroup_ExactlyOnce(t *testing.T) {
	t.Parallel()
	const n = 300
	h := newHarness(t, nil)
	var (
		mu     sync.Mutex
		byTag  = make(map[string]int)
		byCons [3]int
		bad    []string
	)
	for i := range byCons {
		nc := connect(t, h.srv)
		sub, err := nc.QueueSubscribe("work.q", "workers", func(m *nats.Msg) {
			mu.Lock()
			byTag[m.Header.Get(wire.HeaderTag)]++
			byCons[i]++
			if a := m.Header.Get(wire.HeaderAttempt); a != "1" {
				bad = append(bad, fmt.Sprintf("attempt %s of %s", a, m.Header.Get(wire.HeaderTag)))
			}
			mu.Unlock()
			if err := m.Respond(nil); err != nil {
				t.Errorf("ack: %v", err)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	msgs := make([]*nats.Msg, n)
	for i := range msgs {
		msgs[i] = newMsg("work.q", fmt.Sprint(i), "Delay", fmt.Sprintf("%dms", i%100))
	}
	reps := scheduleMany(t, h.nc, msgs)
	waitPending(t, h.nc, 0)
	// Every ACK is applied, so every delivery has been counted.
	mu.Lock()
	defer mu.Unlock()
	for _, r := range reps {
		if c := byTag[r.Tag]; c != 1 {
			t.Errorf("tag %s delivered %d times, want 1", r.Tag, c)
		}
	}
	if len(byTag) != n || len(bad) > 0 {
		t.Fatalf("%d distinct tags, want %d; %v", len(byTag), n, bad)
	}
	for i, c := range byCons {
		if c == 0 {
			t.Errorf("consumer %d got nothing: the deliveries were not spread over the group (%v)", i, byCons)
		}
	}
	if st := h.svc.Stats(); st.Acked != n || st.Redelivered != 0 {
		t.Fatalf("stats %+v, want %d acked and no redelivery", st, n)
	}
}
