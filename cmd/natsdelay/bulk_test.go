package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/natsdelay/natsdelay/bridge/wire"
)

// runIn runs natsdelay with stdin and args to the end.
func runIn(t testing.TB, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	p := startIn(t, stdin, args...)
	code = p.wait(t, 30*time.Second)
	return code, p.stdout.String(), p.stderr.String()
}

// TestCLI_Cancel_Filter_DryRunConfirmYes checks cancel --filter against a
// running serve: --dry-run counts and changes nothing, a count above
// --confirm-above asks and a "no" changes nothing (exit 1), --yes cancels
// exactly the messages the dry run counted, and the others stay pending.
func TestCLI_Cancel_Filter_DryRunConfirmYes(t *testing.T) {
	t.Parallel()
	url := serveInProcess(t, t.TempDir()).URL()
	for i := range 12 {
		schedule(t, url, fmt.Sprintf("cli.orders.%d", i%3), "x", "--delay", "1h")
	}
	keep := schedule(t, url, "cli.orders.0", "late", "--at", "2027-06-01T00:00:00Z")
	schedule(t, url, "cli.other", "x", "--delay", "1h")
	filter := []string{"cancel", "--nats", url, "--filter", "cli.orders.>", "--before", "2027-01-01"}

	out := mustRun(t, append(filter, "--dry-run")...)
	if !strings.Contains(out, "would have canceled 12 messages") {
		t.Fatalf("dry run printed %q", out)
	}
	code, out, _ := runIn(t, "n\n", append(filter, "--confirm-above", "5")...)
	if code != 1 || !strings.Contains(out, "cancel 12 messages? [y/N]") {
		t.Fatalf("answered no: exit %d, %q", code, out)
	}
	out = mustRun(t, append(filter, "--yes", "--limit", "5")...)
	if !strings.Contains(out, "canceled 12 messages") {
		t.Fatalf("cancel --yes printed %q", out)
	}
	var info wire.InfoReply
	if err := json.Unmarshal([]byte(mustRun(t, "info", "--nats", url, "--json")), &info); err != nil || info.Counts.Pending != 2 {
		t.Fatalf("after the cancel: %+v, %v; want the 2 others pending", info.Counts, err)
	}
	mustRun(t, "get", keep, "--nats", url)
	code, _, errOut := runCmd(t, "cancel", "--nats", url, "--filter", "cli.>", "--subject", "a", "--id", "b")
	if code != 2 || !strings.Contains(errOut, "one of them") {
		t.Fatalf("cancel with --filter and --subject: exit %d, %q", code, errOut)
	}
}

// TestCLI_RescheduleFireDead checks reschedule (--shift, --at), fire and
// dead ls|replay|rm against a running serve: the moved message is at its
// new time, a fired one is delivered, a dead letter is listed with its
// reason, replayed once, and the rest deleted.
func TestCLI_RescheduleFireDead(t *testing.T) {
	t.Parallel()
	url := serveInProcess(t, t.TempDir(), "--ack-wait", "200ms").URL()
	tag := schedule(t, url, "cli.move", "x", "--delay", "1h")
	out := mustRun(t, "reschedule", tag, "--nats", url, "--shift", "2h")
	fields := strings.Fields(out)
	if len(fields) != 5 || fields[1] != "cli.move" {
		t.Fatalf("reschedule printed %q", out)
	}
	at, err := time.Parse(time.RFC3339, fields[4])
	if err != nil || time.Until(at) < 2*time.Hour+50*time.Minute {
		t.Fatalf("rescheduled to %q (%v), want 3h from now", fields[4], err)
	}
	moved := strings.Fields(mustRun(t, "reschedule", fields[0], "--nats", url, "--at", "2030-01-01"))
	if len(moved) != 5 || moved[4] != "2030-01-01T00:00:00.000Z" {
		t.Fatalf("reschedule --at printed %q", moved)
	}

	sub := start(t, "sub", "cli.>", "--nats", url, "--count", "1")
	sub.waitLine(t, `msg=subscribed`, 30*time.Second)
	fired := strings.Fields(mustRun(t, "fire", moved[0], "--nats", url))[0]
	if code := sub.wait(t, 30*time.Second); code != 0 || !strings.Contains(sub.stdout.String(), fired) {
		t.Fatalf("sub after fire: exit %d, %q; want the fired %s", code, sub.stdout.String(), fired)
	}

	nack := start(t, "sub", "cli.pay.>", "--nats", url, "--no-ack", "--count", "2")
	nack.waitLine(t, `msg=subscribed`, 30*time.Second)
	schedule(t, url, "cli.pay.a", "1", "--max-deliver", "1")
	schedule(t, url, "cli.pay.b", "2", "--max-deliver", "1")
	nack.wait(t, 30*time.Second)
	// The two die one ack wait after their delivery.
	var list string
	for deadline := time.Now().Add(10 * time.Second); ; {
		list = mustRun(t, "dead", "ls", "--nats", url)
		if strings.Count(list, "max-deliver") == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("dead ls printed %q, want two dead letters", list)
		}
		time.Sleep(50 * time.Millisecond)
	}
	deadTag := strings.Fields(strings.Split(list, "\n")[1])[0]
	out = mustRun(t, "dead", "replay", deadTag, "--nats", url, "--to", "cli.replayed")
	if !strings.Contains(out, "replayed 1 message\n") {
		t.Fatalf("dead replay printed %q", out)
	}
	if out := mustRun(t, "dead", "replay", deadTag, "--nats", url); !strings.Contains(out, "replayed 0 messages") {
		t.Fatalf("a second dead replay printed %q, want none replayed", out)
	}
	if out := mustRun(t, "dead", "rm", "--nats", url, "--filter", "cli.pay.>", "--yes"); !strings.Contains(out, "deleted 1 message\n") {
		t.Fatalf("dead rm printed %q", out)
	}
	if list := mustRun(t, "dead", "ls", "--nats", url); strings.Contains(list, "cli.pay") {
		t.Fatalf("dead ls after rm printed %q", list)
	}
}
