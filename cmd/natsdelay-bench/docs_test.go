package main

import (
	"io"
	"os"
	"strings"
	"testing"

	"github.com/natsdelay/natsdelay/cmd/internal/bench"
)

// TestDocs_BenchQuick_HowLong checks that --help and docs/performance.md
// say how long --quick takes as the bench package does.
func TestDocs_BenchQuick_HowLong(t *testing.T) {
	b, err := os.ReadFile("../../docs/performance.md")
	if err != nil {
		t.Fatal(err)
	}
	if want := "natsdelay-bench --quick   # tiny sizes, " + bench.QuickTakes; !strings.Contains(string(b), want) {
		t.Errorf("docs/performance.md does not say %q", want)
	}
	var out strings.Builder
	code := run([]string{"--help"}, &out, io.Discard)
	if code != 0 || !strings.Contains(strings.Join(strings.Fields(out.String()), " "), bench.QuickTakes) {
		t.Errorf("--help (exit %d) does not say %q:\n%s", code, bench.QuickTakes, out.String())
	}
}
