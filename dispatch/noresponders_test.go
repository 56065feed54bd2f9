package dispatch_test

import (
	"fmt"
	"testing"
	"time"
)

// TestDispatcher_NoResponders_LaterMessageDoesNotHoldBack checks that a
// due message whose delivery bounced is probed again after the
// no-responders back-off, not when the next message of its subject is due
// (an hour later here).
func TestDispatcher_NoResponders_LaterMessageDoesNotHoldBack(t *testing.T) {
	h := newHarness(t, 0, nil)
	h.pub.setAbsent("b", true)
	later := h.schedule(msgAt("b", time.Now().Add(time.Hour)))[0]
	now := h.schedule(msgAt("b", time.Now()))[0]
	checkFor(t, 10*time.Second, func() error {
		if n := h.pub.bounces(); n == 0 {
			return fmt.Errorf("no delivery has bounced yet")
		}
		return nil
	})
	h.pub.setAbsent("b", false)
	// next gives up after 10 s: more than the back-off's 5 s cap.
	if d := h.next(10 * time.Second); d.key != now || d.attempt != 1 {
		t.Fatalf("delivered %v attempt %d, want %v attempt 1 (the later one is %v)", d.key, d.attempt, now, later)
	}
}
