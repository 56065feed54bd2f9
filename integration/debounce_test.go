package integration_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge/wire"
)

// TestDebounce_Burst checks Delay-Debounce through the service: each
// publish of the same (subject, id) replaces the pending message and sets
// its fire time to the debounce after the publish, but never later than
// Delay-Debounce-Max after the first publish of the burst, which the
// replacement keeps; the same text sent again is a publish of the burst,
// not a resend.
func TestDebounce_Burst(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	debounced := func(data, maxWait string) *nats.Msg {
		return newMsg("debounce.a", data, "Delay-Id", "X", "Delay-Debounce", "1h", "Delay-Debounce-Max", maxWait)
	}

	before := time.Now()
	first := schedule(t, h.nc, debounced("one", "1h"))
	inWindow(t, "first fire_at", first.FireAt, before.Add(time.Hour), time.Now().Add(time.Hour))

	// Its maximum is the debounce: the second publish fires when the
	// first would have, to the nanosecond.
	second := schedule(t, h.nc, debounced("two", "1h"))
	if second.FireAtRaw != first.FireAtRaw {
		t.Fatalf("second fire_at %s, want the first publish's time plus the maximum, %s", second.FireAtRaw, first.FireAtRaw)
	}
	if err := isGone(h.nc, first.Key); err != nil {
		t.Fatal(err)
	}

	// A longer maximum lets the debounce push the fire time on.
	before = time.Now()
	third := schedule(t, h.nc, debounced("three", "3h"))
	inWindow(t, "third fire_at", third.FireAt, before.Add(time.Hour), time.Now().Add(time.Hour))
	if third.FireAt.Before(first.FireAt) {
		t.Fatalf("third fire_at %s before the first's %s", third.FireAtRaw, first.FireAtRaw)
	}

	rep, err := h.nc.RequestMsg(debounced("three", "3h"), wait)
	if err != nil {
		t.Fatal(err)
	}
	var again wire.ScheduleReply
	if err := json.Unmarshal(rep.Data, &again); err != nil || again.Duplicate || again.Tag == third.Tag {
		t.Fatalf("the same text again answered %s (%v), want a new publish of the burst", rep.Data, err)
	}
	if err := isGone(h.nc, third.Key); err != nil {
		t.Fatal(err)
	}
	if n := pending(t, h.nc); n != 1 {
		t.Fatalf("pending = %d, want 1", n)
	}
}

// TestDebounce_FiresOnceWithTheLast checks that a burst is delivered
// once, with the last publish's payload, not before its fire time.
func TestDebounce_FiresOnceWithTheLast(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	got := subscribe(t, h.nc, "debounce.b")
	var last scheduled
	for _, data := range []string{"one", "two", "three"} {
		last = schedule(t, h.nc, newMsg("debounce.b", data, "Delay-Id", "Y", "Delay-Debounce", "200ms", "X-Seq", data))
	}
	r := next(t, got, "delivery of the burst")
	notEarly(t, r, last.FireAt)
	if string(r.Data) != "three" || r.Header.Get("X-Seq") != "three" || r.Header.Get(wire.HeaderTag) != last.Tag {
		t.Fatalf("delivered %q with headers %v, want the last publish", r.Data, r.Header)
	}
	ackSync(t, h.nc, r.Msg, "")
	waitPending(t, h.nc, 0)
	quiet(t, got, 300*time.Millisecond, "a second delivery of one burst")
}

// inWindow fails tb unless at is within [lo, hi], at the reply's
// millisecond precision.
func inWindow(tb testing.TB, what string, at, lo, hi time.Time) {
	tb.Helper()
	if at.Before(lo.Truncate(time.Millisecond)) || at.After(hi) {
		tb.Fatalf("%s %s, want within [%s, %s]", what, at.Format(time.RFC3339Nano), lo.Format(time.RFC3339Nano), hi.Format(time.RFC3339Nano))
	}
}
