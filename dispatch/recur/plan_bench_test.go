package recur_test

import (
	"testing"
	"time"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/dispatch/recur"
)

// BenchmarkPlan_Next measures what the dispatcher does for every
// occurrence it plans: read the schedule from the occurrence (parsing a
// cron spec and loading its zone) and find the successor's planned time.
func BenchmarkPlan_Next(b *testing.B) {
	now := time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)
	for _, bc := range []struct {
		name string
		r    *delaystore.Recurrence
	}{
		{"every", &delaystore.Recurrence{EveryNs: int64(time.Second)}},
		{"cron-utc", &delaystore.Recurrence{Cron: "*/15 9-17 * * MON-FRI"}},
		{"cron-zone", &delaystore.Recurrence{Cron: "0 9 * * MON-FRI", Zone: "Europe/Berlin"}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			occ := now
			for b.Loop() {
				p, err := recur.Of(bc.r)
				if err != nil {
					b.Fatal(err)
				}
				next, _, ok := p.Next(occ, 1, 0, occ)
				if !ok {
					// Run long enough, a schedule reaches the end
					// of storable time: start it over.
					occ = now
					continue
				}
				occ = next
			}
		})
	}
}
