package dispatch_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/natsdelay/natsdelay/dispatch"
	"github.com/natsdelay/natsdelay/keys"
)

// countingClock is a Config.Now that counts its calls. Every pass of the
// dispatch loop reads the clock, so the count over an observation window
// tells an idle loop (a few reads) from a busy one (thousands) without
// measuring speed.
type countingClock struct{ n atomic.Int64 }

func (c *countingClock) now() time.Time { c.n.Add(1); return time.Now() }

// windowAlone sets the in-flight window to n and lets one subject take
// all of it, for tests of the window rather than of the subjects' shares.
func windowAlone(c *dispatch.Config, n int) { c.MaxInFlight, c.SubjectMaxInFlight = n, n }

// maxIdleReads bounds the clock reads of a dispatcher with nothing to do
// over the observation window; a loop that spins makes thousands.
const maxIdleReads = 200

// idleFor fails t if the dispatcher reads the clock more than maxIdleReads
// times within window. The window is an observation window, not a wait for
// an event.
func idleFor(t *testing.T, c *countingClock, window time.Duration, what string) {
	t.Helper()
	before := c.n.Load()
	time.Sleep(window)
	if n := c.n.Load() - before; n > maxIdleReads {
		t.Fatalf("%s: the clock was read %d times in %v: the dispatch loop is spinning", what, n, window)
	}
}

// TestDispatcher_FullWindow_NoBusyLoop checks that a full in-flight window
// whose deliveries all wait for answers leaves the dispatch loop asleep,
// although more messages are due: they wait for room without a busy loop.
func TestDispatcher_FullWindow_NoBusyLoop(t *testing.T) {
	const window = 10
	clock := &countingClock{}
	h := newHarness(t, 0, func(c *dispatch.Config) { windowAlone(c, window); c.AckWait = time.Hour; c.Now = clock.now })
	for i := range 2 * window {
		h.schedule(msgAt(fmt.Sprintf("w.%d", i%3), time.Now()))
	}
	for range window {
		h.next(10 * time.Second)
	}
	checkFor(t, 10*time.Second, func() error {
		if n := h.d.Stats().InFlight; n != window {
			return fmt.Errorf("in flight %d, want %d", n, window)
		}
		return nil
	})
	idleFor(t, clock, 300*time.Millisecond, "window full, every delivery waiting")
	select {
	case d := <-h.pub.deliveries:
		t.Fatalf("delivered %v beyond the in-flight window", d.key)
	default:
	}
}

// TestDispatcher_FullWindow_RedeliversAndRefills checks that a full window
// keeps redeliveries flowing (a redelivery needs no new room: its flight
// holds a slot), that the loop does not spin while the NAKed flights wait,
// and that the messages left behind go out as soon as ACKs free room.
func TestDispatcher_FullWindow_RedeliversAndRefills(t *testing.T) {
	const window, total = 10, 25
	clock := &countingClock{}
	h := newHarness(t, 0, func(c *dispatch.Config) { windowAlone(c, window); c.AckWait = time.Hour; c.Now = clock.now })
	for i := range total {
		h.schedule(msgAt(fmt.Sprintf("r.%d", i%3), time.Now()))
	}
	var first []keys.Key
	for range window {
		first = append(first, h.next(10*time.Second).key)
	}
	// NAK with a delay: the flights wait in the window, not for answers.
	for _, k := range first {
		if err := h.ack(k, dispatch.Ack{Kind: dispatch.AckNak, Delay: 200 * time.Millisecond}); err != nil {
			t.Fatal(err)
		}
	}
	idleFor(t, clock, 100*time.Millisecond, "window full of NAKed deliveries")
	// Nothing frees room until the ACKs below, so the next deliveries can
	// only be the redeliveries.
	seen := map[keys.Key]bool{}
	for range window {
		d := h.next(10 * time.Second)
		if d.attempt != 2 {
			t.Fatalf("delivery of %v attempt %d while the window is full, want a redelivery (attempt 2)", d.key, d.attempt)
		}
		seen[d.key] = true
	}
	for _, k := range first {
		if !seen[k] {
			t.Fatalf("NAKed %v was not redelivered", k)
		}
		if err := h.ack(k, dispatch.Ack{Kind: dispatch.AckDone}); err != nil {
			t.Fatal(err)
		}
	}
	for i := window; i < total; i++ {
		d := h.next(10 * time.Second)
		if d.attempt != 1 || seen[d.key] {
			t.Fatalf("delivery %d: %v attempt %d, want a first delivery", i, d.key, d.attempt)
		}
		seen[d.key] = true
		if err := h.ack(d.key, dispatch.Ack{Kind: dispatch.AckDone}); err != nil {
			t.Fatal(err)
		}
	}
	checkFor(t, 10*time.Second, func() error {
		if n := h.repo.Pending(); n != 0 {
			return fmt.Errorf("pending %d, want 0", n)
		}
		return nil
	})
}
