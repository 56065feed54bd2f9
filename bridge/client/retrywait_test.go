package client

import (
	"math/rand/v2"
	"testing"
	"time"
)

// The wait between retries doubles up to MaxRetryWait and no further,
// even after many tries (no overflow into a wait of nothing), and is
// drawn from the upper half of that, so that clients that failed
// together spread their retries.
func TestRetryWait_CappedWithJitter(t *testing.T) {
	lowest := func(n int64) int64 { return 0 }
	highest := func(n int64) int64 { return n - 1 }
	for _, tc := range []struct {
		base     time.Duration
		n        int
		min, max time.Duration
	}{
		{100 * time.Millisecond, 0, 50 * time.Millisecond, 100 * time.Millisecond},
		{100 * time.Millisecond, 3, 400 * time.Millisecond, 800 * time.Millisecond},
		{100 * time.Millisecond, 7, MaxRetryWait / 2, MaxRetryWait},
		{time.Second, 70, MaxRetryWait / 2, MaxRetryWait},
		{time.Millisecond, 1000, MaxRetryWait / 2, MaxRetryWait},
		{time.Minute, 5, 30 * time.Second, time.Minute},
	} {
		lo, hi := retryWait(tc.base, tc.n, lowest), retryWait(tc.base, tc.n, highest)
		if lo != tc.min || hi != tc.max {
			t.Errorf("retryWait(%v, %d) spans [%v, %v], want [%v, %v]", tc.base, tc.n, lo, hi, tc.min, tc.max)
		}
	}
	seen := map[time.Duration]bool{}
	for range 20 {
		seen[retryWait(time.Second, 2, rand.Int64N)] = true
	}
	if len(seen) < 2 {
		t.Errorf("20 waits after the third try were all %v: no jitter", seen)
	}
	if w := retryWait(0, 5, rand.Int64N); w != 0 {
		t.Errorf("retryWait(0, 5) = %v, want 0", w)
	}
}
