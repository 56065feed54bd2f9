package dispatch_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/dispatch"
	"github.com/natsdelay/natsdelay/keys"
)

// hookPublisher is the fake publisher with Deliver and Flush made to block
// or fail on demand, as a hung connection or a lost flush marker would.
type hookPublisher struct {
	*fakePublisher

	mu         sync.Mutex
	blockFlush chan struct{} // when not nil, Flush waits for it to close, ignoring ctx
	failFlush  error
	blockPub   chan struct{} // when not nil, Deliver waits for it to close
}

func (p *hookPublisher) Deliver(k keys.Key, m *delaystore.StoredMessage, attempt uint32) error {
	p.mu.Lock()
	block := p.blockPub
	p.mu.Unlock()
	if block != nil {
		<-block
	}
	return p.fakePublisher.Deliver(k, m, attempt)
}

func (p *hookPublisher) Flush(ctx context.Context) error {
	p.mu.Lock()
	block, fail := p.blockFlush, p.failFlush
	p.mu.Unlock()
	if block != nil {
		<-block
	}
	if fail != nil {
		return fail
	}
	return p.fakePublisher.Flush(ctx)
}

// healthHarness runs a dispatcher whose stall limit is short: 2 × 20ms
// flush timeout + 20ms back-off cap = 60ms.
func healthHarness(t *testing.T, mod func(*dispatch.Config)) (*harness, *hookPublisher) {
	t.Helper()
	var hp *hookPublisher
	wrap := func(p *fakePublisher) dispatch.Publisher { hp = &hookPublisher{fakePublisher: p}; return hp }
	h := newWrappedHarness(t, delaystore.RepositoryConfig{}, wrap, func(c *dispatch.Config) {
		c.FlushTimeout = 20 * time.Millisecond
		c.NoRespondersBackoff = 10 * time.Millisecond
		c.NoRespondersMaxBackoff = 20 * time.Millisecond
		if mod != nil {
			mod(c)
		}
	})
	return h, hp
}

// waitHealth waits until Health's error mentions want, or, with want "",
// until Health is nil.
func waitHealth(t *testing.T, d *dispatch.Dispatcher, want string) {
	t.Helper()
	checkFor(t, 10*time.Second, func() error {
		err := d.Health()
		switch {
		case want == "" && err != nil:
			return fmt.Errorf("Health = %v, want nil", err)
		case want == "":
			return nil
		case err == nil:
			return fmt.Errorf("Health = nil, want an error about %q", want)
		case !errors.Is(err, dispatch.ErrNotDelivering) || !strings.Contains(err.Error(), want):
			return fmt.Errorf("Health = %v, want ErrNotDelivering about %q", err, want)
		}
		return nil
	})
}

// TestDispatcher_Health_Lifecycle checks that Health is an error before
// Start, nil while the dispatcher runs idle or delivers, and ErrClosed
// after Close.
func TestDispatcher_Health_Lifecycle(t *testing.T) {
	h := newHarness(t, 0, nil)
	if err := h.d.Health(); err != nil {
		t.Fatalf("Health of an idle dispatcher = %v, want nil", err)
	}
	k := h.schedule(msgAt("h", time.Now()))[0]
	h.next(10 * time.Second)
	if err := h.d.Health(); err != nil {
		t.Fatalf("Health while a delivery waits for its answer = %v, want nil", err)
	}
	if err := h.ack(k, dispatch.Ack{Kind: dispatch.AckDone}); err != nil {
		t.Fatal(err)
	}
	if err := h.d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := h.d.Health(); !errors.Is(err, dispatch.ErrClosed) {
		t.Fatalf("Health after Close = %v, want ErrClosed", err)
	}

	d, err := dispatch.New(h.repo, h.pub, dispatch.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Health(); !errors.Is(err, dispatch.ErrNotDelivering) {
		t.Fatalf("Health before Start = %v, want ErrNotDelivering", err)
	}
}

// TestDispatcher_Health_FlusherStuck checks that a flush that does not
// return makes Health report the flusher, and that Health is nil again
// once it returns.
func TestDispatcher_Health_FlusherStuck(t *testing.T) {
	h, hp := healthHarness(t, nil)
	release := make(chan struct{})
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	hp.mu.Lock()
	hp.blockFlush = release
	hp.mu.Unlock()
	h.schedule(msgAt("h", time.Now()))
	h.next(10 * time.Second)
	waitHealth(t, h.d, "flush")
	close(release)
	waitHealth(t, h.d, "")
}

// TestDispatcher_Health_PassStuck checks that a publish that does not
// return (the loop stuck in a pass) makes Health report the pass.
func TestDispatcher_Health_PassStuck(t *testing.T) {
	h, hp := healthHarness(t, nil)
	release := make(chan struct{})
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	hp.mu.Lock()
	hp.blockPub = release
	hp.mu.Unlock()
	h.schedule(msgAt("h", time.Now()))
	waitHealth(t, h.d, "pass")
	close(release)
	h.next(10 * time.Second)
	waitHealth(t, h.d, "")
}

// TestDispatcher_Health_FlushFailing checks that flushes that keep failing
// (no delivery can be confirmed) make Health report it with the cause, and
// that the first flush that works again clears it.
func TestDispatcher_Health_FlushFailing(t *testing.T) {
	h, hp := healthHarness(t, nil)
	cause := errors.New("marker lost")
	hp.mu.Lock()
	hp.failFlush = cause
	hp.mu.Unlock()
	h.schedule(msgAt("h", time.Now()))
	checkFor(t, 10*time.Second, func() error {
		if err := h.d.Health(); !errors.Is(err, cause) || !errors.Is(err, dispatch.ErrNotDelivering) {
			return fmt.Errorf("Health = %v, want ErrNotDelivering wrapping %v", err, cause)
		}
		return nil
	})
	hp.mu.Lock()
	hp.failFlush = nil
	hp.mu.Unlock()
	waitHealth(t, h.d, "")
}

// TestDispatcher_Health_FullWindowIsNotAStall checks that a full in-flight
// window whose deliveries wait for their answers, with more messages due,
// is healthy: the loop is waiting for answers, not stuck.
func TestDispatcher_Health_FullWindowIsNotAStall(t *testing.T) {
	const window = 5
	h, _ := healthHarness(t, func(c *dispatch.Config) { windowAlone(c, window); c.AckWait = time.Hour })
	for range 2 * window {
		h.schedule(msgAt("h", time.Now()))
	}
	for range window {
		h.next(10 * time.Second)
	}
	// Ten stall limits: long enough for a stall to show.
	deadline := time.Now().Add(600 * time.Millisecond)
	for time.Now().Before(deadline) {
		if err := h.d.Health(); err != nil {
			t.Fatalf("Health with a full window waiting for answers = %v, want nil", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
