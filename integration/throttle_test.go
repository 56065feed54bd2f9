package integration_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge/wire"
)

// throttled is a publish of subject with Delay-Id id, throttled to one
// delivery per window.
func throttled(subject, id, window, data string) *nats.Msg {
	return newMsg(subject, data, "Delay-Id", id, "Delay-Throttle", window, "X-Data", data)
}

// TestThrottle_HoldsAndFolds checks Delay-Throttle through the service:
// the first publish is due at once and delivered; one within its window
// is held to the window's end, to the nanosecond; the next ones fold into
// the held delivery (the reply says "folded", and INFO counts them), the
// same text included; GET shows the window; another id is not held.
func TestThrottle_HoldsAndFolds(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	got := subscribe(t, h.nc, "throttle.a")

	first := schedule(t, h.nc, throttled("throttle.a", "X", "1h", "one"))
	r := next(t, got, "the first delivery")
	if string(r.Data) != "one" || r.Header.Get(wire.HeaderTag) != first.Tag {
		t.Fatalf("delivered %q, tag %s; want the first publish", r.Data, r.Header.Get(wire.HeaderTag))
	}
	ackSync(t, h.nc, r.Msg, "")
	waitPending(t, h.nc, 0)

	held := schedule(t, h.nc, throttled("throttle.a", "X", "1h", "two"))
	if want := first.FireAt.Add(time.Hour); held.Folded || !held.FireAt.Equal(want) {
		t.Fatalf("second: fire_at %s, folded %v; want held to %s, the end of the first's window", held.FireAtRaw, held.Folded, want)
	}
	var last scheduled
	for _, data := range []string{"three", "three"} {
		last = schedule(t, h.nc, throttled("throttle.a", "X", "1h", data))
		if !last.Folded || last.FireAtRaw != held.FireAtRaw || last.Tag == held.Tag {
			t.Fatalf("publish %q: %+v, want folded into the held delivery at %s", data, last, held.FireAtRaw)
		}
	}
	if err := isGone(h.nc, held.Key); err != nil {
		t.Fatal(err)
	}
	m := stored(t, h.nc, last.Key)
	if m.Throttle != time.Hour || m.Header.Get("X-Data") != "three" {
		t.Fatalf("GET of the held message: %+v, want the window and the newest headers", m)
	}
	other := schedule(t, h.nc, throttled("throttle.a", "Y", "1h", "other"))
	if other.Folded || other.FireAt.After(time.Now()) {
		t.Fatalf("another id: %+v, want due at once", other)
	}
	ackSync(t, h.nc, next(t, got, "the other id's delivery").Msg, "")
	info, err := api(h.nc).Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.Ingest.ThrottleFolded != 2 {
		t.Fatalf("INFO ingest.throttle_folded = %d, want 2", info.Ingest.ThrottleFolded)
	}
}

// TestThrottle_DeliversOncePerWindow publishes a run of throttled messages
// with a short window and checks what is delivered, whatever the timing
// of the machine: deliveries in the order planned (each publish not
// folded plans one; it may replace one due and not yet sent, which then
// is not), fire times at least a window apart, each delivery the newest
// publish folded into it, and the last publish's delivery last.
func TestThrottle_DeliversOncePerWindow(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	got := subscribe(t, h.nc, "throttle.b")
	const window = 300 * time.Millisecond
	newest := map[string]string{} // tag -> its payload
	var order []string            // the tags of the deliveries planned, in fire order
	for i := range 8 {
		data := fmt.Sprint(i)
		s := schedule(t, h.nc, throttled("throttle.b", "Z", window.String(), data))
		if s.Folded {
			// It replaced the last delivery planned, under a new tag.
			order[len(order)-1] = s.Tag
		} else {
			order = append(order, s.Tag)
		}
		newest[s.Tag] = data
	}
	lastTag := order[len(order)-1]
	if newest[lastTag] != "7" {
		t.Fatalf("the last delivery planned carries %q, want the last publish, 7", newest[lastTag])
	}
	var prev time.Time
	at := 0 // where in order the next delivery may be
	for i := 0; ; i++ {
		r := next(t, got, "a throttled delivery")
		ackSync(t, h.nc, r.Msg, "")
		tag := r.Header.Get(wire.HeaderTag)
		for at < len(order) && order[at] != tag {
			at++
		}
		if at == len(order) {
			t.Fatalf("delivery %d: tag %s out of the planned order %v", i, tag, order)
		}
		if string(r.Data) != newest[tag] {
			t.Fatalf("delivery %d carries %q, want %q, the newest publish folded into it", i, r.Data, newest[tag])
		}
		// Delay-Fire-At is truncated to the millisecond.
		fireAt := parseTime(t, r.Header.Get(wire.HeaderFireAt))
		if i > 0 && fireAt.Sub(prev) < window-time.Millisecond {
			t.Fatalf("deliveries %d and %d fire %v apart, want at least %v", i-1, i, fireAt.Sub(prev), window)
		}
		prev = fireAt
		if tag == lastTag {
			break
		}
	}
	waitPending(t, h.nc, 0)
}

// TestCrash_Throttle_SIGKILLKeepsTheWindow runs the real binary and
// SIGKILLs it twice: once with only a window left (its delivery sent and
// ACKed), once with a delivery held. After each restart the throttle goes
// on as if nothing happened: a publish within the ended delivery's window
// is held to its end, to the nanosecond, and a publish while one is held
// folds into it, which is then delivered once with the newest payload.
func TestCrash_Throttle_SIGKILLKeepsTheWindow(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := natsdelayBinary(t)
	srv := startServer(t)
	dir := t.TempDir()
	nc := connect(t, srv)
	got := subscribe(t, nc, "throttle.crash")

	p := startProcess(t, bin, srv.ClientURL(), dir)
	first := schedule(t, nc, throttled("throttle.crash", "K", "1h", "one"))
	r := next(t, got, "the first delivery")
	ackSync(t, nc, r.Msg, "")
	waitPending(t, nc, 0)
	p.kill(t) // nothing pending (unless the ACK's delete is lost): the window is left

	p = startProcess(t, bin, srv.ClientURL(), dir)
	held := schedule(t, nc, throttled("throttle.crash", "K", "1h", "two"))
	if want := first.FireAt.Add(time.Hour); held.Folded || !held.FireAt.Equal(want) {
		t.Fatalf("after a restart: fire_at %s, folded %v; want held to %s, the end of the window", held.FireAtRaw, held.Folded, want)
	}
	p.kill(t) // a delivery held

	p = startProcess(t, bin, srv.ClientURL(), dir)
	defer p.stop(t)
	folded := schedule(t, nc, throttled("throttle.crash", "K", "1h", "three"))
	if !folded.Folded || folded.FireAtRaw != held.FireAtRaw {
		t.Fatalf("after a second restart: %+v, want folded into the held delivery at %s", folded, held.FireAtRaw)
	}
	if n := pending(t, nc); n != 1 {
		t.Fatalf("pending %d, want the one held", n)
	}
	// Bring the held delivery forward to see it go out once, with the
	// newest payload.
	fired, err := api(nc).Fire(context.Background(), wire.MessageRef{Tag: folded.Tag})
	if err != nil {
		t.Fatal(err)
	}
	r = next(t, got, "the held delivery")
	for string(r.Data) == "one" {
		// An ACK in the last moments before a crash may be lost, and the
		// message delivered again (protocol.md, section 3): the first
		// was, if its delete had not reached the disk.
		ackSync(t, nc, r.Msg, "")
		r = next(t, got, "the held delivery")
	}
	if string(r.Data) != "three" || r.Header.Get(wire.HeaderTag) != fired.Tag {
		t.Fatalf("delivered %q, tag %s; want the folded publish, fired as %s", r.Data, r.Header.Get(wire.HeaderTag), fired.Tag)
	}
	ackSync(t, nc, r.Msg, "")
	waitPending(t, nc, 0)
}
