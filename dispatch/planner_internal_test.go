package dispatch

import (
	"context"
	"testing"
	"time"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/delaystore/pebblestore"
	"github.com/natsdelay/natsdelay/keys"
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

// TestGivingWay_WhileStaged checks that the planner gives way while a
// burst is staged, waiting for its time, as it does while a pass
// publishes: the next burst comes into its look-ahead at the very moment
// this one goes out.
func TestGivingWay_WhileStaged(t *testing.T) {
	st, err := pebblestore.Open(pebblestore.Config{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	repo, err := delaystore.OpenRepository(st, delaystore.RepositoryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = repo.Close(); _ = st.Close() })
	d, err := New(repo, nopPublisher{}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	d.mu.frontier.next = never // nothing due
	for _, staging := range []bool{false, true} {
		d.stagingNow.Store(staging)
		gw := giveWay{most: time.Second}
		want := time.Duration(0)
		if staging {
			want = giveWayRetry
		}
		if got := d.givingWay(&gw); got != want {
			t.Errorf("staging %v: gives way for %v, want %v", staging, got, want)
		}
	}
}

// nopPublisher publishes nothing.
type nopPublisher struct{}

func (nopPublisher) Deliver(keys.Key, *delaystore.StoredMessage, uint32) error { return nil }
func (nopPublisher) DeadLetter(string, keys.Key, *delaystore.StoredMessage, uint32, string) error {
	return nil
}
func (nopPublisher) Flush(context.Context) error { return nil }
