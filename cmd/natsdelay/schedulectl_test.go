package main

import (
	"regexp"
	"strings"
	"testing"
)

// TestAdmin_SchedulesPauseResumeTrigger checks natsdelay schedules pause,
// resume, trigger and edit against a running serve: the schedules table
// shows a paused schedule as paused, resume puts it back on its plan,
// trigger prints the extra occurrence's tag, edit the new spec, and naming
// no schedule, one that does not exist, or a bad spec is an error.
func TestAdmin_SchedulesPauseResumeTrigger(t *testing.T) {
	t.Parallel()
	url := serveInProcess(t, t.TempDir()).URL()
	at := []string{"--nats", url}
	schedule(t, url, "cli.ctl", "x", "--id", "nightly", "--cron", "30 2 * * *")

	out := mustRun(t, append([]string{"schedules", "pause", "--subject", "cli.ctl", "--id", "nightly"}, at...)...)
	if !regexp.MustCompile(`^paused cli\.ctl name=nightly next=- tag=\S{48}\n$`).MatchString(out) {
		t.Fatalf("schedules pause printed %q", out)
	}
	out = mustRun(t, append([]string{"schedules", "cli.ctl"}, at...)...)
	if !regexp.MustCompile(`(?m)^cli\.ctl\s+nightly\s+30 2 \* \* \*\s+UTC\s+paused\s+paused\s`).MatchString(out) {
		t.Fatalf("schedules printed\n%s\nwant the schedule shown paused", out)
	}
	out = mustRun(t, append([]string{"schedules", "resume", "--subject", "cli.ctl", "--id", "nightly"}, at...)...)
	if !regexp.MustCompile(`^running cli\.ctl name=nightly next=\d{4}-\d\d-\d\dT02:30:00\.000Z tag=\S{48}\n$`).MatchString(out) {
		t.Fatalf("schedules resume printed %q", out)
	}
	out = mustRun(t, append([]string{"schedules", "trigger", "--subject", "cli.ctl", "--id", "nightly"}, at...)...)
	if !regexp.MustCompile(`^triggered cli\.ctl name=nightly tag=\S{48} fire_at=\d{4}-`).MatchString(out) {
		t.Fatalf("schedules trigger printed %q", out)
	}
	out = mustRun(t, append([]string{"schedules", "edit", "--subject", "cli.ctl", "--id", "nightly", "--every", "2h", "--payload", "", "-H", "X-V:2"}, at...)...)
	if !regexp.MustCompile(`^edited cli\.ctl name=nightly spec="@every 2h0m0s" next=\d{4}-\S+ tag=\S{48}\n$`).MatchString(out) {
		t.Fatalf("schedules edit printed %q", out)
	}
	if code, out, errOut := runCmd(t, append([]string{"schedules", "edit", "--subject", "cli.ctl", "--id", "nightly", "--cron", "* *"}, at...)...); code != 1 || !strings.Contains(out+errOut, "400") {
		t.Fatalf("schedules edit --cron '* *': exit %d, %q %q; want 1 and the 400", code, out, errOut)
	}
	if code, out, errOut := runCmd(t, append([]string{"schedules", "pause"}, at...)...); code == 0 || !strings.Contains(errOut, "which schedule?") {
		t.Fatalf("schedules pause with no schedule: exit %d, %q %q", code, out, errOut)
	}
	if code, out, errOut := runCmd(t, append([]string{"schedules", "pause", "--subject", "cli.ctl", "--id", "none"}, at...)...); code != 1 || !strings.Contains(out+errOut, "404") {
		t.Fatalf("schedules pause of no schedule: exit %d, %q %q; want 1 and the 404", code, out, errOut)
	}
}

// TestAdmin_SchedulesSkipExcludeJitterNext checks natsdelay pub --exclude
// and --jitter, schedules skip --count, schedules edit --exclude and
// --jitter, and --next on get and schedules against a running serve: skip
// prints the skips waiting and the next time after them, get and
// schedules --next print that many next times without the excluded dates,
// and a bad count or --next is refused before anything is sent.
func TestAdmin_SchedulesSkipExcludeJitterNext(t *testing.T) {
	t.Parallel()
	url := serveInProcess(t, t.TempDir()).URL()
	at := []string{"--nats", url}
	schedule(t, url, "cli.skip", "x", "--id", "daily", "--cron", "0 9 * * *", "--tz", "Europe/Berlin",
		"--at", "2027-12-20T08:00:00Z", "--exclude", "2027-12-25", "--jitter", "1m")

	out := mustRun(t, append([]string{"schedules", "skip", "--subject", "cli.skip", "--id", "daily", "--count", "2"}, at...)...)
	if !regexp.MustCompile(`^skipping 2 cli\.skip name=daily next=2027-12-22T08:0\d:\d\d\.\d{3}Z tag=\S{48}\n$`).MatchString(out) {
		t.Fatalf("schedules skip printed %q", out)
	}
	out = mustRun(t, append([]string{"get", "--subject", "cli.skip", "--id", "daily", "--next", "8"}, at...)...)
	if n := strings.Count(out, "\nnext "); n != 8 || strings.Contains(out, "2027-12-25T") || !strings.Contains(out, "to skip") ||
		!regexp.MustCompile(`(?m)^exclude\s+2027-12-25$`).MatchString(out) || !regexp.MustCompile(`(?m)^jitter\s+1m0s$`).MatchString(out) {
		t.Fatalf("get --next 8 printed\n%s\nwant 8 next times without 2027-12-25, the skips, exclusions and jitter", out)
	}
	out = mustRun(t, append([]string{"schedules", "edit", "--subject", "cli.skip", "--id", "daily", "--exclude", "2027-12-22..2027-12-23", "--jitter", "none"}, at...)...)
	if !regexp.MustCompile(`^edited cli\.skip name=daily spec="0 9 \* \* \*" next=2027-12-24T08:00:00\.000Z tag=\S{48}\n$`).MatchString(out) {
		t.Fatalf("schedules edit --exclude --jitter none printed %q", out)
	}
	out = mustRun(t, append([]string{"schedules", "cli.skip", "--next", "3"}, at...)...)
	if !strings.Contains(out, "cli.skip daily: next 3\n  2027-12-24 09:00:00 CET  2027-12-24T08:00:00.000Z\n  2027-12-25 09:00:00 CET") {
		t.Fatalf("schedules --next 3 printed\n%s", out)
	}
	for _, bad := range [][]string{
		{"schedules", "skip", "--subject", "cli.skip", "--id", "daily", "--count", "0"},
		{"schedules", "skip", "--subject", "cli.skip", "--id", "daily", "--count", "1001"},
		{"get", "--subject", "cli.skip", "--id", "daily", "--next", "101"},
		{"schedules", "--next=-1"},
	} {
		if code, out, errOut := runCmd(t, append(bad, at...)...); code != 2 || !strings.Contains(errOut, "want 1 to") {
			t.Fatalf("%v: exit %d, %q %q; want a usage error", bad, code, out, errOut)
		}
	}
	if code, out, errOut := runCmd(t, append([]string{"pub", "cli.skip", "x", "--every", "1m", "--jitter", "1m"}, at...)...); code != 1 || !strings.Contains(out+errOut, "want less than that") {
		t.Fatalf("pub --jitter as long as the interval: exit %d, %q %q; want the 400", code, out, errOut)
	}
}
