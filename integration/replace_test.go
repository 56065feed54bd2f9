package integration_test

import (
	"testing"
	"time"

	"github.com/natsdelay/natsdelay/bridge"
	"github.com/natsdelay/natsdelay/bridge/wire"
)

// TestDelayID_Replace checks that scheduling again with the same
// (subject, Delay-Id) while the first is pending replaces it: only the
// second is delivered, with the new payload and fire time and the same
// id, and the first one's key is gone. The same id on another subject is
// a different message.
func TestDelayID_Replace(t *testing.T) {
	t.Parallel()
	const ackWait = 300 * time.Millisecond

	t.Run("long then short", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, nil)
		got := subscribe(t, h.nc, "replace.a")
		first := schedule(t, h.nc, newMsg("replace.a", "first", "Delay-Id", "X", "Delay", "1h"))
		second := schedule(t, h.nc, newMsg("replace.a", "second", "Delay-Id", "X", "Delay", "200ms"))
		if first.Tag == second.Tag {
			t.Fatalf("both schedules got tag %s", first.Tag)
		}
		// The replacement is committed with the new message, before the reply.
		if err := isGone(h.nc, first.Key); err != nil {
			t.Fatal(err)
		}
		if n := pending(t, h.nc); n != 1 {
			t.Fatalf("pending = %d, want 1", n)
		}
		r := next(t, got, "delivery")
		notEarly(t, r, second.FireAt)
		if string(r.Data) != "second" || r.Header.Get(wire.HeaderTag) != second.Tag || r.Header.Get(wire.HeaderID) != "X" {
			t.Fatalf("delivered %q with headers %v, want the second message", r.Data, r.Header)
		}
		ackSync(t, h.nc, r.Msg, "")
		waitPending(t, h.nc, 0)
	})

	t.Run("short then long", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, nil)
		got := subscribe(t, h.nc, "replace.b")
		// Paused until the replace is answered, so the first cannot go
		// out before it on a loaded machine.
		resume := pauseSubjects(t, h.nc, "replace.b")
		first := schedule(t, h.nc, newMsg("replace.b", "first", "Delay-Id", "X", "Delay", "200ms"))
		second := schedule(t, h.nc, newMsg("replace.b", "second", "Delay-Id", "X", "Delay", "1h"))
		if err := isGone(h.nc, first.Key); err != nil {
			t.Fatal(err)
		}
		resume()
		// Well past the first fire time, nothing came.
		quiet(t, got, time.Until(first.FireAt.Add(500*time.Millisecond)), "delivery of a replaced message")
		if m := stored(t, h.nc, second.Key); string(m.Payload) != "second" {
			t.Fatalf("stored payload %q, want second", m.Payload)
		}
	})

	t.Run("while in flight", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, func(c *bridge.Config) { c.Delivery.AckWait = ackWait })
		got := subscribe(t, h.nc, "replace.c")
		first := schedule(t, h.nc, newMsg("replace.c", "first", "Delay-Id", "X"))
		r1 := next(t, got, "first delivery")
		if string(r1.Data) != "first" {
			t.Fatalf("delivered %q, want first", r1.Data)
		}
		second := schedule(t, h.nc, newMsg("replace.c", "second", "Delay-Id", "X", "Delay", "100ms"))
		if err := isGone(h.nc, first.Key); err != nil {
			t.Fatal(err)
		}
		r2 := next(t, got, "delivery of the replacement")
		if string(r2.Data) != "second" || r2.Header.Get(wire.HeaderTag) != second.Tag {
			t.Fatalf("delivered %q with headers %v, want the second message", r2.Data, r2.Header)
		}
		wantAttempt(t, r2.Msg, 1)
		ackSync(t, h.nc, r2.Msg, "")
		// The first delivery's ack wait runs out, but it was replaced: no
		// redelivery, and its late ACK is harmless.
		quiet(t, got, 3*ackWait, "redelivery of a replaced message")
		ackSync(t, h.nc, r1.Msg, "+ACK")
		waitPending(t, h.nc, 0)
	})

	t.Run("other subject", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, nil)
		got1 := subscribe(t, h.nc, "replace.d1")
		got2 := subscribe(t, h.nc, "replace.d2")
		schedule(t, h.nc, newMsg("replace.d1", "one", "Delay-Id", "X", "Delay", "100ms"))
		schedule(t, h.nc, newMsg("replace.d2", "two", "Delay-Id", "X", "Delay", "100ms"))
		for _, got := range []<-chan received{got1, got2} {
			r := next(t, got, "delivery")
			ackSync(t, h.nc, r.Msg, "")
		}
		waitPending(t, h.nc, 0)
	})
}
