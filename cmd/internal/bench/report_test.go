package bench

import (
	"math"
	"slices"
	"strings"
	"testing"
)

// sampleResults is a run with every phase and made-up figures, with
// natsdelay ahead on some rows and behind on others.
func sampleResults() *Results {
	cfg := Quick().withDefaults()
	cfg.WaveSubjects = 500 // the figures below are per message of 500
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
			{System: SystemDelay, Mode: "pipelined", Msgs: 2_000, Rate: 60_000, CPU: inProcess(0.04)},
			{System: SystemJS, Mode: "pipelined", Msgs: 2_000, Rate: 30_000, CPU: inProcess(0.08)},
			{System: SystemCore, Mode: "pipelined", Msgs: 2_000, Rate: 120_000, CPU: inProcess(0.01)},
			{System: SystemDelay, Mode: "requesters", Msgs: 2_000, Rate: 2_900, CPU: inProcess(0.2)},
			{System: SystemJS, Mode: "requesters", Msgs: 2_000, Rate: 10_000, CPU: inProcess(0.1)},
			{System: SystemCore, Mode: "requesters", Msgs: 2_000, Rate: 20_000, CPU: inProcess(0.05)},
		},
		Fire: []FireResult{
			lat(SystemDelay, 2_000, 1, 4, 2_000), lat(SystemJS, 2_000, 500, 900, 1_500),
			lat(SystemDelay, 5_000, 2, 8, 5_000), lat(SystemJS, 5_000, 600, 950, 4_000),
		},
		EndToEnd: []EndToEndResult{
			{System: SystemDelay, Msgs: 2_000, Rate: 8_000, CPU: inProcess(0.06)},
			{System: SystemJS, Msgs: 2_000, Rate: 9_000, CPU: inProcess(0.09)},
		},
		Scale: &ScaleResult{
			Pending: cfg.ScalePending, Subjects: cfg.ScaleSubjects, FillRate: 40_000, OwnProcess: true,
			FillCPU: CPU{Service: 0.07, Bench: 0.05}, RSSEmpty: 40 << 20, RSSBytes: 50 << 20, RSSPeak: 60 << 20,
			MemEmpty:   MemSample{RSSBytes: 40 << 20, HeapBytes: 3 << 20, DispatchSubjects: 0},
			MemPending: MemSample{RSSBytes: 50 << 20, HeapBytes: 4 << 20, DispatchSubjects: int64(cfg.ScaleSubjects)},
			DueEmpty:   lat(SystemDelay, 0, 1, 2, 0), DuePending: lat(SystemDelay, 0, 1, 3, 0),
		},
		Expiry: &ExpiryResult{Pending: cfg.ScalePending, Expired: cfg.ExpiredMsgs, Ms: 120},
		Waves: &WavesResult{
			Subjects: cfg.WaveSubjects, OwnProcess: true,
			Idle: MemSample{RSSBytes: 48 << 20, HeapBytes: 3 << 20, DispatchSubjects: 0},
			Waves: []WaveResult{
				{Rate: 12_000, CPU: CPU{Service: 0.02, Bench: 0.01}, Mem: MemSample{RSSBytes: 51 << 20, HeapBytes: 4 << 20, DispatchSubjects: 0},
					Released: &MemSample{RSSBytes: 49 << 20, HeapBytes: 3 << 20, DispatchSubjects: 0, Releases: 1}},
				{Rate: 17_000, CPU: CPU{Service: 0.01, Bench: -1}, Mem: MemSample{RSSBytes: 50 << 20, HeapBytes: -1, DispatchSubjects: -1}},
			},
		},
		JetStreamSync: &JetStreamSync{Interval: "2m0s"},
	}
}

// inProcess is the CPU time of a run with natsdelay in the bench process.
func inProcess(bench float64) CPU { return CPU{Service: -1, Bench: bench} }

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
		// 20 against 40 and 5 µs/msg; 100 against 50 and 25.
		{"pipelined, 256 outstanding: " + cpuBench, lower, [][]string{{"20.0", "40.0", "2.00x better", "5.00", "4.00x worse"}}},
		{"8 sync requesters: " + cpuBench, lower, [][]string{{"100", "50.0", "2.00x worse", "25.0", "4.00x worse"}}},
		// Fire took no CPU tick in the sample, so has no ratio; end to
		// end 30 against 45.
		{cpuBench, lower, [][]string{{"0.00", "-"}, {"0.00", "-"}, {"30.0", "45.0", "1.50x better"}}},
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

// TestWriteTable_ScaleAndWaves checks the rows of natsdelay's own process:
// the fill's CPU time per message for natsdelay and for the bench process
// apart, memory per pending message and per subject, and a row of memory
// per wave after the idle one, with "-" where a figure is unknown, and
// one more for a wave after which natsdelay handed memory back.
func TestWriteTable_ScaleAndWaves(t *testing.T) {
	res := sampleResults()
	var b strings.Builder
	if err := WriteTable(&b, res); err != nil {
		t.Fatal(err)
	}
	table := b.String()
	t.Log("\n" + table)
	scale := table[strings.Index(table, "\nscale:")+1:]
	for _, want := range [][]string{
		{"scale: natsdelay with 5,000 pending on 100 subjects"},
		// 0.07 s and 0.05 s over 5,000 msgs.
		{"fill CPU µs/msg, natsdelay process", "14.0"},
		{"fill CPU µs/msg, bench process (nats-server, clients)", "10.0"},
		{"natsdelay Go heap MiB, live after a GC", "3.00", "4.00"},
		{"dispatcher subjects (natsdelay_dispatch_subjects)", "0", "100"},
		// 5,000 messages and 100 subjects are too few for a figure per
		// item (TestWriteTable_SmallSamples).
		{"RSS growth per pending message, bytes", "too few to tell"},
		{"Go heap growth per pending message, bytes", "too few to tell"},
		{"RSS growth per subject, bytes", "too few to tell"},
		{"Go heap growth per subject, bytes", "too few to tell"},
		{"waves: 2 of 500 new subjects, one due-now msg each", "natsdelay process RSS MiB", "Go heap MiB", "dispatcher subjects", "natsdelay CPU µs/msg", "bench CPU µs/msg"},
		{"idle, before the first wave", "48.0", "3.00", "0"},
		// 0.02 s and 0.01 s over 500 msgs.
		{"after wave 1, drained", "51.0", "4.00", "12,000", "40.0", "20.0"},
		// The memory once handed back, after wave 1 only.
		{"after wave 1, idle: memory handed back", "49.0", "3.00", "0"},
		{"after wave 2, drained", "50.0", "17,000", "20.0", "-"},
	} {
		row := ""
		for line := range strings.Lines(scale) {
			if strings.HasPrefix(line, want[0]) {
				row = line
				break
			}
		}
		if row == "" {
			t.Errorf("no row %q", want[0])
			continue
		}
		f := strings.Fields(strings.TrimPrefix(row, want[0]))
		for _, w := range want[1:] {
			if !slices.Contains(f, w) && !strings.Contains(row, w) {
				t.Errorf("row %q: no %q", row, w)
			}
		}
	}
	// One subject has no row per subject: it would be the growth in all.
	res.Scale.Subjects = 1
	b.Reset()
	if err := WriteTable(&b, res); err != nil {
		t.Fatal(err)
	}
	if one := b.String(); !strings.Contains(one, "pending on 1 subject ") || strings.Contains(one, "per subject") {
		t.Errorf("with one subject: want \"on 1 subject\" and no row per subject:\n%s", one)
	}
	// The second wave's unknown heap and gauge: two dashes besides the
	// unknown bench CPU. It handed nothing back: no row says so.
	if strings.Contains(scale, "after wave 2, idle") {
		t.Error("a row of memory handed back after wave 2, which has none")
	}
	for line := range strings.Lines(scale) {
		if strings.HasPrefix(line, "after wave 2") && strings.Count(line, " - ")+strings.Count(line, " -\n") < 3 {
			t.Errorf("row %q: want - for the unknown heap, gauge and bench CPU", line)
		}
	}
}

// TestWriteTable_SplitCPU checks that with natsdelay and the nats-server
// each in a process of its own, the end-to-end table shows each one's CPU
// time per message and natsdelay's against the server's, so the cost
// target (natsdelay at most the server that carries its messages) can be
// read off the table.
func TestWriteTable_SplitCPU(t *testing.T) {
	res := sampleResults()
	res.Config.OwnProcess, res.Config.ServerProcess = true, true
	// 2,000 msgs: natsdelay 0.04 s, server 0.02 s, clients 0.01 s;
	// JetStream's run: server 0.06 s, clients 0.01 s.
	res.EndToEnd[0].CPU = CPU{Service: 0.04, Bench: 0.01, Server: 0.02}
	res.EndToEnd[1].CPU = CPU{Service: -1, Bench: 0.01, Server: 0.06}
	var b strings.Builder
	if err := WriteTable(&b, res); err != nil {
		t.Fatal(err)
	}
	_, e2e, ok := strings.Cut(b.String(), "end to end:")
	if !ok {
		t.Fatalf("no end-to-end table:\n%s", b.String())
	}
	for _, want := range [][]string{
		{"CPU µs/msg, bench process (clients)", "lower", "5.00", "5.00", "same"},
		{"CPU µs/msg, natsdelay process", "lower", "20.0"},
		{"CPU µs/msg, nats-server process", "lower", "10.0", "30.0", "3.00x", "better"},
		{"natsdelay process / nats-server process", "lower", "2.00"},
		{"CPU µs/msg, all processes", "lower", "35.0", "35.0", "same"},
	} {
		found := false
		for line := range strings.Lines(e2e) {
			if rest, ok := strings.CutPrefix(line, want[0]+"  "); ok {
				found = true
				if got := strings.Fields(rest); !slices.Equal(got, want[1:]) {
					t.Errorf("row %q: %q, want %q", want[0], got, want[1:])
				}
				break
			}
		}
		if !found {
			t.Errorf("no row %q in:\n%s", want[0], e2e)
		}
	}
}
