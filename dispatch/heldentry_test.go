package dispatch_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/natsdelay/natsdelay/dispatch"
	"github.com/natsdelay/natsdelay/keys"
)

// TestDispatcher_HeldTopic_EntriesPassedWhileHeldDelivered checks that a
// subject held at its in-flight limit delivers every message that fell
// due while it was held, in order. The frontier passes a held subject's
// due-index entries (its scan resumes at its cursor when room comes), so
// that scan must read the subject's range, not only the one entry that
// brought the subject back into memory. Before, the subject kept the
// point read of that first entry: the scan after the limit took just
// that message, moved the cursor past it, and the message that fell due
// while the subject was held was never read again (a later entry moved
// the cursor past it too), or only once something re-read the subject
// from a lower key, after later messages of its subject.
//
// The clock is stepped, so each read of the due index sees exactly the
// entries named, however slow the machine: the held subject's second
// message falls due only after the subject is held.
func TestDispatcher_HeldTopic_EntriesPassedWhileHeldDelivered(t *testing.T) {
	var skew atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	h := newHarness(t, 0, func(c *dispatch.Config) {
		c.MaxInFlight, c.SubjectMaxInFlight = 64, 1
		c.AckWait = time.Hour // no redelivery while the clock is stepped
		c.Now = now
	})
	want := func(what string, k keys.Key) {
		t.Helper()
		if d := h.next(30 * time.Second); d.key != k {
			t.Fatalf("delivered %v (%s), want %s %v", d.key, d.subject, what, k)
		}
	}

	// The first message takes the subject's one slot.
	first := h.schedule(msgAt("held", now()))[0]
	want("the first message", first)
	base := now()
	second := h.schedule(msgAt("held", base.Add(time.Minute)))[0]
	third := h.schedule(msgAt("held", base.Add(2*time.Minute)))[0]

	// The second falls due: the frontier brings the subject back with
	// its entry, and the subject, at its limit, is held. The message on
	// another subject wakes the loop and tells that the pass is over.
	skew.Add(int64(90 * time.Second))
	want("the wake-up on another subject", h.schedule(msgAt("other.1", now()))[0])
	if s := h.d.Subject("held"); !s.Limited {
		t.Fatalf("subject state %+v, want held at its limit", s)
	}

	// The third falls due while the subject is held: the frontier passes
	// its entry.
	skew.Add(int64(time.Minute))
	want("the wake-up on another subject", h.schedule(msgAt("other.2", now()))[0])

	// Room, one slot at a time: the held messages go out in order.
	for _, next := range []struct {
		what   string
		acked  keys.Key
		wanted keys.Key
	}{{"the second message", first, second}, {"the third message, due while its subject was held", second, third}} {
		if err := h.ack(next.acked, dispatch.Ack{Kind: dispatch.AckDone}); err != nil {
			t.Fatal(err)
		}
		want(next.what, next.wanted)
	}
}
