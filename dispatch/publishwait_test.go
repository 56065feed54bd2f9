package dispatch_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/dispatch"
	"github.com/natsdelay/natsdelay/keys"
)

// holdingPublisher holds the first delivery to subject in its Deliver
// until release is closed, telling entered as it starts; returned is set
// once that Deliver is over.
type holdingPublisher struct {
	*fakePublisher
	subject  string
	once     sync.Once
	entered  chan struct{}
	release  chan struct{}
	released sync.Once
	returned atomic.Bool
}

// releaseHeld lets the held delivery return.
func (p *holdingPublisher) releaseHeld() { p.released.Do(func() { close(p.release) }) }

func (p *holdingPublisher) Deliver(k keys.Key, m *delaystore.StoredMessage, attempt uint32) error {
	held := false
	if m.Subject == p.subject {
		p.once.Do(func() { held = true })
	}
	if !held {
		return p.fakePublisher.Deliver(k, m, attempt)
	}
	close(p.entered)
	<-p.release
	err := p.fakePublisher.Deliver(k, m, attempt)
	p.returned.Store(true)
	return err
}

// TestDispatcher_BlockedPublish_HoldsOnlyItsOwnSettling checks the two
// sides of publishing without a lock across the publish: a delivery whose
// publish does not return (a blocked socket) does not hold up the ACK of
// another message, and a Cancel of the message being published returns
// only once that publish is over, so that once it returned the message is
// never published again.
func TestDispatcher_BlockedPublish_HoldsOnlyItsOwnSettling(t *testing.T) {
	hp := &holdingPublisher{subject: "slow", entered: make(chan struct{}), release: make(chan struct{})}
	wrap := func(fp *fakePublisher) dispatch.Publisher {
		hp.fakePublisher = fp
		return hp
	}
	h := newWrappedHarness(t, delaystore.RepositoryConfig{}, wrap, nil)
	t.Cleanup(hp.releaseHeld) // before the harness's: Close waits for the pass
	fast := h.schedule(msgAt("fast", time.Now()))[0]
	if d := h.next(10 * time.Second); d.key != fast {
		t.Fatalf("delivered %v, want %v", d.key, fast)
	}
	slow := h.schedule(msgAt("slow", time.Now()))[0]
	<-hp.entered

	if err := h.ack(fast, dispatch.Ack{Kind: dispatch.AckDone}); err != nil {
		t.Fatalf("ACK of another message while a publish is held: %v", err)
	}

	waiting := make(chan struct{})
	var once sync.Once
	h.d.BeforePublishWaitForTest(func() { once.Do(func() { close(waiting) }) })
	canceled := make(chan struct{})
	go func() {
		defer close(canceled)
		if ok, err := h.d.Cancel(context.Background(), slow); !ok || err != nil {
			t.Errorf("Cancel = %v, %v", ok, err)
		}
		if !hp.returned.Load() {
			t.Error("Cancel returned while its message was being published")
		}
	}()
	select {
	case <-waiting:
	case <-canceled:
	}
	hp.releaseHeld()
	<-canceled
	if d := h.next(10 * time.Second); d.key != slow {
		t.Fatalf("delivered %v, want the held %v", d.key, slow)
	}
	// A later message of the subject goes out, and the canceled one is
	// not published again before it.
	later := h.schedule(msgAt("slow", time.Now()))[0]
	if d := h.next(10 * time.Second); d.key != later {
		t.Fatalf("delivered %v after the cancel, want only %v", d.key, later)
	}
}
