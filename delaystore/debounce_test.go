package delaystore_test

import (
	"testing"
	"time"

	"github.com/natsdelay/natsdelay/delaystore"
)

// debounced is a publish of a debounce of (subject, X) accepted at atNs:
// due debounce later, at most maxWait after the first of its burst.
func debounced(subject string, atNs int64, debounce, maxWait time.Duration) *delaystore.StoredMessage {
	m := withID(msg(subject, atNs+int64(debounce)), "X")
	m.EnqueuedAtNs, m.DebounceFirstNs, m.DebounceMaxNs = atNs, atNs, int64(maxWait)
	return m
}

// TestDebounce_CarriesTheBurst checks that a debounced message that
// replaces a debounced one, pending or earlier in the same batch, keeps
// the first publish's time and is due no later than the maximum after
// it, with its expiry moved along; a message without the debounce between
// them ends the burst.
func TestDebounce_CarriesTheBurst(t *testing.T) {
	r, s := newRepo(t)
	const sec = int64(time.Second)
	schedule(t, r, debounced("d.a", t0, 30*time.Second, time.Minute))
	// 20 s and then 40 s later: the second is due at 20+30 s, within the
	// minute; the third would be at 70 s and is cut to 60 s.
	second := debounced("d.a", t0+20*sec, 30*time.Second, time.Minute)
	third := debounced("d.a", t0+40*sec, 30*time.Second, time.Minute)
	third.TtlNs, third.ExpireAtNs = 5*sec, t0+75*sec
	out := schedule(t, r, second, third)
	if second.FireAtNs != t0+50*sec || second.DebounceFirstNs != t0 {
		t.Fatalf("second: fire at +%v, first at +%v; want +50s and +0s", time.Duration(second.FireAtNs-t0), time.Duration(second.DebounceFirstNs-t0))
	}
	m := storedMessage(t, s, out[1].Key)
	if m == nil || m.FireAtNs != t0+60*sec || m.DebounceFirstNs != t0 || m.ExpireAtNs != t0+65*sec {
		t.Fatalf("stored third %v, want due at +60s, first at +0s, expiring at +65s", m)
	}
	if n := r.Pending(); n != 1 {
		t.Fatalf("pending %d, want 1", n)
	}

	// Past the maximum, a publish is due at once, not before it was sent.
	late := debounced("d.a", t0+90*sec, 30*time.Second, time.Minute)
	schedule(t, r, late)
	if late.FireAtNs != t0+90*sec {
		t.Fatalf("late publish due at +%v, want +90s", time.Duration(late.FireAtNs-t0))
	}

	// A plain replacement ends the burst: the next debounce starts anew.
	plain := withID(msg("d.a", t0+100*sec), "X")
	fresh := debounced("d.a", t0+100*sec, 30*time.Second, time.Minute)
	schedule(t, r, plain, fresh)
	if fresh.DebounceFirstNs != t0+100*sec || fresh.FireAtNs != t0+130*sec {
		t.Fatalf("after a plain replacement: first at +%v, due at +%v; want +100s and +130s", time.Duration(fresh.DebounceFirstNs-t0), time.Duration(fresh.FireAtNs-t0))
	}
}
