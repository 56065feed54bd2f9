package dispatch_test

import (
	"errors"
	"testing"
	"time"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/dispatch"
)

// TestDispatcher_Move_NoSync_HeldUntilFlush checks that a message moved
// by a commit without sync goes out only once Flush has made the move
// durable: a message due after it on its subject goes out first, and the
// moved one follows the Flush, under its new key. Before, a crash between
// its delivery and the flush undid the move, and the message went out
// again under another key.
func TestDispatcher_Move_NoSync_HeldUntilFlush(t *testing.T) {
	h := newHarness(t, 0, nil)
	k := h.schedule(msgAt("held", time.Now().Add(time.Hour)))[0]
	now := time.Now().UnixNano()
	nk, err := h.d.Move(k, func(*delaystore.StoredMessage) (int64, error) { return now, nil }, "op", delaystore.NoSync)
	if err != nil {
		t.Fatal(err)
	}
	later := h.schedule(msgAt("held", time.Now()))[0]
	if d := h.next(10 * time.Second); d.key != later {
		t.Fatalf("first delivery %v, want %v: the moved %v went out before its move was flushed", d.key, later, nk)
	}
	select {
	case d := <-h.pub.deliveries:
		t.Fatalf("%v delivered before the flush", d.key)
	default:
	}
	if err := h.d.Flush(); err != nil {
		t.Fatal(err)
	}
	if d := h.next(10 * time.Second); d.key != nk {
		t.Fatalf("after the flush %v delivered, want the moved %v", d.key, nk)
	}
}

// TestDispatcher_Move_AfterAckAnswered_NotFound checks that a message
// whose ACK has been answered is gone to Move (404), not in flight (409),
// before the next pass has dropped its flight: the ACK's answer comes once
// its delete has committed, and a FIRE or RESCHEDULE sent after it was
// refused as in flight while a pass was busy.
func TestDispatcher_Move_AfterAckAnswered_NotFound(t *testing.T) {
	hold := &holdingPublisher{subject: "hold", entered: make(chan struct{}), release: make(chan struct{})}
	h := newWrappedHarness(t, delaystore.RepositoryConfig{}, func(p *fakePublisher) dispatch.Publisher {
		hold.fakePublisher = p
		return hold
	}, nil)
	t.Cleanup(hold.releaseHeld)

	k := h.schedule(msgAt("acked", time.Now()))[0]
	if d := h.next(10 * time.Second); d.key != k {
		t.Fatalf("delivered %v, want %v", d.key, k)
	}
	h.schedule(msgAt("hold", time.Now()))
	select {
	case <-hold.entered: // a pass is held publishing it
	case <-time.After(30 * time.Second):
		t.Fatal("the held subject was never published")
	}
	if err := h.ack(k, dispatch.Ack{Kind: dispatch.AckDone}); err != nil {
		t.Fatal(err)
	}
	_, err := h.d.Move(k, func(*delaystore.StoredMessage) (int64, error) { return time.Now().UnixNano(), nil }, "op", delaystore.Sync)
	if !errors.Is(err, delaystore.ErrNotFound) {
		t.Fatalf("Move after the ACK was answered: %v, want not found", err)
	}
	hold.releaseHeld()
}
