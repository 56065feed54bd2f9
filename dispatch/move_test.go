package dispatch_test

import (
	"testing"
	"time"

	"github.com/natsdelay/natsdelay/delaystore"
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
