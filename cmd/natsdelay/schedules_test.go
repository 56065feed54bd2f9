package main

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/natsdelay/natsdelay/bridge/wire"
)

// TestAdmin_SchedulesAndGet checks natsdelay schedules, get of a schedule
// by subject and id, and info's count, through the API only.
func TestAdmin_SchedulesAndGet(t *testing.T) {
	t.Parallel()
	url := serveInProcess(t, t.TempDir()).URL()
	at := []string{"--nats", url}
	schedule(t, url, "cli.rec", "x", "--id", "nightly", "--cron", "30 2 * * *", "--tz", "America/New_York", "--until", "2030-01-01T00:00:00Z")
	schedule(t, url, "cli.rec", "y", "--id", "beat", "--every", "90s", "--limit", "2", "--catch-up", "all")
	anon := schedule(t, url, "cli.other", "z", "-H", "Delay-Every:1h")
	if code, out, errOut := runCmd(t, "pub", "cli.bad", "x", "--every", "10ms", "--nats", url); code != 1 || !strings.Contains(out+errOut, "at least 100ms") {
		t.Fatalf("pub --every 10ms: exit %d, %q %q; want 1 and the 400 that says at least 100ms", code, out, errOut)
	}
	if code, out, errOut := runCmd(t, "pub", "cli.bad", "x", "--every", "1h", "--cron", "@daily", "--nats", url); code == 0 {
		t.Fatalf("pub --every --cron: exit 0, %q %q", out, errOut)
	}

	out := mustRun(t, append([]string{"schedules"}, at...)...)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 5 || !strings.HasPrefix(lines[0], "SUBJECT ") || lines[4] != "3 schedules" {
		t.Fatalf("schedules printed\n%s\nwant a header, 3 rows and a count", out)
	}
	for i, re := range []string{`^cli\.other\s+` + anon + `\s+@every 1h0m0s\s+UTC\s`, `^cli\.rec\s+beat\s+@every 1m30s\s+UTC\s`, `^cli\.rec\s+nightly\s+30 2 \* \* \*\s+America/New_York\s`} {
		if !regexp.MustCompile(re).MatchString(lines[i+1]) {
			t.Fatalf("schedules row %d %q, want it to match %s", i+1, lines[i+1], re)
		}
	}
	out = mustRun(t, append([]string{"schedules", "cli.rec", "--limit", "1"}, at...)...)
	if !strings.Contains(out, "beat") || strings.Contains(out, "nightly") || !strings.Contains(out, "--after 'cli.rec beat'") {
		t.Fatalf("schedules --limit 1 printed\n%s\nwant one row and how to get the next page", out)
	}
	var all wire.SchedulesReply
	if err := json.Unmarshal([]byte(mustRun(t, append([]string{"schedules", "--limit", "1", "--all", "--json"}, at...)...)), &all); err != nil {
		t.Fatal(err)
	}
	if len(all.Schedules) != 3 || all.Next != "" {
		t.Fatalf("schedules --all --json: %+v", all)
	}

	out = mustRun(t, append([]string{"get", "--subject", "cli.rec", "--id", "nightly"}, at...)...)
	for _, re := range []string{`(?m)^spec\s+30 2 \* \* \*$`, `(?m)^zone\s+America/New_York$`, `(?m)^fired\s+0$`, `(?m)^catch-up\s+one$`} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Fatalf("get printed\n%s\nwant a line matching %s", out, re)
		}
	}
	if n := len(regexp.MustCompile(`(?m)^next\s+\d{4}-`).FindAllString(out, -1)); n != 5 {
		t.Fatalf("get printed %d next times, want 5:\n%s", n, out)
	}
	out = mustRun(t, append([]string{"get", "--subject", "cli.rec", "--id", "beat"}, at...)...)
	if n := len(regexp.MustCompile(`(?m)^next\s+\d{4}-`).FindAllString(out, -1)); n != 2 {
		t.Fatalf("get of a schedule limited to 2 printed %d next times:\n%s", n, out)
	}
	out = mustRun(t, append([]string{"info"}, at...)...)
	if !regexp.MustCompile(`(?m)^schedules\s+3$`).MatchString(out) {
		t.Fatalf("info printed\n%s\nwant schedules 3", out)
	}
}

// TestSchedules_Table checks the table of natsdelay schedules: NEXT in
// the schedule's own zone beside UTC, and what ends the schedule, LIMIT,
// UNTIL and the occurrences REMAINING under the limit.
func TestSchedules_Table(t *testing.T) {
	var b strings.Builder
	err := writeSchedules(&b, []wire.MessageInfo{
		{Subject: "reports.daily", Tag: "t1", Schedule: &wire.ScheduleInfo{Name: "nightly", Spec: "30 2 * * *", Zone: "America/New_York",
			Until: "2030-01-01T00:00:00.000Z", Fired: 3, Next: []string{"2026-12-05T07:30:00.000Z"}}},
		{Subject: "beat", Tag: "t2", Schedule: &wire.ScheduleInfo{Name: "b", Spec: "@every 1m30s", Zone: "UTC", Limit: 5, Fired: 2, Next: []string{"2026-12-05T07:31:30.000Z"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	for i, re := range []string{
		`^SUBJECT\s+NAME\s+SPEC\s+ZONE\s+NEXT\s+NEXT \(UTC\)\s+FIRED\s+LIMIT\s+UNTIL\s+REMAINING\s+TAG$`,
		`^reports\.daily\s+nightly\s+30 2 \* \* \*\s+America/New_York\s+2026-12-05 02:30:00 EST\s+2026-12-05T07:30:00\.000Z\s+3\s+-\s+2030-01-01T00:00:00\.000Z\s+-\s+t1$`,
		`^beat\s+b\s+@every 1m30s\s+UTC\s+2026-12-05 07:31:30 UTC\s+2026-12-05T07:31:30\.000Z\s+2\s+5\s+-\s+3\s+t2$`,
	} {
		if i >= len(lines) || !regexp.MustCompile(re).MatchString(lines[i]) {
			t.Fatalf("schedules printed\n%s\nwant line %d to match %s", b.String(), i, re)
		}
	}
}

// TestCounted checks the counts the client commands print.
func TestCounted(t *testing.T) {
	for n, want := range map[int]string{0: "0 schedules", 1: "1 schedule", 2: "2 schedules"} {
		if got := counted(n, "schedule"); got != want {
			t.Errorf("counted(%d) = %q, want %q", n, got, want)
		}
	}
}
