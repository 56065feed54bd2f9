package bench

import (
	"image/png"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestRateRows_EveryThroughputRow checks that the chart's throughput panel
// has every msgs/s row of the table, those where natsdelay is behind
// included, each named with its ratio as the table says it.
func TestRateRows_EveryThroughputRow(t *testing.T) {
	var names []string
	for _, r := range rateRows(sampleResults()) {
		names = append(names, r.name())
	}
	want := []string{
		"ingest, pipelined, 256 outstanding: 2.00x better",
		"ingest, 8 sync requesters: 3.45x worse",
		"fire at 2,000/s offered, delivered: 1.33x better",
		"fire at 5,000/s offered, delivered: 1.25x better",
		"end to end: 1.12x worse",
		"scale fill to 5,000, natsdelay only",
	}
	if !slices.Equal(names, want) {
		t.Errorf("rows:\n%q\nwant\n%q", names, want)
	}
}

// TestRateRows_SomePhases checks that only the phases that ran have rows,
// with no figure for a system that has none.
func TestRateRows_SomePhases(t *testing.T) {
	res := sampleResults()
	res.Ingest, res.Fire, res.Scale = nil, nil, nil
	rows := rateRows(res)
	if len(rows) != 1 || rows[0].label != "end to end" || !math.IsNaN(rows[0].core) {
		t.Errorf("rows of an e2e run: %+v", rows)
	}
	res.EndToEnd = nil
	if rows := rateRows(res); len(rows) != 0 || HasChart(res) {
		t.Errorf("a run without fire or throughput has rows %+v, chart %v", rows, HasChart(res))
	}
}

// TestWritePNG_Panels checks that the chart has a panel for fire lateness
// and one for throughput, stacked, and only the throughput panel when no
// fire run has lateness to draw.
func TestWritePNG_Panels(t *testing.T) {
	for _, tc := range []struct {
		name   string
		edit   func(*Results)
		panels int
	}{
		{"every phase", func(*Results) {}, 2},
		{"no fire", func(r *Results) { r.Fire = nil }, 1},
		{"fire only", func(r *Results) { r.Ingest, r.EndToEnd, r.Scale = nil, nil, nil }, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := sampleResults()
			tc.edit(res)
			path := filepath.Join(t.TempDir(), "bench.png")
			if err := WritePNG(path, res); err != nil {
				t.Fatal(err)
			}
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			cfg, err := png.DecodeConfig(f)
			if err != nil {
				t.Fatal(err)
			}
			if got := float64(cfg.Height) / float64(cfg.Width); math.Abs(got-float64(tc.panels)*float64(panelHeight/panelWidth)) > 0.01 {
				t.Errorf("%dx%d: height/width %.3f, want %d panels of %.3f", cfg.Width, cfg.Height, got, tc.panels, panelHeight/panelWidth)
			}
		})
	}
}

// TestThroughputPlot_Durability checks that the throughput panel says how
// often each system fsyncs, as the table does, since its ingest rows
// compare like for like only when both sync every write.
func TestThroughputPlot_Durability(t *testing.T) {
	for _, tc := range []struct {
		name string
		sync *JetStreamSync
		want string
	}{
		{"default interval", &JetStreamSync{Interval: "2m0s"}, "(natsdelay fsyncs every acked batch, jetstream every 2m0s)"},
		{"sync always", &JetStreamSync{Always: true, Interval: "2m0s"}, "(natsdelay fsyncs every acked batch, jetstream every write)"},
		{"external server", nil, "(natsdelay fsyncs every acked batch, jetstream as its server is set)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := sampleResults()
			res.JetStreamSync = tc.sync
			p, err := throughputPlot(res)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasSuffix(p.Title.Text, tc.want) {
				t.Errorf("title %q does not end in %q", p.Title.Text, tc.want)
			}
		})
	}
}
