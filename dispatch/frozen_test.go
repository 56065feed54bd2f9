package dispatch_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/natsdelay/natsdelay/dispatch"
	"github.com/natsdelay/natsdelay/keys"
)

// TestDispatcher_Frozen_HoldsDeliveriesAndRedeliveries checks that a topic
// Frozen names is neither delivered nor redelivered while the others go
// on, and goes out once it thaws and the limits are reloaded.
func TestDispatcher_Frozen_HoldsDeliveriesAndRedeliveries(t *testing.T) {
	var frozen atomic.Bool
	cold := keys.TopicHash("cold")
	h := newHarness(t, 0, func(c *dispatch.Config) {
		c.AckWait = 200 * time.Millisecond
		c.Frozen = func(hash uint64) bool { return hash == cold && frozen.Load() }
	})
	now := time.Now()
	first := h.schedule(msgAt("cold", now))[0]
	if d := h.next(10 * time.Second); d.key != first {
		t.Fatalf("delivered %v, want %v", d.subject, first)
	}
	// Freeze with cold's delivery unanswered: it must not come again, nor
	// may cold's next message, while warm's come and come again.
	frozen.Store(true)
	if err := h.d.ReloadLimits(); err != nil {
		t.Fatal(err)
	}
	h.schedule(msgAt("cold", now))
	warm := h.schedule(msgAt("warm", now))[0]
	for attempt := uint32(1); attempt <= 2; attempt++ {
		d := h.next(10 * time.Second)
		if d.key != warm || d.attempt != attempt {
			t.Fatalf("delivery %s attempt %d while cold is frozen, want warm's attempt %d", d.subject, d.attempt, attempt)
		}
	}
	if err := h.ack(warm, dispatch.Ack{Kind: dispatch.AckDone}); err != nil {
		t.Fatal(err)
	}
	frozen.Store(false)
	if err := h.d.ReloadLimits(); err != nil {
		t.Fatal(err)
	}
	got := map[uint32]int{}
	for range 2 {
		d := h.next(10 * time.Second)
		if d.subject != "cold" {
			t.Fatalf("delivery of %s after the thaw, want cold's two", d.subject)
		}
		got[d.attempt]++
	}
	if got[1] != 1 || got[2] != 1 {
		t.Fatalf("after the thaw: attempts %v, want the new message's first and the unanswered one's second", got)
	}
}
