package bench

import (
	"strings"
	"testing"
)

// withRecurring adds a recurring run of 20 schedules, and an idle one of
// 500, to res: the quick run's sizes.
func withRecurring(res *Results, cpu float64) {
	res.Recurring = &RecurringResult{
		Schedules: 20, EveryMs: 1000, WindowS: 2, GraceMs: 3000, P99Ratio: 0.86,
		Systems: []RecurLateness{
			{System: SystemDelay, Planned: 40, Delivered: 40, P50Ms: 1.7, P99Ms: 1.9, MaxMs: 1.9, CPU: CPU{Service: -1, Bench: cpu}},
			{System: SystemJS, Planned: 40, Delivered: 40, P50Ms: 1.5, P99Ms: 1.6, MaxMs: 1.6, CPU: CPU{Service: -1, Bench: cpu}},
		},
		Idle: &RecurIdleResult{Schedules: 500, Spec: "0 0 1 1 *", OwnProcess: true,
			MemBefore: MemSample{RSSBytes: 40 << 20, HeapBytes: 3 << 20}, MemAfter: MemSample{RSSBytes: 43 << 20, HeapBytes: 4 << 20},
			IngestRate: 35_000, IngestCPU: CPU{Service: 0.01, Bench: 0.01}, IdleS: 0.5, IdleCPU: CPU{Service: 0, Bench: 0}},
	}
}

// rowOf is the line of table that starts with label, or "".
func rowOf(table, label string) string {
	for line := range strings.Lines(table) {
		if strings.HasPrefix(line, label) {
			return strings.TrimSuffix(line, "\n")
		}
	}
	return ""
}

// TestWriteTable_SmallSamples checks what a quick run's tiny samples
// print: no memory per item extrapolated from a few thousand items, which
// noise of a MiB makes tens of kilobytes, and no CPU per occurrence from a
// few 10 ms clock ticks; the recurring table apart from the waves', after
// a blank line and with widths of its own; and no target from the
// project's history.
func TestWriteTable_SmallSamples(t *testing.T) {
	res := sampleResults()
	withRecurring(res, 0.04)
	var b strings.Builder
	if err := WriteTable(&b, res); err != nil {
		t.Fatal(err)
	}
	table := b.String()
	t.Log("\n" + table)
	for _, label := range []string{"RSS growth per pending message, bytes", "Go heap growth per pending message, bytes",
		"RSS growth per subject, bytes", "RSS growth per 100,000 schedules, MiB", "Go heap growth per 100,000 schedules, MiB"} {
		if row := rowOf(table, label); !strings.Contains(row, "too few to tell") {
			t.Errorf("row %q: want no figure from so small a sample", row)
		}
	}
	for _, label := range []string{"CPU µs/occurrence, whole bench process", "CPU s to take in 100,000 schedules"} {
		if row := rowOf(table, label); !strings.Contains(row, "10 ms ticks") {
			t.Errorf("row %q: want the clock's resolution, not a figure of a few ticks", row)
		}
	}
	if strings.Contains(table, "target") {
		t.Error("the table gives a target")
	}
	if !strings.Contains(table, "\n\nrecurring: ") {
		t.Error("the recurring table does not start after a blank line")
	}
	wave, recur := rowOf(table, "idle, before the first wave"), rowOf(table, "planned times in the window")
	if i, j := strings.Index(wave, "40.0"), strings.Index(recur, "40"); i == j {
		t.Errorf("the recurring table has the waves table's widths:\n%s\n%s", wave, recur)
	}

	// Samples large enough give their figures.
	res.Scale.Pending, res.Scale.Subjects = 1_000_000, 100_000
	res.Recurring.Idle.Schedules = 100_000
	withRecurring(res, 2)
	res.Recurring.Idle.Schedules, res.Recurring.Idle.IngestCPU.Service = 100_000, 3
	b.Reset()
	if err := WriteTable(&b, res); err != nil {
		t.Fatal(err)
	}
	for _, label := range []string{"RSS growth per pending message, bytes", "RSS growth per subject, bytes", "RSS growth per 100,000 schedules, MiB",
		"CPU µs/occurrence, whole bench process", "CPU s to take in 100,000 schedules"} {
		if row := rowOf(b.String(), label); row == "" || strings.Contains(row, "too few") || strings.Contains(row, "ticks") {
			t.Errorf("row %q: want a figure", row)
		}
	}
}

// TestWriteTable_Cells_EndToEnd checks the cells table's end-to-end rows:
// each system's rate, the fleet's and the ideal's ratios to one cell and
// to each other, and the CPU per delivered message, from the systems'
// own figures, and no end-to-end row where the phase ran none.
func TestWriteTable_Cells_EndToEnd(t *testing.T) {
	res := &Results{Config: ConfigSummary{IngestMsgs: 1000}, Cells: &CellsResult{
		Cells: 3, CellNodes: 1, Partitions: 12, Subjects: 1024, Fleet: true,
		Ingest: []IngestResult{
			{System: CellsOne, Mode: "pipelined", Msgs: 1000, Rate: 1000, CPU: CPU{Service: 0.02}},
			{System: CellsFleet, Mode: "pipelined", Msgs: 1000, Rate: 2500, CPU: CPU{Service: 0.03}},
			{System: CellsIdeal, Mode: "pipelined", Msgs: 1000, Rate: 3000, CPU: CPU{Service: 0.025}},
		},
		EndToEnd: []EndToEndResult{
			{System: CellsOne, Msgs: 1000, Delivered: 1000, Rate: 500, CPU: CPU{Service: 0.05}},
			{System: CellsFleet, Msgs: 1000, Delivered: 1000, Rate: 1100, CPU: CPU{Service: 0.08}},
			{System: CellsIdeal, Msgs: 1000, Delivered: 1000, Rate: 1375, CPU: CPU{Service: 0.06}},
		},
	}}
	var b strings.Builder
	if err := WriteTable(&b, res); err != nil {
		t.Fatal(err)
	}
	table := b.String()
	t.Log("\n" + table)
	row := strings.Fields(rowOf(table, "end to end (schedule, deliver, ACK)"))
	if got := strings.Join(row[len(row)-6:], " "); got != "500 1,100 2.20x 1,375 2.75x 0.80x" {
		t.Errorf("end-to-end row %q: want one cell, fleet, fleet/one, ideal, ideal/one, fleet/ideal of 500 / 1,100 / 1,375", got)
	}
	cpu := strings.Fields(rowOf(table, "end to end: CPU µs/msg"))
	if got := strings.Join(cpu[len(cpu)-3:], " "); got != "50.0 80.0 60.0" {
		t.Errorf("end-to-end CPU row %q: want 50.0 80.0 60.0 µs per delivered message", got)
	}
	res.Cells.EndToEnd = nil
	b.Reset()
	if err := WriteTable(&b, res); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "end to end (schedule") {
		t.Errorf("a cells phase without end to end prints its row:\n%s", b.String())
	}
}
