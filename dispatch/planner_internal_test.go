package dispatch

import (
	"testing"
	"time"
)

// TestGiveWay_WaitsForDeliveringPasses checks when the planner gives way:
// while a pass publishes or one published within giveWayQuiet, and never
// when the passes are quiet.
func TestGiveWay_WaitsForDeliveringPasses(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	for _, tc := range []struct {
		name        string
		delivering  bool
		deliveredAt time.Time
		want        time.Duration
	}{
		{"no pass ever published", false, time.Time{}, 0},
		{"a pass publishes now", true, time.Time{}, giveWayRetry},
		{"a pass published just now", false, t0.Add(-time.Millisecond), giveWayRetry},
		{"the passes fell quiet", false, t0.Add(-giveWayQuiet), 0},
	} {
		gw := giveWay{most: time.Second}
		if got := gw.wait(t0, tc.delivering, tc.deliveredAt); got != tc.want {
			t.Errorf("%s: wait %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestGiveWay_BoundedInEachRound checks that the planner gives way for
// at most most in a round of reads, then plans whatever the passes do
// until it has caught up, and that catching up starts a new round.
func TestGiveWay_BoundedInEachRound(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	gw := giveWay{most: 100 * time.Millisecond}
	for at := time.Duration(0); at < gw.most; at += giveWayRetry {
		if got := gw.wait(t0.Add(at), true, time.Time{}); got != giveWayRetry {
			t.Fatalf("%v into the round: wait %v, want %v", at, got, giveWayRetry)
		}
	}
	if got := gw.wait(t0.Add(gw.most), true, time.Time{}); got != 0 {
		t.Fatalf("at most into the round: wait %v, want 0 (plan)", got)
	}
	if got := gw.wait(t0.Add(gw.most+time.Millisecond), true, time.Time{}); got != 0 {
		t.Fatalf("after most, the same round: wait %v, want 0 until caught up", got)
	}
	gw.caughtUp()
	later := t0.Add(time.Hour)
	if got := gw.wait(later, true, time.Time{}); got != giveWayRetry {
		t.Fatalf("a new round: wait %v, want %v", got, giveWayRetry)
	}
}
