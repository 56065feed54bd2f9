package bench

import (
	"math"
	"strings"
	"testing"
	"time"
)

// TestParseStatCPU checks that utime and stime are read from a stat line
// whose command name holds spaces and parentheses, in USER_HZ ticks.
func TestParseStatCPU(t *testing.T) {
	for _, tc := range []struct {
		name string
		stat string
		want time.Duration
		ok   bool
	}{
		{"plain", "1234 (natsdelay) S 1 1234 1234 0 -1 4194560 500 0 0 0 250 37 0 0 20 0 9 0 100 0 0", 2870 * time.Millisecond, true},
		{"odd name", "42 (a (b) c) R 1 42 42 0 -1 0 0 0 0 0 7 3 0 0 20 0 1 0 5 0 0", 100 * time.Millisecond, true},
		{"no name", "42 a R 1", 0, false},
		{"short", "42 (x) R 1 2 3", 0, false},
		{"not a number", "1 (x) S 1 1 1 0 -1 0 0 0 0 0 ten 3 0", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := parseStatCPU(tc.stat)
			if got != tc.want || ok != tc.ok {
				t.Errorf("parseStatCPU = %v, %v; want %v, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

// TestPerMsgUs checks CPU time per message, and that an unknown time or no
// messages has no figure rather than a wrong one.
func TestPerMsgUs(t *testing.T) {
	if got := perMsgUs(1.5, 100_000); math.Abs(got-15) > 1e-9 {
		t.Errorf("1.5 s over 100,000 msgs: %v µs/msg, want 15", got)
	}
	for _, tc := range []struct {
		s float64
		n int
	}{{-1, 100}, {1, 0}} {
		if got := perMsgUs(tc.s, tc.n); !math.IsNaN(got) {
			t.Errorf("perMsgUs(%v, %d) = %v, want NaN", tc.s, tc.n, got)
		}
	}
}

// TestHTTPAddr checks that the address of natsdelay's HTTP listener is
// read from its ready line only.
func TestHTTPAddr(t *testing.T) {
	for _, tc := range []struct {
		line string
		want string
		ok   bool
	}{
		{`time=2026-01-01T00:00:00Z level=INFO msg="natsdelay ready" nats_url=nats://127.0.0.1:4222 engine=pebble http=127.0.0.1:40123`, "127.0.0.1:40123", true},
		{`time=2026-01-01T00:00:00Z level=INFO msg="natsdelay ready" engine=pebble http=off`, "", false},
		{`time=2026-01-01T00:00:00Z level=INFO msg="natsdelay starting" http=127.0.0.1:1`, "", false},
	} {
		got, ok := httpAddr(tc.line)
		if got != tc.want || ok != tc.ok {
			t.Errorf("httpAddr(%q) = %q, %v; want %q, %v", tc.line, got, ok, tc.want, tc.ok)
		}
	}
	// The line may arrive in pieces.
	r := &readyLine{found: make(chan string, 1)}
	for _, part := range []string{"level=INFO msg=\"natsdelay starting\"\nlevel=INFO msg=\"natsdelay re", "ady\" http=127.0.0.1:9", "\nlater\n"} {
		if _, err := r.Write([]byte(part)); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case got := <-r.found:
		if got != "127.0.0.1:9" {
			t.Errorf("found %q, want 127.0.0.1:9", got)
		}
	default:
		t.Error("ready line not found")
	}
}

// TestMetric checks that an unlabelled sample is read from a Prometheus
// text exposition, and that a labelled one or a prefix does not match.
func TestMetric(t *testing.T) {
	exp := strings.Join([]string{
		"# HELP go_memstats_heap_alloc_bytes Number of heap bytes allocated and currently in use.",
		"# TYPE go_memstats_heap_alloc_bytes gauge",
		"go_memstats_heap_alloc_bytes 3.418552e+06",
		"go_memstats_heap_alloc_bytes_total 9",
		`natsdelay_messages{state="x"} 4`,
		"natsdelay_dispatch_subjects 0",
	}, "\n")
	for _, tc := range []struct {
		name string
		want float64
		ok   bool
	}{
		{"go_memstats_heap_alloc_bytes", 3_418_552, true},
		{"natsdelay_dispatch_subjects", 0, true},
		{"natsdelay_messages", 0, false},
		{"absent", 0, false},
	} {
		if got, ok := metric([]byte(exp), tc.name); got != tc.want || ok != tc.ok {
			t.Errorf("metric(%s) = %v, %v; want %v, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}
