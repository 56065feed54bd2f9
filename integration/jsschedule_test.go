package integration_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/natsdelay/natsdelay/bridge"
	"github.com/natsdelay/natsdelay/bridge/wire"
)

// The conformance tests of JetStream's schedule headers: the same nats.go
// calls go to a nats-server stream with message schedules (the embedded
// server, v2.15.2) and to natsdelay on its schedule prefix, and what each
// fires is compared.

// jsHarness is streamHarness with a stream that schedules, SCHED, which
// captures sched.> (the schedule subjects) and srv.> (the server's
// targets). natsdelay's targets are out.>, which no stream captures: the
// same schedule fires on srv.x from the server and on out.x from
// natsdelay.
type jsHarness struct {
	*streamHarness
	sched jetstream.Stream
}

func newJSHarness(t *testing.T) *jsHarness {
	t.Helper()
	h := newStreamHarness(t)
	st := h.stream(t, jetstream.StreamConfig{Name: "SCHED", Subjects: []string{"sched.>", "srv.>"},
		AllowMsgSchedules: true, AllowMsgTTL: true, AllowRollup: true})
	return &jsHarness{streamHarness: h, sched: st}
}

// both publishes m to the stream on its subject and to natsdelay on the
// schedule prefix, and returns what each answered.
func (h *jsHarness) both(t *testing.T, m *nats.Msg) (server, natsdelay error) {
	t.Helper()
	ctx := context.Background()
	s := nats.NewMsg(m.Subject)
	s.Data = m.Data
	for k, vs := range m.Header {
		for _, v := range vs {
			if k == wire.HeaderJSScheduleTarget || k == wire.HeaderJSScheduleSource {
				v = "srv" + strings.TrimPrefix(v, "out")
			}
			s.Header.Add(k, v)
		}
	}
	_, server = h.js.PublishMsg(ctx, s)
	d := nats.NewMsg(wire.DefaultJSSchedulePrefix + "." + m.Subject)
	d.Header, d.Data = m.Header, m.Data
	_, natsdelay = h.js.PublishMsg(ctx, d)
	return server, natsdelay
}

// jsMsg is a publish to the schedule subject subj with headers given as
// name, value pairs.
func jsMsg(subj, data string, hdr ...string) *nats.Msg {
	m := nats.NewMsg(subj)
	for i := 0; i < len(hdr); i += 2 {
		m.Header.Set(hdr[i], hdr[i+1])
	}
	m.Data = []byte(data)
	return m
}

// firings reads the next n messages the stream stored on subject, in
// order, waiting for each.
func (h *jsHarness) firings(t *testing.T, subject string, n int) []*jetstream.RawStreamMsg {
	t.Helper()
	var out []*jetstream.RawStreamMsg
	var seq uint64
	checkFor(t, wait, 20*time.Millisecond, func() error {
		for len(out) < n {
			m, err := h.sched.GetMsg(context.Background(), seq+1, jetstream.WithGetMsgSubject(subject))
			if err != nil {
				return fmt.Errorf("%d of %d firings on %s: %v", len(out), n, subject, err)
			}
			seq = m.Sequence
			out = append(out, m)
		}
		return nil
	})
	return out
}

// Every error code of nats-server's schedules comes back from natsdelay
// as the same JetStream API error, for the same publish: a caller's
// APIError check matches either.
func TestJSSchedule_Errors_SameCodesAsTheServer(t *testing.T) {
	t.Parallel()
	h := newJSHarness(t)
	target := wire.HeaderJSScheduleTarget
	cases := []struct {
		name string
		code int
		hdr  []string
	}{
		{"interval under a second", wire.JSErrSchedulePatternInvalid, []string{wire.HeaderJSSchedule, "@every 500ms", target, "out.a"}},
		{"cron that never fires", wire.JSErrSchedulePatternInvalid, []string{wire.HeaderJSSchedule, "0 0 0 31 2 *", target, "out.a"}},
		{"cron field out of range", wire.JSErrSchedulePatternInvalid, []string{wire.HeaderJSSchedule, "0 0 24 * * *", target, "out.a"}},
		{"cron of 5 fields", wire.JSErrSchedulePatternInvalid, []string{wire.HeaderJSSchedule, "*/5 * * * *", target, "out.a"}},
		{"zone on @at", wire.JSErrSchedulePatternInvalid, []string{wire.HeaderJSSchedule, "@at 2030-01-01T00:00:00Z", wire.HeaderJSScheduleTimeZone, "Europe/Berlin", target, "out.a"}},
		{"no target", wire.JSErrScheduleTargetInvalid, []string{wire.HeaderJSSchedule, "@every 1s"}},
		{"wildcard target", wire.JSErrScheduleTargetInvalid, []string{wire.HeaderJSSchedule, "@every 1s", target, "out.*"}},
		{"TTL under a second", wire.JSErrScheduleTTLInvalid, []string{wire.HeaderJSSchedule, "@every 1s", target, "out.a", wire.HeaderJSScheduleTTL, "500ms"}},
		{"rollup all", wire.JSErrScheduleRollupInvalid, []string{wire.HeaderJSSchedule, "@every 1s", target, "out.a", wire.HeaderJSScheduleRollup, "all"}},
		{"source is the target", wire.JSErrScheduleSourceInvalid, []string{wire.HeaderJSSchedule, "@every 1s", target, "out.a", wire.HeaderJSScheduleSource, "out.a"}},
		{"scheduler from a publisher", wire.JSErrScheduleSchedulerInvalid, []string{wire.HeaderJSScheduler, "sched.other"}},
		{"unknown zone", wire.JSErrScheduleTimeZoneInvalid, []string{wire.HeaderJSSchedule, "0 0 9 * * *", wire.HeaderJSScheduleTimeZone, "Mars/Olympus", target, "out.a"}},
		{"empty zone", wire.JSErrScheduleTimeZoneInvalid, []string{wire.HeaderJSSchedule, "0 0 9 * * *", wire.HeaderJSScheduleTimeZone, "", target, "out.a"}},
	}
	for _, c := range cases {
		srvErr, ndErr := h.both(t, jsMsg("sched.err", "x", c.hdr...))
		for who, err := range map[string]error{"nats-server": srvErr, "natsdelay": ndErr} {
			var apiErr *jetstream.APIError
			if !errors.As(err, &apiErr) || apiErr.ErrorCode != jetstream.ErrorCode(c.code) {
				t.Errorf("%s: %s answered %v, want a JetStream API error with err_code %d", c.name, who, err, c.code)
			}
		}
	}
	if n := pending(t, h.nc); n != 0 {
		t.Fatalf("%d pending after refusals, want 0", n)
	}
}

// A one-off @at fires once on both, with the payload and headers as
// published, Nats-Scheduler the schedule subject and Nats-Schedule-Next
// purge; natsdelay's firing goes to core NATS with a reply subject, and
// its planned time is the @at time. Publishing the same Nats-Msg-Id again
// is answered as a duplicate by both.
func TestJSSchedule_At_FiresAsTheServer(t *testing.T) {
	t.Parallel()
	h := newJSHarness(t)
	core := subscribe(t, h.nc, "out.at")
	at := time.Now().Add(1500 * time.Millisecond).Truncate(time.Second).Add(time.Second)
	m := jsMsg("sched.at", "hello", "App", "v1")
	opts := []jetstream.PublishOpt{jetstream.WithScheduleAt(at), jetstream.WithScheduleTarget("out.at"), jetstream.WithMsgID("at-1")}
	ctx := context.Background()
	pa, err := h.js.PublishMsg(ctx, m, jetstream.WithScheduleAt(at), jetstream.WithScheduleTarget("srv.at"), jetstream.WithMsgID("at-1"))
	if err != nil {
		t.Fatal(err)
	}
	d := nats.NewMsg(wire.DefaultJSSchedulePrefix + ".sched.at")
	d.Header, d.Data = nats.Header{"App": {"v1"}}, m.Data
	ndAck, err := h.js.PublishMsg(ctx, d, opts...)
	if err != nil {
		t.Fatalf("natsdelay: %v", err)
	}
	if ndAck.Stream != wire.JSStreamName || ndAck.Sequence == 0 || ndAck.Duplicate || pa.Duplicate {
		t.Fatalf("PubAcks: server %+v, natsdelay %+v", pa, ndAck)
	}
	d2 := nats.NewMsg(d.Subject)
	d2.Header, d2.Data = nats.Header{"App": {"v1"}}, m.Data
	again, err := h.js.PublishMsg(ctx, d2, opts...)
	if err != nil || !again.Duplicate || again.Sequence != ndAck.Sequence {
		t.Fatalf("natsdelay's answer to the same Nats-Msg-Id: %+v, %v; want duplicate of seq %d", again, err, ndAck.Sequence)
	}

	got := next(t, core, "natsdelay's firing")
	ackSync(t, h.nc, got.Msg, "+ACK")
	notEarly(t, got, at)
	srv := h.firings(t, "srv.at", 1)[0]
	if srv.Time.Before(at) {
		t.Fatalf("the server fired at %s, before %s", srv.Time, at)
	}
	sameFiring(t, srv.Header, srv.Data, got.Msg)
	if got.Reply == "" || got.Header.Get(wire.HeaderJSScheduleNext) != wire.JSScheduleNextPurge {
		t.Fatalf("natsdelay's firing: reply %q, %s %q", got.Reply, wire.HeaderJSScheduleNext, got.Header.Get(wire.HeaderJSScheduleNext))
	}
	if occ := parseTime(t, got.Header.Get(wire.HeaderOccurrence)); !occ.Equal(at) {
		t.Fatalf("natsdelay planned it at %s, want %s", occ, at)
	}
	// Once ACKed nothing is left: an @at has no successor.
	h.settled(t)
}

// sameFiring fails t unless natsdelay's firing m carries what the
// server's did: the payload, the publisher's headers, Nats-Scheduler, and
// Nats-Schedule-Next as a purge or a time in the same form.
func sameFiring(t *testing.T, srvHdr nats.Header, srvData []byte, m *nats.Msg) {
	t.Helper()
	if string(m.Data) != string(srvData) {
		t.Errorf("payload %q, the server's %q", m.Data, srvData)
	}
	for k, vs := range srvHdr {
		if k == wire.HeaderJSScheduleNext {
			continue
		}
		if got := m.Header[k]; !slices.Equal(got, vs) {
			t.Errorf("header %s: %q, the server's %q", k, got, vs)
		}
	}
	sn, nn := srvHdr.Get(wire.HeaderJSScheduleNext), m.Header.Get(wire.HeaderJSScheduleNext)
	if (sn == wire.JSScheduleNextPurge) != (nn == wire.JSScheduleNextPurge) {
		t.Errorf("%s %q, the server's %q", wire.HeaderJSScheduleNext, nn, sn)
	}
	if sn != wire.JSScheduleNextPurge {
		if _, err := time.Parse(time.RFC3339Nano, nn); err != nil {
			t.Errorf("%s %q: %v", wire.HeaderJSScheduleNext, nn, err)
		}
	}
}

// A cron spec with seconds, in a zone, fires on both at the same
// wall-clock seconds: each firing names the next in the zone's offset, a
// whole second the spec matches, and natsdelay's next firing is planned
// at the time the one before named. Removing it (a publish without
// Nats-Schedule) stops both.
func TestJSSchedule_CronInZone_FiresAsTheServer(t *testing.T) {
	t.Parallel()
	h := newJSHarness(t)
	core := subscribe(t, h.nc, "out.cron")
	m := jsMsg("sched.cron", "tick", wire.HeaderJSSchedule, "*/2 * * * * *", wire.HeaderJSScheduleTarget, "out.cron",
		wire.HeaderJSScheduleTimeZone, "America/New_York")
	if srvErr, ndErr := h.both(t, m); srvErr != nil || ndErr != nil {
		t.Fatalf("server %v, natsdelay %v", srvErr, ndErr)
	}
	// natsdelay's firings first, each ACKed as it comes (the harness's
	// ack wait is short); the stream keeps the server's meanwhile.
	var nd []received
	for len(nd) < 2 {
		r := next(t, core, "natsdelay's cron firing")
		ackSync(t, h.nc, r.Msg, "+ACK")
		if attempt(t, r.Msg) == 1 {
			nd = append(nd, r)
		}
	}
	srv := h.firings(t, "srv.cron", 2)
	// Remove both, then compare at leisure.
	if srvErr, ndErr := h.both(t, jsMsg("sched.cron", "")); srvErr != nil || ndErr != nil {
		t.Fatalf("removal: server %v, natsdelay %v", srvErr, ndErr)
	}
	ny, _ := time.LoadLocation("America/New_York")
	for i := range 2 {
		sameFiring(t, srv[i].Header, srv[i].Data, nd[i].Msg)
		for who, v := range map[string]string{"server": srv[i].Header.Get(wire.HeaderJSScheduleNext), "natsdelay": nd[i].Header.Get(wire.HeaderJSScheduleNext)} {
			next, err := time.Parse(time.RFC3339Nano, v)
			_, off := time.Now().In(ny).Zone()
			if _, got := next.Zone(); err != nil || got != off || next.Nanosecond() != 0 || next.Second()%2 != 0 {
				t.Errorf("%s's %s %q: want an even whole second in New York's offset", who, wire.HeaderJSScheduleNext, v)
			}
		}
	}
	occ := parseTime(t, nd[1].Header.Get(wire.HeaderOccurrence))
	if named, _ := time.Parse(time.RFC3339Nano, nd[0].Header.Get(wire.HeaderJSScheduleNext)); !named.Equal(occ) {
		t.Fatalf("natsdelay's second firing was planned at %s; the first named %s", occ, named)
	}
	waitPendingWithin(t, h.nc, 0, wait)
}

// A schedule whose target a stream captures lands in that stream, once
// per firing, settled by the stream's PubAck: without Nats-Scheduler and
// Nats-Schedule-Next, which a stream refuses from a client. Publishing
// again on the schedule subject replaces the schedule, also with another
// target.
func TestJSSchedule_StreamTarget_PubAckSettles_Replace(t *testing.T) {
	t.Parallel()
	h := newJSHarness(t)
	jobs := h.stream(t, jetstream.StreamConfig{Name: "JOBS", Subjects: []string{"jobs.>"}})
	ctx := context.Background()
	pub := func(target string, every time.Duration) {
		m := nats.NewMsg(wire.DefaultJSSchedulePrefix + ".sched.jobs")
		m.Data = []byte(target)
		if _, err := h.js.PublishMsg(ctx, m, jetstream.WithScheduleEvery(every), jetstream.WithScheduleTarget(target)); err != nil {
			t.Fatal(err)
		}
	}
	pub("jobs.a", time.Second)
	checkFor(t, wait, 20*time.Millisecond, func() error {
		if n := msgs(t, jobs); n < 2 {
			return fmt.Errorf("%d firings in JOBS", n)
		}
		return nil
	})
	got, err := jobs.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if got.Header.Get(wire.HeaderJSScheduler) != "" || got.Header.Get(wire.HeaderJSScheduleNext) != "" || got.Subject != "jobs.a" {
		t.Fatalf("the stream stored %s with %v", got.Subject, got.Header)
	}
	if st := h.svc.Stats(); st.Redelivered != 0 {
		t.Fatalf("%d redeliveries: the stream's PubAck did not settle", st.Redelivered)
	}
	// Another target: the schedule moves; only one remains.
	pub("jobs.b", time.Hour)
	page, err := api(h.nc).SchedulesPage(ctx, wire.SchedulesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range page.Messages {
		names = append(names, m.Subject+" "+m.Schedule.Name+" "+m.Schedule.JSScheduler)
	}
	if len(names) != 1 || names[0] != "jobs.b sched.jobs sched.jobs" {
		t.Fatalf("schedules %q, want only jobs.b's, named sched.jobs", names)
	}
	if spec := page.Messages[0].Schedule.Spec; spec != "@every 1h0m0s" {
		t.Fatalf("spec %q, want the Nats-Schedule as given", spec)
	}
}

// An @every schedule with a TTL fires on both with Nats-TTL from
// Nats-Schedule-TTL; natsdelay's is listed, named by its schedule subject,
// and LIST shows its next firing. A publish without Nats-Schedule removes
// one schedule, a purge naming a schedule subject (Nats-Schedule-Next:
// purge with Nats-Scheduler) the other, and CANCEL by target and schedule
// subject ends a third: nothing is left.
func TestJSSchedule_Every_TTL_ListRemovePurgeCancel(t *testing.T) {
	t.Parallel()
	h := newJSHarness(t)
	ctx := context.Background()
	core := subscribe(t, h.nc, "out.>")
	for _, name := range []string{"e1", "e2", "e3"} {
		m := jsMsg("sched."+name, name, wire.HeaderJSSchedule, "@every 1s", wire.HeaderJSScheduleTarget, "out."+name,
			wire.HeaderJSScheduleTTL, "5s", "App", name)
		if srvErr, ndErr := h.both(t, m); srvErr != nil || ndErr != nil {
			t.Fatalf("%s: server %v, natsdelay %v", name, srvErr, ndErr)
		}
	}
	r := next(t, core, "a firing")
	ackSync(t, h.nc, r.Msg, "+ACK")
	name := strings.TrimPrefix(r.Subject, "out.")
	srv := h.firings(t, "srv."+name, 1)[0]
	sameFiring(t, srv.Header, srv.Data, r.Msg)
	if got := r.Header.Get("Nats-TTL"); got != "5s" || srv.Header.Get("Nats-TTL") != "5s" {
		t.Fatalf("Nats-TTL: natsdelay %q, server %q, want 5s", got, srv.Header.Get("Nats-TTL"))
	}
	list, err := api(h.nc).ListPage(ctx, wire.ListRequest{Subject: "out.e3"})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Messages) == 0 || list.Messages[len(list.Messages)-1].ID != "sched.e3" {
		t.Fatalf("LIST out.e3: %+v, want its next firing, id sched.e3", list.Messages)
	}

	if _, ndErr := h.both(t, jsMsg("sched.e1", "plain")); ndErr != nil {
		t.Fatal(ndErr)
	}
	if _, ndErr := h.both(t, jsMsg("sched.purger", "", wire.HeaderJSScheduleNext, "purge", wire.HeaderJSScheduler, "sched.e2")); ndErr != nil {
		t.Fatal(ndErr)
	}
	if err := api(h.nc).Cancel(ctx, wire.MessageRef{Subject: "out.e3", ID: "sched.e3"}); err != nil {
		t.Fatal(err)
	}
	page, err := api(h.nc).SchedulesPage(ctx, wire.SchedulesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Messages) != 0 {
		t.Fatalf("%d schedules left, want none", len(page.Messages))
	}
	// Firings already out finish: ACK them until nothing is pending.
	checkFor(t, wait, 20*time.Millisecond, func() error {
		for {
			select {
			case r := <-core:
				_ = r.Respond(nil)
				continue
			default:
			}
			break
		}
		if n := pending(t, h.nc); n != 0 {
			return fmt.Errorf("%d pending", n)
		}
		return nil
	})
}

// A JetStream schedule with the service's Delay-Max-Deliver gets what no
// stream gives it: a firing nobody ACKs is dead-lettered.
func TestJSSchedule_MaxDeliver_DeadLetter(t *testing.T) {
	t.Parallel()
	h := newJSHarness(t)
	core := subscribe(t, h.nc, "out.dl")
	m := nats.NewMsg(wire.DefaultJSSchedulePrefix + ".sched.dl")
	m.Header.Set(wire.HeaderMaxDeliver, "1")
	if _, err := h.js.PublishMsg(context.Background(), m, jetstream.WithScheduleAt(time.Now()), jetstream.WithScheduleTarget("out.dl")); err != nil {
		t.Fatal(err)
	}
	next(t, core, "the firing, not ACKed")
	checkFor(t, wait, 20*time.Millisecond, func() error {
		var ids []string
		for d, err := range api(h.nc).DeadLetters(context.Background(), wire.DeadListRequest{Filter: wire.Filter{Subject: "out.dl"}}) {
			if err != nil {
				return err
			}
			ids = append(ids, d.ID)
		}
		if len(ids) != 1 || ids[0] != "sched.dl" {
			return fmt.Errorf("dead letters of out.dl: %q, want sched.dl's", ids)
		}
		return nil
	})
}

// JSSchedulePrefix (--js-schedule-prefix) moves the schedule subjects:
// nats.go's Publish works on the new prefix, and nothing answers on the
// default one.
func TestJSSchedule_PrefixMoved(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *bridge.Config) { c.JSSchedulePrefix = "sched.in" })
	js, err := jetstream.New(h.nc)
	if err != nil {
		t.Fatal(err)
	}
	core := subscribe(t, h.nc, "out.moved")
	ctx := context.Background()
	opts := []jetstream.PublishOpt{jetstream.WithScheduleAt(time.Now()), jetstream.WithScheduleTarget("out.moved")}
	if _, err := js.Publish(ctx, "sched.in.reports", []byte("x"), opts...); err != nil {
		t.Fatal(err)
	}
	r := next(t, core, "the firing")
	if r.Header.Get(wire.HeaderJSScheduler) != "reports" {
		t.Fatalf("Nats-Scheduler %q, want reports", r.Header.Get(wire.HeaderJSScheduler))
	}
	ackSync(t, h.nc, r.Msg, "+ACK")
	if _, err := js.Publish(ctx, wire.DefaultJSSchedulePrefix+".reports", []byte("x"), opts...); !errors.Is(err, jetstream.ErrNoStreamResponse) {
		t.Fatalf("on the default prefix: %v, want no responders", err)
	}
}

// A stream made after a JetStream schedule was taken in, capturing its
// target, refuses the firing's Nats-Scheduler (10212); the service learns
// that the stream captures the target, and the redelivery goes without
// them: the stream stores the firing once and its PubAck settles it.
func TestJSSchedule_StreamMadeLater_Learned(t *testing.T) {
	t.Parallel()
	h := newJSHarness(t)
	ctx := context.Background()
	at := time.Now().Add(time.Second)
	if _, err := h.js.Publish(ctx, wire.DefaultJSSchedulePrefix+".sched.late", []byte("late"),
		jetstream.WithScheduleAt(at), jetstream.WithScheduleTarget("late.x")); err != nil {
		t.Fatal(err)
	}
	late := h.stream(t, jetstream.StreamConfig{Name: "LATE", Subjects: []string{"late.>"}})
	h.settled(t)
	if n := msgs(t, late); n != 1 {
		t.Fatalf("LATE holds %d messages, want 1", n)
	}
	m, err := late.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := m.Header[wire.HeaderJSScheduler]; ok || string(m.Data) != "late" {
		t.Fatalf("stored %q with %v", m.Data, m.Header)
	}
}
