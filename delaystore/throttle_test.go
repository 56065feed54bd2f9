package delaystore_test

import (
	"testing"
	"time"

	"github.com/natsdelay/natsdelay/delaystore"
)

// throttled is a publish of (subject, X) at atNs throttled to one delivery
// per window, as ingest makes it: due at once, before the repository
// looks at the window.
func throttled(subject string, atNs int64, window time.Duration) delaystore.Once {
	m := withID(msg(subject, atNs), "X")
	m.EnqueuedAtNs, m.ThrottleNs = atNs, int64(window)
	m.Payload = []byte(time.Duration(atNs - t0).String())
	return delaystore.Once{Msg: m}
}

// TestThrottle_OnePerWindow checks the two fates of a throttled publish:
// the first is due at once; one within its window, once it is delivered,
// is held until the window ends; publishes while that one is held fold
// into it (same fire time, newest payload, Folded); one after the window
// is due at once again. A publish on another subject or id is not held.
func TestThrottle_OnePerWindow(t *testing.T) {
	r, s := newRepo(t)
	const sec = int64(time.Second)
	first := scheduleOnce(t, r, t0, throttled("t.a", t0, time.Minute))[0]
	if first.Folded || first.FireAtNs != t0 {
		t.Fatalf("first: %+v, want due at once, not folded", first)
	}
	apply(t, r, delaystore.Op{Key: first.Key}) // delivered

	second := scheduleOnce(t, r, t0+10*sec, throttled("t.a", t0+10*sec, time.Minute))[0]
	if second.Folded || second.FireAtNs != t0+60*sec {
		t.Fatalf("second: %+v, want held to +60s, not folded", second)
	}
	third := scheduleOnce(t, r, t0+20*sec, throttled("t.a", t0+20*sec, time.Minute))[0]
	if !third.Folded || third.FireAtNs != t0+60*sec || !third.HasReplaced || third.Replaced != second.Key {
		t.Fatalf("third: %+v, want folded into the second at +60s", third)
	}
	// Two in one batch fold into the held one too, the last one winning.
	both := scheduleOnce(t, r, t0+30*sec, throttled("t.a", t0+30*sec, time.Minute), throttled("t.a", t0+31*sec, time.Minute))
	if !both[0].Folded || !both[1].Folded || both[1].FireAtNs != t0+60*sec {
		t.Fatalf("a batch of two: %+v, want both folded at +60s", both)
	}
	if n := r.Pending(); n != 1 {
		t.Fatalf("pending %d, want the one held", n)
	}
	m := storedMessage(t, s, both[1].Key)
	if m == nil || string(m.Payload) != "31s" || m.FireAtNs != t0+60*sec {
		t.Fatalf("held message %v, want the newest payload (31s) due at +60s", m)
	}
	other := scheduleOnce(t, r, t0+30*sec, throttled("t.b", t0+30*sec, time.Minute))[0]
	if other.Folded || other.FireAtNs != t0+30*sec {
		t.Fatalf("another subject: %+v, want due at once", other)
	}

	// The held one goes out at +60 s; its window ends at +120 s.
	apply(t, r, delaystore.Op{Key: both[1].Key})
	next := scheduleOnce(t, r, t0+90*sec, throttled("t.a", t0+90*sec, time.Minute))[0]
	if next.Folded || next.FireAtNs != t0+120*sec {
		t.Fatalf("within the held one's window: %+v, want held to +120s", next)
	}
	apply(t, r, delaystore.Op{Key: next.Key})
	late := scheduleOnce(t, r, t0+200*sec, throttled("t.a", t0+200*sec, time.Minute))[0]
	if late.Folded || late.FireAtNs != t0+200*sec {
		t.Fatalf("after the window: %+v, want due at once", late)
	}
}

// TestThrottle_DueHeldIsNotFoldedInto checks that a publish meeting a held
// delivery already due (it may be on its way) is not folded into it but
// is the next delivery, after that one's window, and that the records of
// windows are swept once they end.
func TestThrottle_DueHeldIsNotFoldedInto(t *testing.T) {
	r, s := newRepo(t)
	const sec = int64(time.Second)
	first := scheduleOnce(t, r, t0, throttled("t.a", t0, time.Minute))[0]
	// Still pending at +5 s: due, maybe in flight.
	again := scheduleOnce(t, r, t0+5*sec, throttled("t.a", t0+5*sec, time.Minute))[0]
	if again.Folded || again.FireAtNs != t0+60*sec || again.Replaced != first.Key {
		t.Fatalf("publish meeting a due one: %+v, want the next delivery at +60s", again)
	}
	if n := dedupKeys(t, s); n != 2 {
		t.Fatalf("%d window keys, want a record and its time entry", n)
	}
	apply(t, r, delaystore.Op{Key: again.Key})
	// Long after, any batch sweeps the ended window.
	scheduleOnce(t, r, t0+int64(time.Hour), delaystore.Once{Msg: msg("t.z", t0+int64(time.Hour))})
	if n := dedupKeys(t, s); n != 0 {
		t.Fatalf("%d window keys after the window ended, want 0", n)
	}
}
