package main

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestCLI_Reschedule_Filter_OpResumes checks that reschedule --filter
// prints its operation id as it starts, that the same command run again
// with --op (as after a step whose reply never came) moves nothing a
// second time, and that a bad --op is refused before anything is sent.
func TestCLI_Reschedule_Filter_OpResumes(t *testing.T) {
	t.Parallel()
	url := serveInProcess(t, t.TempDir()).URL()
	at := time.Now().Add(time.Hour).Truncate(time.Second).UTC()
	for i := range 6 {
		schedule(t, url, fmt.Sprintf("cli.op.%d", i%2), "x", "--at", at.Format(time.RFC3339))
	}
	args := []string{"reschedule", "--nats", url, "--filter", "cli.op.>", "--shift", "10m", "--yes", "--limit", "4"}
	code, out, errOut := runIn(t, "", args...)
	if code != 0 || !strings.Contains(out, "rescheduled 6 messages") {
		t.Fatalf("reschedule: exit %d, %q, %q", code, out, errOut)
	}
	op, ok := strings.CutPrefix(strings.TrimSpace(errOut), "operation ")
	if !ok || op == "" || strings.ContainsAny(op, " \n") {
		t.Fatalf("reschedule printed %q on stderr, want its operation id", errOut)
	}
	if out := mustRun(t, append(args, "--op", op)...); !strings.Contains(out, "rescheduled 0 messages") {
		t.Fatalf("the same operation again printed %q, want none moved twice", out)
	}
	from := at.Add(10 * time.Minute)
	dry := mustRun(t, "cancel", "--nats", url, "--filter", "cli.op.>", "--dry-run",
		"--from", from.Format(time.RFC3339), "--before", from.Add(time.Second).Format(time.RFC3339))
	if !strings.Contains(dry, "would have canceled 6 messages") {
		t.Fatalf("due 10 minutes later: %q, want all 6", dry)
	}
	code, _, errOut = runCmd(t, append(args, "--op", "not an id")...)
	if code != 2 || !strings.Contains(errOut, `--op "not an id": want 1 to 64 letters`) {
		t.Fatalf("a bad --op: exit %d, %q", code, errOut)
	}
}
