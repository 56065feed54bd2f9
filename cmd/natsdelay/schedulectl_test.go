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
