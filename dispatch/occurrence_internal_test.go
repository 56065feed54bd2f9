package dispatch

import (
	"math"
	"testing"
	"time"

	"github.com/natsdelay/natsdelay/delaystore"
)

// TestOccurrenceExpiry_NeverWraps checks that the expiry of an occurrence
// going out close to the last storable time is that time, never a time
// that overflowed into the past, which would expire it at once.
func TestOccurrenceExpiry_NeverWraps(t *testing.T) {
	late := delaystore.MaxTime.Add(-24 * time.Hour).UnixNano()
	for _, tt := range []struct {
		name      string
		from, ttl int64
		want      int64
	}{
		{"well before the end", 1_800_000_000_000_000_000, int64(time.Hour), 1_800_000_000_000_000_000 + int64(time.Hour)},
		{"up to the end", late, int64(24 * time.Hour), delaystore.MaxTimeNs},
		{"past the end", late, int64(200 * 365 * 24 * time.Hour), delaystore.MaxTimeNs},
		{"past int64", late, math.MaxInt64, delaystore.MaxTimeNs},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := occurrenceExpiry(tt.from, tt.ttl); got != tt.want {
				t.Fatalf("occurrenceExpiry(%d, %d) = %d (%v), want %d", tt.from, tt.ttl, got, time.Unix(0, got).UTC(), tt.want)
			}
		})
	}
}
