package dispatch_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/dispatch"
	"github.com/natsdelay/natsdelay/keys"
)

// gate is a fence the test raises and lowers; it counts the times it was
// asked.
type gate struct {
	up    atomic.Bool
	asked atomic.Int64
	// downAfter, if positive, lowers the gate once it has been asked that
	// many times.
	downAfter atomic.Int64
}

func (g *gate) held() bool {
	n := g.asked.Add(1)
	if d := g.downAfter.Load(); d > 0 && n >= d {
		g.up.Store(false)
		g.downAfter.Store(0)
	}
	return g.up.Load()
}

// While the fence is down the dispatcher publishes nothing, however long
// messages have been due; once it is up they go out in order, as first
// attempts. This is what keeps a node of a cluster that lost its
// leadership lease (a pause) from delivering from its store.
func TestDispatcher_Fence_NothingPublishedWhileDown(t *testing.T) {
	g := &gate{}
	h := newHarness(t, 0, func(c *dispatch.Config) { c.Fence = g.held })
	now := time.Now()
	var ks []keys.Key
	for i := range 50 {
		ks = append(ks, h.schedule(msgAt("fenced", now.Add(time.Duration(i)*time.Microsecond)))...)
	}
	// The loop looks at the fence again and again; nothing goes out.
	asked := g.asked.Load()
	checkFor(t, 10*time.Second, func() error {
		if n := g.asked.Load() - asked; n < 50 {
			return fmt.Errorf("fence asked %d times", n)
		}
		return nil
	})
	select {
	case d := <-h.pub.deliveries:
		t.Fatalf("delivered %v while the fence was down", d.key)
	default:
	}
	g.up.Store(true)
	for i, k := range ks {
		if d := h.next(10 * time.Second); d.key != k || d.attempt != 1 {
			t.Fatalf("delivery %d: %v attempt %d, want %v attempt 1", i, d.key, d.attempt, k)
		}
	}
}

// A fence that goes down in the middle of a pass stops it at the next
// message: the rest are held back, not failed (no back-off, no attempt
// counted), and go out in order once the fence is up again, each once.
func TestDispatcher_Fence_DownMidPass_RestHeldBackInOrder(t *testing.T) {
	g := &gate{}
	g.up.Store(true)
	h := newHarness(t, 0, func(c *dispatch.Config) { c.Fence = g.held })
	now := time.Now().Add(50 * time.Millisecond)
	var batch []*delaystore.StoredMessage
	for i := range 100 {
		batch = append(batch, msgAt("midpass", now.Add(time.Duration(i)*time.Microsecond)))
	}
	// NB: asked once by the loop before the pass, then once per message.
	g.downAfter.Store(g.asked.Load() + 1 + 10)
	ks := h.schedule(batch...)
	checkFor(t, 10*time.Second, func() error {
		if h.d.Stats().Fenced == 0 {
			return fmt.Errorf("nothing held back yet")
		}
		return nil
	})
	// What went out before the fence went down is in the channel already:
	// the fake publisher delivers synchronously.
	got := 0
	for early := true; early; {
		select {
		case d := <-h.pub.deliveries:
			if d.key != ks[got] || d.attempt != 1 {
				t.Fatalf("delivery %d: %v attempt %d, want %v attempt 1", got, d.key, d.attempt, ks[got])
			}
			got++
		default:
			early = false
		}
	}
	if got == 0 || got == 100 {
		t.Fatalf("%d of 100 delivered before the fence went down, want some", got)
	}
	g.up.Store(true)
	for ; got < 100; got++ {
		d := h.next(10 * time.Second)
		if d.key != ks[got] || d.attempt != 1 {
			t.Fatalf("delivery %d: %v attempt %d, want %v attempt 1", got, d.key, d.attempt, ks[got])
		}
	}
	checkFor(t, 10*time.Second, func() error {
		if st := h.d.Stats(); st.InFlight != 100 {
			return fmt.Errorf("%d in flight, want 100", st.InFlight)
		}
		return nil
	})
	select {
	case d := <-h.pub.deliveries:
		t.Fatalf("delivered %v twice", d.key)
	default:
	}
}

// A fence the process lifts itself, told with FenceLifted, is looked at
// at once: with a retry of an hour, the message held back goes out as
// soon as the dispatcher is told, not when its retry comes.
func TestDispatcher_FenceLifted_LooksAgainAtOnce(t *testing.T) {
	g := &gate{}
	h := newHarness(t, 0, func(c *dispatch.Config) {
		c.Fence = g.held
		c.FenceRetry = time.Hour
	})
	k := h.schedule(msgAt("lifted", time.Now()))[0]
	checkFor(t, 10*time.Second, func() error {
		if h.d.Stats().FencedPasses == 0 {
			return fmt.Errorf("no fenced turn yet")
		}
		return nil
	})
	g.up.Store(true)
	h.d.FenceLifted()
	if d := h.next(10 * time.Second); d.key != k || d.attempt != 1 {
		t.Fatalf("delivered %v attempt %d, want %v attempt 1", d.key, d.attempt, k)
	}
}
