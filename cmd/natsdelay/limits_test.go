package main

import (
	"strings"
	"testing"
)

// TestLimits_Commands drives the flow-control commands against a running
// serve: limits set prints the limit, ls lists the patterns most specific
// first, pause and resume flip the pattern, get prints one, rm deletes it
// and a second rm is a 404 (exit code 1).
func TestLimits_Commands(t *testing.T) {
	t.Parallel()
	_, url := serve(t, t.TempDir())
	out := mustRun(t, "limits", "set", "orders.>", "--nats", url, "--max-in-flight", "100", "--rate", "3000/m", "--burst", "100")
	for _, want := range []string{"PATTERN", "orders.>", "100", "50", "false"} {
		if !strings.Contains(out, want) {
			t.Fatalf("limits set printed %q, want %q in it", out, want)
		}
	}
	mustRun(t, "limits", "set", "orders.eu.paid", "--nats", url, "--max-in-flight", "5")
	out = mustRun(t, "limits", "ls", "--nats", url)
	if i, j := strings.Index(out, "orders.eu.paid"), strings.Index(out, "orders.>"); i < 0 || j < 0 || i > j {
		t.Fatalf("limits ls printed %q: want orders.eu.paid before orders.>", out)
	}
	if out := mustRun(t, "pause", "orders.>", "--nats", url); !strings.Contains(out, "true") {
		t.Fatalf("pause printed %q, want paused true", out)
	}
	if out := mustRun(t, "limits", "get", "orders.>", "--nats", url, "--json"); !strings.Contains(out, `"paused":true`) {
		t.Fatalf("limits get --json printed %q, want paused", out)
	}
	if out := mustRun(t, "resume", "orders.>", "--nats", url, "--json"); strings.Contains(out, `"paused":true`) {
		t.Fatalf("resume printed %q, want not paused", out)
	}
	mustRun(t, "limits", "rm", "orders.>", "--nats", url)
	if code, _, errOut := runCmd(t, "limits", "rm", "orders.>", "--nats", url); code != 1 || !strings.Contains(errOut, "404") {
		t.Fatalf("a second limits rm: exit %d, %q; want 1 and a 404", code, errOut)
	}
}

// Bad flow-control input is a usage error that names the flag, before
// anything is sent.
func TestLimits_BadInput_ExitsTwo(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"limits", "set", "orders.>", "--rate", "50/d"}, `--rate "50/d": unit "d"`},
		{[]string{"limits", "set", "orders.>", "--rate=-3/s"}, `--rate "-3/s"`},
		{[]string{"limits", "set", "orders.>", "--max-in-flight=-1"}, "--max-in-flight -1"},
		{[]string{"limits", "set", "orders.>", "--burst", "5"}, "--burst 5: only applies with --rate"},
		{[]string{"limits", "set", "orders..x"}, `"orders..x" has an empty token`},
		{[]string{"pause", "a.>.b"}, `"a.>.b"`},
	} {
		code, _, errOut := runCmd(t, c.args...)
		if code != exitUsage || !strings.Contains(errOut, c.want) {
			t.Errorf("natsdelay %s: exit %d, %q; want %d and %q", strings.Join(c.args, " "), code, errOut, exitUsage, c.want)
		}
	}
}
