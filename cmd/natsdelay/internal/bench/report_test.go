package bench

import (
	"math"
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
		{"default interval", &JetStreamSync{Interval: "2m0s"}, "jetstream replies once a write is handed to the OS, and fsyncs every 2m0s"},
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

// TestVersus_Direction checks that a ratio says better or worse by the
// figure's direction, never a bare quotient whose reading depends on the
// row.
func TestVersus_Direction(t *testing.T) {
	for _, tc := range []struct {
		name   string
		d, o   float64
		better string
		want   string
	}{
		{"more msgs/s", 60_000, 30_000, higher, "2.00x better"},
		{"fewer msgs/s", 2_900, 10_000, higher, "3.45x worse"},
		{"less lateness", 1, 881, lower, "881x better"},
		{"more lateness", 26.2, 2.62, lower, "10.0x worse"},
		{"within rounding", 1000, 1001, higher, "same"},
		{"no figure", math.NaN(), 1, higher, "-"},
		{"zero", 0, 1, lower, "-"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := versus(tc.d, tc.o, tc.better); got != tc.want {
				t.Errorf("versus(%v, %v, %s) = %q, want %q", tc.d, tc.o, tc.better, got, tc.want)
			}
		})
	}
}

// TestWriteTable_EveryRowWithDirection checks that every row comparing
// natsdelay with another system is printed with the direction that is
// better and a ratio saying better or worse, including the rows where
// natsdelay is behind.
func TestWriteTable_EveryRowWithDirection(t *testing.T) {
	res := sampleResults()
	var b strings.Builder
	if err := WriteTable(&b, res); err != nil {
		t.Fatal(err)
	}
	table := b.String()
	t.Log("\n" + table)
	for _, want := range []string{`ratios: natsdelay against the other system, "Nx better" or "Nx worse"`, "natsdelay vs jetstream", "natsdelay vs core"} {
		if !strings.Contains(table, want) {
			t.Errorf("table has no %q", want)
		}
	}
	for line := range strings.Lines(table) {
		if strings.HasSuffix(strings.TrimSuffix(line, "\n"), " ") {
			t.Errorf("line ends in a space: %q", line)
		}
	}
	// The rows of natsdelay alone (scale, expiry) have no ratio and reuse
	// some labels.
	compared, _, _ := strings.Cut(table, "\nscale:")
	for _, tc := range []struct {
		label  string
		better string
		want   [][]string // per row with the label, in order: its ratios
	}{
		{"pipelined, 256 outstanding", higher, [][]string{{"2.00x better", "2.00x worse"}}},
		{"8 sync requesters", higher, [][]string{{"3.45x worse", "6.90x worse"}}},
		{"lateness p50 ms", lower, [][]string{{"500x better"}, {"300x better"}}},
		{"lateness p90 ms", lower, [][]string{{"500x better"}, {"300x better"}}},
		{"lateness p99 ms", lower, [][]string{{"225x better"}, {"119x better"}}},
		{"lateness max ms", lower, [][]string{{"225x better"}, {"119x better"}}},
		{"delivered msgs/s", higher, [][]string{{"1.33x better"}, {"1.25x better"}}},
		{"msgs/s", higher, [][]string{{"1.12x worse"}}},
	} {
		var rows []string
		for line := range strings.Lines(compared) {
			if strings.HasPrefix(line, tc.label+"  ") {
				rows = append(rows, line)
			}
		}
		if len(rows) != len(tc.want) {
			t.Errorf("%d rows %q, want %d", len(rows), tc.label, len(tc.want))
			continue
		}
		for i, row := range rows {
			if f := strings.Fields(strings.TrimPrefix(row, tc.label)); len(f) == 0 || f[0] != tc.better {
				t.Errorf("row %q: better column is not %q", row, tc.better)
			}
			for _, want := range tc.want[i] {
				if !strings.Contains(row, want) {
					t.Errorf("row %q: no %q", row, want)
				}
			}
		}
	}
}
