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

// TestCrash_Debounce_SIGKILLBetweenPublishes runs the real binary,
// SIGKILLs it between publishes of two bursts and publishes again after
// the restart: the burst's first time survived, so a publish after the
// restart is due no later than the maximum after the first; the other
// burst is delivered once, with the last payload, not before the last
// publish's fire time.
func TestCrash_Debounce_SIGKILLBetweenPublishes(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := natsdelayBinary(t)
	srv := startServer(t)
	dir := t.TempDir()
	nc := connect(t, srv)
	got := subscribe(t, nc, "debounce.crash.short")
	long := func(data string) *nats.Msg {
		return newMsg("debounce.crash.long", data, "Delay-Id", "L", "Delay-Debounce", "1h", "Delay-Debounce-Max", "1h")
	}
	// Before the kill the short burst waits an hour, so that nothing of
	// it falls due while the service restarts; its last publish asks for
	// less, as any publish of a burst may.
	short := func(data, debounce string) *nats.Msg {
		return newMsg("debounce.crash.short", data, "Delay-Id", "S", "Delay-Debounce", debounce, "Delay-Debounce-Max", "1h")
	}

	p := startProcess(t, bin, srv.ClientURL(), dir)
	first := schedule(t, nc, long("one"))
	schedule(t, nc, short("one", "1h"))
	schedule(t, nc, short("two", "1h"))
	p.kill(t)

	p = startProcess(t, bin, srv.ClientURL(), dir)
	defer p.stop(t)
	again := schedule(t, nc, long("two"))
	if again.FireAtRaw != first.FireAtRaw {
		t.Fatalf("after the restart the burst is due at %s, want its first publish's time plus the maximum, %s", again.FireAtRaw, first.FireAtRaw)
	}
	last := schedule(t, nc, short("three", "300ms"))
	r := next(t, got, "delivery of the short burst")
	notEarly(t, r, last.FireAt)
	if string(r.Data) != "three" || r.Header.Get(wire.HeaderTag) != last.Tag {
		t.Fatalf("delivered %q with headers %v, want the last publish", r.Data, r.Header)
	}
	ackSync(t, nc, r.Msg, "")
	if n := pendingFor(t, nc, "debounce.crash.short"); n != 0 {
		t.Fatalf("%d pending of the short burst after its ACK, want 0", n)
	}
	quiet(t, got, 300*time.Millisecond, "a second delivery of one burst")
	if n := pending(t, nc); n != 1 {
		t.Fatalf("pending %d, want the long burst's one message", n)
	}
}
