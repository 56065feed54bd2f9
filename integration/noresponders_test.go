package integration_test

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge"
	"github.com/natsdelay/natsdelay/bridge/wire"
)

// maxNoResponders bounds the no-responders answers over about a second of
// nobody listening. The back-off starts at 50 ms and doubles, so a handful
// is expected; a busy loop would make thousands. It counts events, so it
// does not depend on the machine's speed.
const maxNoResponders = 50

// waitNoResponders waits until the dispatcher has seen at least one
// delivery bounce, then watches it for about a second and checks that it
// backs off instead of retrying in a loop. The second is an observation
// window, not a synchronisation. backlog is the number of messages due on
// the silent subjects: the first pass sends them all before the first
// bounce is known, and each bounce is counted.
func waitNoResponders(tb testing.TB, h *harness, backlog int) {
	tb.Helper()
	checkFor(tb, wait, 10*time.Millisecond, func() error {
		if n := h.svc.Stats().NoResponders; n == 0 {
			return fmt.Errorf("no delivery has bounced yet")
		}
		return nil
	})
	deadline := time.After(time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-deadline:
			return
		case <-tick.C:
		}
		if st := h.svc.Stats(); st.NoResponders >= uint64(backlog+maxNoResponders) {
			tb.Fatalf("%d no-responders answers within about a second: the service is spinning (stats %+v)", st.NoResponders, st)
		}
	}
}

// TestNoResponders_NotCounted checks that deliveries nobody receives are
// not counted as attempts, back off instead of spinning, and that the
// message is delivered, as attempt 1 and still pending until then, once a
// subscriber appears.
func TestNoResponders_NotCounted(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *bridge.Config) { c.Delivery.AckWait = 200 * time.Millisecond; c.Delivery.MaxDeliver = 1 })
	rep := schedule(t, h.nc, newMsg("nobody.home", "x"))
	waitNoResponders(t, h, 1)
	// MaxDeliver 1 with a short ack wait: had a bounce counted, the message
	// would be dead-lettered and gone by now.
	if m := stored(t, h.nc, rep.Key); m.Attempt != 0 {
		t.Fatalf("stored attempt = %d after deliveries reached nobody, want 0", m.Attempt)
	}
	got := subscribe(t, h.nc, "nobody.home")
	r := next(t, got, "delivery once a subscriber appears")
	wantAttempt(t, r.Msg, 1)
	if r.Header.Get(wire.HeaderTag) != rep.Tag {
		t.Fatalf("tag %q, want %s", r.Header.Get(wire.HeaderTag), rep.Tag)
	}
	ackSync(t, h.nc, r.Msg, "")
	waitPending(t, h.nc, 0)
}

// TestNoResponders_Redelivery checks that a redelivery nobody receives is
// not counted either: the consumer goes away after the first delivery, and
// when one is back the next delivery is attempt 2, not more.
func TestNoResponders_Redelivery(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *bridge.Config) { c.Delivery.AckWait = 200 * time.Millisecond })
	sub, err := h.nc.SubscribeSync("nobody.later")
	if err != nil {
		t.Fatal(err)
	}
	schedule(t, h.nc, newMsg("nobody.later", "x"))
	first, err := sub.NextMsg(wait)
	if err != nil {
		t.Fatal(err)
	}
	wantAttempt(t, first, 1)
	if err := sub.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	waitNoResponders(t, h, 1)
	got := subscribe(t, h.nc, "nobody.later")
	r := next(t, got, "redelivery once a subscriber is back")
	wantAttempt(t, r.Msg, 2)
	ackSync(t, h.nc, r.Msg, "")
	waitPending(t, h.nc, 0)
}

// TestAckNone_DeletedOncePublished checks Delay-Ack: none: the message is
// deleted once a delivery reached a subscriber, without an ACK, and never
// redelivered; while nobody listens it stays pending, and it is delivered
// when a subscriber appears.
func TestAckNone_DeletedOncePublished(t *testing.T) {
	t.Parallel()
	const ackWait = 200 * time.Millisecond

	t.Run("subscriber", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, func(c *bridge.Config) { c.Delivery.AckWait = ackWait })
		got := subscribe(t, h.nc, "none.here")
		rep := schedule(t, h.nc, newMsg("none.here", "x", "Delay-Ack", "none", "Delay", "100ms"))
		r := next(t, got, "delivery")
		notEarly(t, r, rep.FireAt)
		wantAttempt(t, r.Msg, 1)
		waitGone(t, h.nc, rep.Key)
		waitPending(t, h.nc, 0)
		quiet(t, got, 3*ackWait, "redelivery of a Delay-Ack: none message")
		// ACKs are accepted and ignored.
		ackSync(t, h.nc, r.Msg, "+ACK")
	})

	t.Run("no subscriber yet", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, func(c *bridge.Config) { c.Delivery.AckWait = ackWait })
		rep := schedule(t, h.nc, newMsg("none.later", "x", "Delay-Ack", "NONE"))
		waitNoResponders(t, h, 1)
		stored(t, h.nc, rep.Key)
		if n := pending(t, h.nc); n != 1 {
			t.Fatalf("pending = %d while nobody listens, want 1", n)
		}
		got := subscribe(t, h.nc, "none.later")
		r := next(t, got, "delivery once a subscriber appears")
		wantAttempt(t, r.Msg, 1)
		waitGone(t, h.nc, rep.Key)
		quiet(t, got, 3*ackWait, "redelivery of a Delay-Ack: none message")
	})
}

// TestNoResponders_ResumeInOrder checks that when a subscriber appears
// after many deliveries bounced, the backlog comes out complete, in order
// and uncounted (every message as attempt 1).
func TestNoResponders_ResumeInOrder(t *testing.T) {
	t.Parallel()
	const n = 100
	h := newHarness(t, nil)
	msgs := make([]*nats.Msg, n)
	for i := range msgs {
		msgs[i] = newMsg("nobody.backlog", strconv.Itoa(i))
	}
	scheduleMany(t, h.nc, msgs)
	waitNoResponders(t, h, n)
	got := subscribe(t, h.nc, "nobody.backlog")
	for i := range n {
		r := next(t, got, fmt.Sprintf("delivery %d of the backlog", i))
		if string(r.Data) != strconv.Itoa(i) {
			t.Fatalf("delivery %d is message %s, want %d", i, r.Data, i)
		}
		wantAttempt(t, r.Msg, 1)
		if err := r.Respond(nil); err != nil {
			t.Fatal(err)
		}
	}
	waitPending(t, h.nc, 0)
}
