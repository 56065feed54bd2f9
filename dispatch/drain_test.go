package dispatch_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/natsdelay/natsdelay/dispatch"
	"github.com/natsdelay/natsdelay/keys"
)

// TestDispatcher_Unsettled_HeldTopicDrainsOnAnswers holds a topic's
// deliveries back (Config.Frozen) with two of them out: Unsettled counts
// both until one is ACKed (and its delete committed) and the other NAKed
// (to be delivered again, so not counted); a message of the topic
// scheduled meanwhile does not go out, and does once the hold is lifted.
// Another topic's deliveries are not counted.
func TestDispatcher_Unsettled_HeldTopicDrainsOnAnswers(t *testing.T) {
	hold := keys.TopicHash("held")
	var holding atomic.Bool
	h := newHarness(t, 0, func(c *dispatch.Config) {
		c.AckWait = time.Hour
		c.Frozen = func(th uint64) bool { return holding.Load() && th == hold }
	})
	keep := func(th uint64) bool { return th == hold }
	now := time.Now()
	ks := h.schedule(msgAt("held", now), msgAt("held", now.Add(time.Millisecond)), msgAt("other", now))
	out := map[keys.Key]bool{}
	for range ks {
		out[h.next(10*time.Second).key] = true
	}
	holding.Store(true)
	if err := h.d.ReloadLimits(); err != nil {
		t.Fatal(err)
	}
	unsettled := func(want int) {
		t.Helper()
		checkFor(t, 30*time.Second, func() error {
			if n, sure := h.d.Unsettled(keep); n != want || !sure {
				return fmt.Errorf("Unsettled = %d (sure %v), want %d", n, sure, want)
			}
			return nil
		})
	}
	unsettled(2)
	late := h.schedule(msgAt("held", time.Now()))[0]
	if err := h.ack(ks[0], dispatch.Ack{Kind: dispatch.AckDone}); err != nil {
		t.Fatal(err)
	}
	unsettled(1)
	if err := h.ack(ks[1], dispatch.Ack{Kind: dispatch.AckNak, Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	// NB: a delivery of late, had the hold let it out, would be counted.
	unsettled(0)
	holding.Store(false)
	if err := h.d.ReloadLimits(); err != nil {
		t.Fatal(err)
	}
	if d := h.next(10 * time.Second); d.key != late {
		t.Fatalf("after the hold: delivered %v, want %v (the NAKed one waits an hour)", d.key, late)
	}
}
