package bridge

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/dispatch/recur"
	"github.com/natsdelay/natsdelay/keys"
)

// jsTake reads a publish to the schedule subject sched.x with the headers
// given as name, value pairs, as the service takes it in at now.
func jsTake(t *testing.T, now time.Time, hdr ...string) *delaystore.StoredMessage {
	t.Helper()
	h := nats.Header{}
	for i := 0; i < len(hdr); i += 2 {
		h.Set(hdr[i], hdr[i+1])
	}
	r, err := parseJSRequest("sched.x", h, []string{"delay", "$DELAY.JS"})
	if err != nil {
		t.Fatal(err)
	}
	msg, err := parseSchedule(r.target, r.h, nil, now, scheduleLimits{})
	if err != nil {
		t.Fatal(err)
	}
	msg.Recurrence.JsSchedule, msg.Recurrence.JsScheduler = r.pattern, r.subject
	return msg
}

// planned is the first n planned times of msg's schedule.
func planned(t *testing.T, msg *delaystore.StoredMessage, n int) []string {
	t.Helper()
	p, err := recur.Of(msg.Recurrence)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	loc, _ := time.LoadLocation(msg.Recurrence.Zone)
	for _, at := range p.Preview(time.Unix(0, msg.Recurrence.OccurrenceNs), 1, 0, n) {
		out = append(out, at.In(loc).Format(time.RFC3339))
	}
	return out
}

// Across daylight saving, a JetStream cron schedule is planned by the
// service's rule of section 6, each wall-clock time once: where the
// clocks jump forward over 02:30 it fires at the first instant after the
// gap, and where they go back over 01:30 it fires at the first 01:30
// only. nats-server differs on purpose here (docs/protocol.md): it skips
// the day of the gap and fires at both 01:30s of the fold. The server
// reads its own clock, so this is held at the planner, with a fixed now.
func TestJSSchedule_CronAcrossDaylightSaving(t *testing.T) {
	spring := jsTake(t, time.Date(2026, 3, 28, 12, 0, 0, 0, time.UTC),
		wire.HeaderJSSchedule, "0 30 2 * * *", wire.HeaderJSScheduleTimeZone, "Europe/Berlin", wire.HeaderJSScheduleTarget, "out.x")
	want := []string{"2026-03-29T03:00:00+02:00", "2026-03-30T02:30:00+02:00"}
	if got := planned(t, spring, 2); !slices.Equal(got, want) {
		t.Errorf("spring forward in Berlin: %q, want %q", got, want)
	}
	fall := jsTake(t, time.Date(2026, 10, 31, 12, 0, 0, 0, time.UTC),
		wire.HeaderJSSchedule, "0 30 1 * * *", wire.HeaderJSScheduleTimeZone, "America/New_York", wire.HeaderJSScheduleTarget, "out.x")
	want = []string{"2026-11-01T01:30:00-04:00", "2026-11-02T01:30:00-05:00"}
	if got := planned(t, fall, 2); !slices.Equal(got, want) {
		t.Errorf("fall back in New York: %q, want %q", got, want)
	}
	// The firing at the first 01:30 names the next in its zone's new
	// offset, as nats-server formats Nats-Schedule-Next.
	r := fall.Recurrence
	r.Planned, r.NextNs = true, time.Date(2026, 11, 2, 6, 30, 0, 0, time.UTC).UnixNano()
	if got := jsScheduleNext(r); got != "2026-11-02T01:30:00-05:00" {
		t.Errorf("Nats-Schedule-Next %q, want 2026-11-02T01:30:00-05:00", got)
	}
}

// Each form of Nats-Schedule becomes the schedule of section 6 that
// fires when the server's would: @at once at its time, @every from now,
// a shortcut as its 6 fields; the catch-up is one, and the schedule is
// named by its schedule subject.
func TestParseJSRequest_Forms(t *testing.T) {
	now := time.Date(2026, 12, 5, 10, 0, 0, 500e6, time.UTC)
	at := jsTake(t, now, wire.HeaderJSSchedule, "@at 2026-12-05T10:00:30Z", wire.HeaderJSScheduleTarget, "out.x")
	if r := at.Recurrence; r.Limit != 1 || time.Unix(0, r.OccurrenceNs).UTC() != time.Date(2026, 12, 5, 10, 0, 30, 0, time.UTC) || r.Id != "sched.x" || r.CatchUp != recur.One {
		t.Errorf("@at: %v", r)
	}
	if got := jsScheduleNext(&delaystore.Recurrence{Planned: true}); got != wire.JSScheduleNextPurge {
		t.Errorf("the last firing's Nats-Schedule-Next %q, want purge", got)
	}
	every := jsTake(t, now, wire.HeaderJSSchedule, "@every 90s", wire.HeaderJSScheduleTarget, "out.x")
	if r := every.Recurrence; r.EveryNs != int64(90*time.Second) || r.OccurrenceNs != now.Add(90*time.Second).UnixNano() {
		t.Errorf("@every: %v", r)
	}
	hourly := jsTake(t, now, wire.HeaderJSSchedule, "@hourly", wire.HeaderJSScheduleTarget, "out.x", "App", "v")
	if r := hourly.Recurrence; r.Cron != "0 0 * * * *" || scheduleSpec(r) != "@hourly" || len(hourly.Headers) != 1 || hourly.Headers[0].Name != "App" {
		t.Errorf("@hourly: %v, headers %v", r, hourly.Headers)
	}
	// The removal forms.
	for name, h := range map[string]nats.Header{
		"no Nats-Schedule": {"App": {"v"}},
		"purge":            {wire.HeaderJSScheduleNext: {"purge"}, wire.HeaderJSScheduler: {"sched.y"}},
	} {
		r, err := parseJSRequest("sched.x", h, nil)
		if err != nil || !r.remove {
			t.Errorf("%s: %+v, %v: want a removal", name, r, err)
		}
	}
	long := nats.Header{wire.HeaderJSSchedule: {"@every 1s"}, wire.HeaderJSScheduleTarget: {"out.x"}}
	if _, err := parseJSRequest("sched."+strings.Repeat("x", 251), long, nil); !errors.Is(err, wire.ErrBadRequest) {
		t.Errorf("a schedule subject of 257 bytes: %v, want a bad request", err)
	}
	if _, err := parseJSRequest("sched."+strings.Repeat("x", 250), long, nil); err != nil {
		t.Errorf("a schedule subject of 256 bytes: %v", err)
	}
	// The service's own headers the schedule sets are refused; others
	// pass.
	h := nats.Header{wire.HeaderJSSchedule: {"@every 1s"}, wire.HeaderJSScheduleTarget: {"out.x"}, wire.HeaderID: {"other"}}
	if _, err := parseJSRequest("sched.x", h, nil); !errors.Is(err, wire.ErrBadRequest) {
		t.Errorf("Delay-Id on a JetStream schedule: %v, want a bad request", err)
	}
	h = nats.Header{wire.HeaderJSSchedule: {"@every 1s"}, wire.HeaderJSScheduleTarget: {"out.x"}, wire.HeaderMaxDeliver: {"3"}}
	if r, err := parseJSRequest("sched.x", h, nil); err != nil || r.h.Get(wire.HeaderMaxDeliver) != "3" {
		t.Errorf("Delay-Max-Deliver on a JetStream schedule: %v", err)
	}
}

// A JetStream schedule's firings carry Nats-Scheduler and
// Nats-Schedule-Next; an extra firing of TRIGGER carries neither, as it
// names no next firing; a firing into a stream neither, as a stream
// refuses them from a client.
func TestJSSchedule_FiringHeaders(t *testing.T) {
	now := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	m := jsTake(t, now, wire.HeaderJSSchedule, "@every 1m", wire.HeaderJSScheduleTarget, "out.x")
	m.Recurrence.Planned, m.Recurrence.NextNs = true, now.Add(2*time.Minute).UnixNano()
	h := deliveryHeader(keys.Key{}, m, 1, 0)
	if h.Get(wire.HeaderJSScheduler) != "sched.x" || h.Get(wire.HeaderJSScheduleNext) != "2026-12-05T10:02:00Z" {
		t.Errorf("a firing: %v", h)
	}
	if n := headerLen(h); n != deliveryHeaderLen(m, 1, false) {
		t.Errorf("header length %d, computed %d", n, deliveryHeaderLen(m, 1, false))
	}
	for name, x := range map[string]*delaystore.StoredMessage{"trigger": triggered(m, now.UnixNano()), "stream": streamed(m)} {
		h := deliveryHeader(keys.Key{}, x, 1, 0)
		if _, ok := h[wire.HeaderJSScheduler]; ok {
			t.Errorf("%s: %v", name, h)
		}
		if _, ok := h[wire.HeaderJSScheduleNext]; ok {
			t.Errorf("%s: %v", name, h)
		}
	}
}

func streamed(m *delaystore.StoredMessage) *delaystore.StoredMessage {
	x := proto.Clone(m).(*delaystore.StoredMessage)
	x.Recurrence.JsStream = true
	return x
}
