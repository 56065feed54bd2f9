package main

import (
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

// TestParse_Bench_Sizes checks that bench's size flags override the preset
// they start from, and that 0 keeps the preset.
func TestParse_Bench_Sizes(t *testing.T) {
	for _, tc := range []struct {
		name      string
		args      []string
		fireMsgs  int
		pending   int
		rates     []float64
		fireLead  time.Duration
		ingestMsg int
	}{
		{"defaults", []string{"bench"}, 50_000, 1_000_000, []float64{25_000, 100_000}, 0, 100_000},
		{"quick", []string{"bench", "--quick"}, 1_000, 5_000, []float64{2_000, 5_000}, 300 * time.Millisecond, 2_000},
		{"quick with sizes", []string{"bench", "--quick", "--scale-pending", "7", "--fire-rates", "10,20"}, 1_000, 7, []float64{10, 20}, 300 * time.Millisecond, 2_000},
		// A new FireMsgs without a lead lets bench size the lead to it.
		{"more fire msgs", []string{"bench", "--quick", "--fire-msgs", "9000"}, 9_000, 5_000, []float64{2_000, 5_000}, 0, 2_000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _, err := parse(tc.args, io.Discard, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			cfg := c.Bench.config()
			if cfg.FireMsgs != tc.fireMsgs || cfg.ScalePending != tc.pending || cfg.FireLead != tc.fireLead || cfg.IngestMsgs != tc.ingestMsg {
				t.Errorf("got fire %d, pending %d, lead %v, ingest %d; want %d, %d, %v, %d",
					cfg.FireMsgs, cfg.ScalePending, cfg.FireLead, cfg.IngestMsgs, tc.fireMsgs, tc.pending, tc.fireLead, tc.ingestMsg)
			}
			if len(cfg.FireRates) != len(tc.rates) || cfg.FireRates[0] != tc.rates[0] || cfg.FireRates[1] != tc.rates[1] {
				t.Errorf("fire rates %v, want %v", cfg.FireRates, tc.rates)
			}
		})
	}
}

// TestParse_Bench_BadValues checks that every bad bench flag is reported at
// once, as a usage error naming the flag.
func TestParse_Bench_BadValues(t *testing.T) {
	_, _, err := parse([]string{"bench", "--fire-msgs=-1", "--fire-rates=0", "--timeout=-1s"}, io.Discard, io.Discard)
	if !errors.Is(err, errUsage) {
		t.Fatalf("got %v, want a usage error", err)
	}
	for _, want := range []string{"--fire-msgs -1", "--fire-rates", "--timeout -1s"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %q: %v", want, err)
		}
	}
}
