package main

import (
	"os"
	"strings"
	"testing"

	"natsdelay/bridge/wire"
	"natsdelay/cmd/natsdelay/internal/bench"
)

// TestDocs_Operations_AdminCommands checks section 3 of docs/operations.md
// against the API: every endpoint the service registers as a micro
// service is named, and every admin command has a line.
func TestDocs_Operations_AdminCommands(t *testing.T) {
	b, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, _ := strings.Cut(string(b), "\n## 3. Admin commands\n")
	sec, _, _ = strings.Cut(sec, "\n## 4.")
	for _, verb := range []string{wire.VerbInfo, wire.VerbGet, wire.VerbList, wire.VerbCancel, wire.VerbSubjects, wire.VerbSchedules} {
		if name := strings.ToLower(verb); !strings.Contains(sec, "`"+name+"`") {
			t.Errorf("docs/operations.md section 3 does not name the endpoint `%s`", name)
		}
	}
	for _, cmd := range []string{"info", "subjects", "ls", "get", "cancel", "schedules"} {
		if !strings.Contains(sec, "    natsdelay "+cmd) {
			t.Errorf("docs/operations.md section 3 has no line for natsdelay %s", cmd)
		}
	}
}

// TestDocs_BenchQuick_HowLong checks that --help and docs/performance.md
// say how long bench --quick takes as the bench package does.
func TestDocs_BenchQuick_HowLong(t *testing.T) {
	b, err := os.ReadFile("../../docs/performance.md")
	if err != nil {
		t.Fatal(err)
	}
	if want := "bench --quick         # tiny sizes, " + bench.QuickTakes; !strings.Contains(string(b), want) {
		t.Errorf("docs/performance.md does not say %q", want)
	}
	code, out, _ := runCmd(t, "bench", "--help")
	if code != 0 || !strings.Contains(strings.Join(strings.Fields(out), " "), bench.QuickTakes) {
		t.Errorf("bench --help (exit %d) does not say %q:\n%s", code, bench.QuickTakes, out)
	}
}
