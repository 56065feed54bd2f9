package console_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge/wire"
)

// TestConsole_Schedules_PauseResumeTrigger checks, over real HTTP against
// a real service, the schedules page's pause, resume and trigger now: a
// POST without the form's CSRF token changes nothing; pause shows the
// schedule paused with a resume button, and GET through the API agrees;
// resume runs it again; trigger now delivers one extra occurrence.
func TestConsole_Schedules_PauseResumeTrigger(t *testing.T) {
	s := serve(t, "127.0.0.1:0", true, nil)
	tag := s.schedule(t, "ctl.cron", []byte("c"), "Delay-Cron", "0 9 * * *", "Delay-Id", "nine")
	_, page, _ := get(t, s.base+"/ui/schedules", "", "")
	csrf := csrfOf(t, page)
	if !strings.Contains(page, `action="/ui/schedule-pause"`) || !strings.Contains(page, `action="/ui/schedule-trigger"`) {
		t.Fatalf("schedules page without the pause and trigger forms:\n%s", page)
	}
	ref := wire.MessageRef{Subject: "ctl.cron", ID: "nine"}
	// paused reads the schedule through the API, and its tag into tag:
	// a pause and a resume move the occurrence, so its tag changes.
	paused := func() bool {
		t.Helper()
		var mi wire.MessageInfo
		if err := s.api(t, wire.VerbGet, ref, &mi); err != nil || mi.Schedule == nil {
			t.Fatalf("GET ctl.cron nine: %v %+v", err, mi)
		}
		tag = mi.Tag
		return mi.Schedule.Paused
	}

	code, body, _ := post(t, s.base+"/ui/schedule-pause", url.Values{"tag": {tag}, "action": {"pause"}}, "", "")
	mustStatus(t, "pause without a CSRF token", code, http.StatusForbidden, body)
	if paused() {
		t.Fatal("paused by a POST without a CSRF token")
	}
	code, body, resp := post(t, s.base+"/ui/schedule-pause", url.Values{"csrf": {csrf}, "tag": {tag}, "action": {"pause"}}, "", "")
	mustStatus(t, "pause", code, http.StatusSeeOther, body)
	if !strings.Contains(resp.Header.Get("Location"), "done=schedule-paused") || !paused() {
		t.Fatalf("pause redirects to %q, paused %v", resp.Header.Get("Location"), paused())
	}
	_, page, _ = get(t, s.base+"/ui/schedules", "", "")
	if !strings.Contains(page, "<strong>paused</strong>") || !strings.Contains(page, `value="resume"`) || !strings.Contains(page, `name="tag" value="`+tag+`"`) {
		t.Fatalf("schedules page does not show the schedule paused with a resume button:\n%s", page)
	}
	code, body, _ = post(t, s.base+"/ui/schedule-pause", url.Values{"csrf": {csrf}, "tag": {tag}, "action": {"resume"}}, "", "")
	mustStatus(t, "resume", code, http.StatusSeeOther, body)
	if paused() {
		t.Fatal("still paused after resume")
	}

	got := make(chan *nats.Msg, 4)
	sub, err := s.nc.Subscribe("ctl.cron", func(m *nats.Msg) { _ = m.Respond([]byte("+ACK")); got <- m })
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	code, body, resp = post(t, s.base+"/ui/schedule-trigger", url.Values{"csrf": {csrf}, "tag": {tag}}, "", "")
	mustStatus(t, "trigger", code, http.StatusSeeOther, body)
	if !strings.Contains(resp.Header.Get("Location"), "done=schedule-triggered") {
		t.Errorf("trigger redirects to %q", resp.Header.Get("Location"))
	}
	if m := receive(t, got, "the triggered occurrence"); string(m.Data) != "c" || m.Header.Get(wire.HeaderSchedule) != "0 9 * * *" {
		t.Errorf("triggered: got %q with headers %v", m.Data, m.Header)
	}
	code, body, _ = post(t, s.base+"/ui/schedule-trigger", url.Values{"csrf": {csrf}, "tag": {strings.Repeat("0", 48)}}, "", "")
	mustStatus(t, "trigger of no schedule", code, http.StatusNotFound, body)
}

// TestConsole_Schedules_Skip checks, over real HTTP against a real
// service, the schedules page's skip: a POST without the CSRF token
// changes nothing; with it, the schedule has the count to skip (GET
// through the API agrees) and the page shows its next times without
// them; a bad count is refused and changes nothing.
func TestConsole_Schedules_Skip(t *testing.T) {
	s := serve(t, "127.0.0.1:0", true, nil)
	tag := s.schedule(t, "ctl.skip", []byte("c"), "Delay-Cron", "0 9 * * *", "Delay-Id", "nine")
	_, page, _ := get(t, s.base+"/ui/schedules", "", "")
	csrf := csrfOf(t, page)
	if !strings.Contains(page, `action="/ui/schedule-skip"`) {
		t.Fatalf("schedules page without the skip form:\n%s", page)
	}
	ref := wire.MessageRef{Subject: "ctl.skip", ID: "nine"}
	read := func() *wire.ScheduleInfo {
		t.Helper()
		var mi wire.MessageInfo
		if err := s.api(t, wire.VerbGet, ref, &mi); err != nil || mi.Schedule == nil {
			t.Fatalf("GET ctl.skip nine: %v %+v", err, mi)
		}
		return mi.Schedule
	}
	before := read()
	code, body, _ := post(t, s.base+"/ui/schedule-skip", url.Values{"tag": {tag}, "count": {"2"}}, "", "")
	mustStatus(t, "skip without a CSRF token", code, http.StatusForbidden, body)
	if read().Skip != 0 {
		t.Fatal("skips set by a POST without a CSRF token")
	}
	code, body, _ = post(t, s.base+"/ui/schedule-skip", url.Values{"csrf": {csrf}, "tag": {tag}, "count": {"0"}}, "", "")
	if code == http.StatusSeeOther || read().Skip != 0 || !strings.Contains(body, "want 1 to 1000") {
		t.Fatalf("skip of 0: %d, skips %d; want it refused with what is accepted:\n%s", code, read().Skip, body)
	}
	code, body, resp := post(t, s.base+"/ui/schedule-skip", url.Values{"csrf": {csrf}, "tag": {tag}, "count": {"2"}}, "", "")
	mustStatus(t, "skip", code, http.StatusSeeOther, body)
	after := read()
	if !strings.Contains(resp.Header.Get("Location"), "done=schedule-skipped") || after.Skip != 2 || after.Next[0] != before.Next[2] {
		t.Fatalf("skip redirects to %q; schedule %+v, want 2 to skip and next from %s", resp.Header.Get("Location"), after, before.Next[2])
	}
	_, page, _ = get(t, s.base+"/ui/schedules", "", "")
	if !strings.Contains(page, "2 to skip") {
		t.Fatalf("schedules page does not show the skips:\n%s", page)
	}
}

// TestConsole_Schedules_ExcludeAndJitter checks that the schedules page
// shows a schedule's exclusion dates and its jitter beside its spec, so
// its next times, which leave those dates out and carry the jitter, can
// be read.
func TestConsole_Schedules_ExcludeAndJitter(t *testing.T) {
	s := serve(t, "127.0.0.1:0", true, nil)
	s.schedule(t, "ctl.exclude", []byte("c"), "Delay-Cron", "0 9 * * *", "Delay-Id", "nine",
		"Delay-Exclude", "2030-12-25,2031-01-01", "Delay-Jitter", "30s")
	s.schedule(t, "ctl.plain", []byte("c"), "Delay-Cron", "0 9 * * *", "Delay-Id", "plain")
	_, page, _ := get(t, s.base+"/ui/schedules", "", "")
	for _, want := range []string{"not on 2030-12-25,2031-01-01", "up to 30s late (jitter)"} {
		if strings.Count(page, want) != 1 {
			t.Errorf("schedules page shows %q %d times, want once (the plain schedule has neither):\n%s", want, strings.Count(page, want), page)
		}
	}
}
