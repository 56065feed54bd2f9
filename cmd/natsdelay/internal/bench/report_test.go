package bench

import (
	"strings"
	"testing"
)

// sampleResults is a run with every phase and made-up figures, with
// natsdelay ahead on some rows and behind on others.
func sampleResults() *Results {
	cfg := Quick().withDefaults()
	lat := func(system string, rate, p50, p99, delivered float64) FireResult {
		return FireResult{
			System: system, OfferedRate: rate, Scheduled: cfg.FireMsgs, Delivered: cfg.FireMsgs,
			P50Ms: p50, P90Ms: p50 * 2, P99Ms: p99, MaxMs: p99 * 2, DeliveredRate: delivered,
			LatenessMs: []float64{p50 / 2, p50, p99},
		}
	}
	return &Results{
		Host:   Host{CPU: "test CPU", Cores: 2, GoVersion: "go1.x", NATS: "2.x", Embedded: true, StealPct: 1.5},
		Config: summary(cfg),
		Ingest: []IngestResult{
			{System: SystemDelay, Mode: "pipelined", Rate: 60_000},
			{System: SystemJS, Mode: "pipelined", Rate: 30_000},
			{System: SystemCore, Mode: "pipelined", Rate: 120_000},
			{System: SystemDelay, Mode: "requesters", Rate: 2_900},
			{System: SystemJS, Mode: "requesters", Rate: 10_000},
			{System: SystemCore, Mode: "requesters", Rate: 20_000},
		},
		Fire: []FireResult{
			lat(SystemDelay, 2_000, 1, 4, 2_000), lat(SystemJS, 2_000, 500, 900, 1_500),
			lat(SystemDelay, 5_000, 2, 8, 5_000), lat(SystemJS, 5_000, 600, 950, 4_000),
		},
		EndToEnd: []EndToEndResult{{System: SystemDelay, Rate: 8_000}, {System: SystemJS, Rate: 9_000}},
		Scale: &ScaleResult{
			Pending: cfg.ScalePending, FillRate: 40_000,
			DueEmpty: lat(SystemDelay, 0, 1, 2, 0), DuePending: lat(SystemDelay, 0, 1, 3, 0),
		},
		Expiry:        &ExpiryResult{Pending: cfg.ScalePending, Expired: cfg.ExpiredMsgs, Ms: 120},
		JetStreamSync: &JetStreamSync{Interval: "2m0s"},
	}
}

// TestWriteTable_Durability checks that the table says how durable each
// system's reply is, since the ingest rows compare like for like only when
// JetStream fsyncs every write too.
func TestWriteTable_Durability(t *testing.T) {
	for _, tc := range []struct {
		name string
		sync *JetStreamSync
		want string
	}{
		{"default interval", &JetStreamSync{Interval: "2m0s"}, "jetstream replies once a write is handed to the OS and fsyncs every 2m0s in the background"},
		{"sync always", &JetStreamSync{Always: true, Interval: "2m0s"}, "jetstream fsyncs every write before it replies"},
		{"external server", nil, "as the --nats server is configured, which the bench cannot see"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := sampleResults()
			res.JetStreamSync = tc.sync
			var b strings.Builder
			if err := WriteTable(&b, res); err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{"natsdelay replies to a schedule only after the fsync of the batch that holds it", tc.want} {
				if !strings.Contains(b.String(), want) {
					t.Errorf("table does not say %q:\n%s", want, b.String())
				}
			}
		})
	}
}
