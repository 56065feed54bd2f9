package integration_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/natsdelay/natsdelay/bridge"
	"github.com/natsdelay/natsdelay/bridge/wire"
)

// setLimit sets l and fails tb unless the service took it.
func setLimit(tb testing.TB, nc *nats.Conn, l wire.Limit) {
	tb.Helper()
	var got wire.Limit
	apiCall(tb, nc, wire.VerbLimitsSet, l, &got)
	if got != l {
		tb.Fatalf("LIMITS.SET %+v answered %+v", l, got)
	}
}

// subjectState is the SUBJECTS entry of subject.
func subjectState(tb testing.TB, nc *nats.Conn, subject string) wire.SubjectInfo {
	tb.Helper()
	var r wire.SubjectsReply
	apiCall(tb, nc, wire.VerbSubjects, wire.SubjectsRequest{Filter: subject}, &r)
	if len(r.Subjects) != 1 {
		tb.Fatalf("SUBJECTS %s: %+v, want one entry", subject, r.Subjects)
	}
	return r.Subjects[0]
}

// scheduleDue schedules n messages due now on subject, with payloads 0
// to n-1.
func scheduleDue(tb testing.TB, nc *nats.Conn, subject string, n int) {
	tb.Helper()
	msgs := make([]*nats.Msg, n)
	for i := range msgs {
		msgs[i] = newMsg(subject, strconv.Itoa(i))
	}
	scheduleMany(tb, nc, msgs)
}

// ackEach ACKs every delivery on subject.
func ackEach(tb testing.TB, nc *nats.Conn, subject string) {
	tb.Helper()
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) { _ = m.Respond([]byte(wire.AnswerAck)) })
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		tb.Fatal(err)
	}
}

// TestLimits_Rate_HoldsItsRate checks a rate limit: a subject with a
// backlog and a rate of 50/s with a burst of 50 is published, in the 10 s
// after its first publish, what the token bucket allows (the burst, then
// 50 a second: 550), never more at any point and within 5% of it, while
// another subject, due just after, is published all the same, its 100
// in less time than the rated subject takes for 50 after its burst. It measures where the service acts: the
// `at` of each delivered event is the service's clock at the publish, so
// a subscriber that is slow to see a delivery changes nothing.
func TestLimits_Rate_HoldsItsRate(t *testing.T) {
	t.Parallel()
	const rate, burst, span = 50, 50, 10 * time.Second
	h := newHarness(t, func(c *bridge.Config) { c.Events = true })
	setLimit(t, h.nc, wire.Limit{Pattern: "rated.>", Rate: rate, Burst: burst})
	ackEach(t, h.nc, "rated.a")
	ackEach(t, h.nc, "free.b")
	rated, free := publishTimes(t, h.nc, "rated.a"), publishTimes(t, h.nc, "free.b")
	scheduleDue(t, h.nc, "rated.a", 1000)
	scheduleDue(t, h.nc, "free.b", 100)
	freeAt := free.times(t, 100)
	var at []time.Time
	checkFor(t, span+wait, 50*time.Millisecond, func() error {
		at = rated.times(t, 1)
		if last := at[len(at)-1]; last.Sub(at[0]) < span {
			return fmt.Errorf("%d publishes over %v, want %v of them", len(at), last.Sub(at[0]), span)
		}
		return nil
	})
	if st := h.svc.Events().Stats(); st.Dropped != 0 {
		t.Fatalf("%d events dropped: the publish times are incomplete", st.Dropped)
	}
	// A pass spends tokens at its start and publishes after reading the
	// messages: 200 ms of slack, under load, is 10 deliveries, where a
	// bucket made again mid-run would add up to 50.
	const slack = 200 * time.Millisecond
	withinBucket(t, at, rate, burst, slack)
	// Held by the rate, the unlimited subject's 100 would take 2 s of
	// tokens; free, it goes out in a pass or two. Its span is set against
	// the rated subject's own second after the burst, in the same run,
	// rather than against the clock: ingest of the 100 may start late on
	// a loaded machine without anything waiting for the rate.
	freeSpan, ratedSecond := freeAt[len(freeAt)-1].Sub(freeAt[0]), at[burst+rate].Sub(at[burst])
	if freeSpan >= ratedSecond {
		t.Fatalf("the unlimited subject's 100 publishes took %v, as long as the rated subject's %d after its burst (%v): it waited for the rate", freeSpan, rate, ratedSecond)
	}
	n := 0
	for _, a := range at {
		if a.Sub(at[0]) < span {
			n++
		}
	}
	want := burst + rate*int(span/time.Second)
	if tol, over := rate*int(span/time.Second)/20, int(rate*slack.Seconds()); n < want-tol || n > want+over {
		t.Fatalf("%d publishes in the %v after the first, want %d, up to %d fewer or %d more (the slack)", n, span, want, tol, over)
	}
	t.Logf("%d publishes in %v at rate %d/s, burst %d (the bucket allows %d)", n, span, rate, burst, want)
}

// TestLimits_MaxInFlight_PerPattern checks a pattern's max_in_flight:
// each subject it matches holds at most that many deliveries unanswered
// and is shown as limited, while a subject it does not match holds its
// default share.
func TestLimits_MaxInFlight_PerPattern(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	setLimit(t, h.nc, wire.Limit{Pattern: "mif.*", MaxInFlight: 5})
	for _, s := range []string{"mif.a", "mif.b", "other.c"} {
		subscribe(t, h.nc, s) // never answers
		scheduleDue(t, h.nc, s, 20)
	}
	checkFor(t, wait, 10*time.Millisecond, func() error {
		for _, want := range []wire.SubjectInfo{
			{Subject: "mif.a", Pending: 20, DueNow: 20, InFlight: 5, Limited: true},
			{Subject: "mif.b", Pending: 20, DueNow: 20, InFlight: 5, Limited: true},
			{Subject: "other.c", Pending: 20, DueNow: 20, InFlight: 20},
		} {
			if got := subjectState(t, h.nc, want.Subject); got != want {
				return fmt.Errorf("SUBJECTS %s = %+v, want %+v", want.Subject, got, want)
			}
		}
		return nil
	})
}

// TestLimits_MostSpecificPatternWins checks the rule that picks the limit
// of a subject: of the patterns that match it, the most specific wins
// whole (more literal tokens, then without >), and a pause of a wider
// pattern does not reach a subject a narrower one matches.
func TestLimits_MostSpecificPatternWins(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	setLimit(t, h.nc, wire.Limit{Pattern: "ms.>", MaxInFlight: 2, Paused: true})
	setLimit(t, h.nc, wire.Limit{Pattern: "ms.a.*", MaxInFlight: 3})
	setLimit(t, h.nc, wire.Limit{Pattern: "ms.*.b", MaxInFlight: 4})
	setLimit(t, h.nc, wire.Limit{Pattern: "ms.a.b", MaxInFlight: 5})
	var list wire.LimitsReply
	apiCall(t, h.nc, wire.VerbLimitsList, nil, &list)
	var order []string
	for _, l := range list.Limits {
		order = append(order, l.Pattern)
	}
	if fmt.Sprint(order) != "[ms.a.b ms.a.* ms.*.b ms.>]" {
		t.Fatalf("LIMITS.LIST in %v, want the most specific first: [ms.a.b ms.a.* ms.*.b ms.>]", order)
	}
	cases := []struct {
		subject  string
		inFlight int
	}{{"ms.a.b", 5}, {"ms.a.c", 3}, {"ms.z.b", 4}, {"ms.z.z", 0}}
	for _, c := range cases {
		subscribe(t, h.nc, c.subject) // never answers
		scheduleDue(t, h.nc, c.subject, 10)
	}
	checkFor(t, wait, 10*time.Millisecond, func() error {
		for _, c := range cases {
			got := subjectState(t, h.nc, c.subject)
			if got.InFlight != c.inFlight || got.Limited != (c.inFlight > 0) {
				return fmt.Errorf("SUBJECTS %s = %+v, want %d in flight, limited %v (paused by ms.> if 0)", c.subject, got, c.inFlight, c.inFlight > 0)
			}
		}
		return nil
	})
}

// TestLimits_BadInput_400 checks that every bad LIMITS or PAUSE request is
// a 400 that says what is wrong, and stores nothing.
func TestLimits_BadInput_400(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *bridge.Config) { c.Delivery.MaxInFlight = 1000 })
	for _, c := range []struct {
		verb string
		body any
		want string
	}{
		{wire.VerbLimitsSet, `{"max_in_flight":5}`, `"pattern" is required`},
		{wire.VerbLimitsSet, `{"pattern":"orders..eu","max_in_flight":5}`, `"pattern" "orders..eu" has an empty token`},
		{wire.VerbLimitsSet, `{"pattern":"orders.>.eu"}`, `> must be the last token`},
		{wire.VerbLimitsSet, `{"pattern":"orders*"}`, `a wildcard must be a whole token`},
		{wire.VerbLimitsSet, `{"pattern":"orders.>","max_in_flight":-1}`, `"max_in_flight" -1: want 1 to the in-flight window, 1000`},
		{wire.VerbLimitsSet, `{"pattern":"orders.>","max_in_flight":1001}`, `"max_in_flight" 1001`},
		{wire.VerbLimitsSet, `{"pattern":"orders.>","rate":-5}`, `"rate" -5: want messages per second`},
		{wire.VerbLimitsSet, `{"pattern":"orders.>","rate":1e12}`, `"rate" 1e+12`},
		{wire.VerbLimitsSet, `{"pattern":"orders.>","burst":10}`, `"burst" 10 without "rate"`},
		{wire.VerbLimitsSet, `{"pattern":"orders.>","rate":"fast"}`, `request body`},
		{wire.VerbLimitsSet, `{"pattern":"orders.>","max_inflight":5}`, `unknown field "max_inflight"`},
		{wire.VerbLimitsSet, `{"pattern":">","key_header":"Tenant","whole":true}`, `"whole" and "key_header": want one of them`},
		{wire.VerbLimitsSet, `{"pattern":">","key_header":"Ten ant"}`, `"key_header" "Ten ant": want a header name`},
		{wire.VerbLimitsSet, `{"pattern":">","key_header":"Delay-Id"}`, `a control header is not kept`},
		{wire.VerbPause, `{}`, `"pattern" is required`},
		{wire.VerbResume, `{"pattern":"a b"}`, `white space`},
		{wire.VerbLimitsGet, `{"pattern":"orders.>"}`, `no limit`},
		{wire.VerbLimitsDelete, `{"pattern":"orders.>"}`, `no limit`},
	} {
		code := 400
		if c.verb == wire.VerbLimitsGet || c.verb == wire.VerbLimitsDelete {
			code = 404
		}
		apiError(t, h.nc, c.verb, c.body, code, c.want)
	}
	var list wire.LimitsReply
	apiCall(t, h.nc, wire.VerbLimitsList, nil, &list)
	if len(list.Limits) != 0 {
		t.Fatalf("LIMITS.LIST after bad requests = %+v, want none stored", list.Limits)
	}
}

// TestLimits_PauseResume_AcrossRestart checks pause and resume: a paused
// pattern keeps accepting and storing messages and delivers none of them,
// also after a restart, which keeps the pause; another subject goes on;
// once resumed, the held messages go out in fire order, each once, with
// fire times as scheduled (their lateness is honest).
func TestLimits_PauseResume_AcrossRestart(t *testing.T) {
	t.Parallel()
	const n = 5
	dir := t.TempDir()
	e := engines[1] // pebble-disk
	srv := startServer(t)
	nc := connect(t, srv)
	paused := subscribe(t, nc, "paused.a")
	other := subscribe(t, nc, "other.a")
	svc := startService(t, srv, e.open(t, dir), nil)
	var got wire.Limit
	apiCall(t, nc, wire.VerbPause, wire.PatternRequest{Pattern: "paused.>"}, &got)
	if !got.Paused || got.Pattern != "paused.>" {
		t.Fatalf("PAUSE answered %+v", got)
	}
	var sent []scheduled
	for i := range n {
		sent = append(sent, schedule(t, nc, newMsg("paused.a", strconv.Itoa(i))))
	}
	o := schedule(t, nc, newMsg("other.a", "other"))
	r := next(t, other, "the subject that is not paused")
	if r.Header.Get(wire.HeaderTag) != o.Tag {
		t.Fatalf("delivered %v, want %s", r.Header, o.Tag)
	}
	ackSync(t, nc, r.Msg, wire.AnswerAck)
	checkFor(t, wait, 10*time.Millisecond, func() error {
		if st := svc.Stats(); st.Paused != 1 {
			return fmt.Errorf("%d subjects held by a pause, want 1", st.Paused)
		}
		return nil
	})
	quiet(t, paused, 200*time.Millisecond, "a paused subject before the restart")
	if err := svc.Close(); err != nil {
		t.Fatal(err)
	}

	svc = startService(t, srv, e.open(t, dir), nil)
	checkFor(t, wait, 10*time.Millisecond, func() error {
		if st := svc.Stats(); st.Paused != 1 {
			return fmt.Errorf("%d subjects held by a pause after the restart, want 1", st.Paused)
		}
		return nil
	})
	quiet(t, paused, 200*time.Millisecond, "a paused subject after the restart")
	apiCall(t, nc, wire.VerbLimitsGet, wire.PatternRequest{Pattern: "paused.>"}, &got)
	if !got.Paused {
		t.Fatalf("LIMITS.GET after the restart = %+v, want paused", got)
	}
	apiCall(t, nc, wire.VerbResume, wire.PatternRequest{Pattern: "paused.>"}, &got)
	for i, s := range sent {
		r := next(t, paused, "a resumed message")
		if r.Header.Get(wire.HeaderTag) != s.Tag {
			t.Fatalf("resumed delivery %d is %q, want %q: out of fire order", i, r.Data, strconv.Itoa(i))
		}
		wantAttempt(t, r.Msg, 1)
		if fire := parseTime(t, r.Header.Get(wire.HeaderFireAt)); !fire.Equal(s.FireAt) || r.at.Before(fire) {
			t.Fatalf("resumed delivery %d: fire time %v arrived %v, want its own %v, and not before it", i, fire, r.at, s.FireAt)
		}
		ackSync(t, nc, r.Msg, wire.AnswerAck)
	}
	waitPending(t, nc, 0)
	apiError(t, nc, wire.VerbLimitsGet, wire.PatternRequest{Pattern: "paused.>"}, 404, "no limit")
}

// TestCluster_InProcess_PauseResume_AcrossLeaderChange checks that a pause
// is replicated with the data: set on one leader, which is then killed,
// the new leader holds the subject's due messages back too (its
// dispatcher counts it held by a pause, LIMITS.GET says paused, and
// nothing arrives); RESUME on the new leader delivers them in fire order.
func TestCluster_InProcess_PauseResume_AcrossLeaderChange(t *testing.T) {
	const n = 5
	srv := startServer(t)
	nodes := startInProcessCluster(t, srv, 3)
	nc := connect(t, srv)
	paused := subscribe(t, nc, "cpaused.a")
	leader := serving(t, nodes)
	var got wire.Limit
	apiCall(t, nc, wire.VerbPause, wire.PatternRequest{Pattern: "cpaused.>"}, &got)
	if !got.Paused {
		t.Fatalf("PAUSE answered %+v", got)
	}
	var sent []scheduled
	for i := range n {
		sent = append(sent, scheduleInCluster(t, nc, newMsg("cpaused.a", strconv.Itoa(i))))
	}
	leader.kill(t)
	leader = serving(t, nodes)
	checkFor(t, wait, 10*time.Millisecond, func() error {
		if st := leader.svc.Stats(); st.Paused != 1 {
			return fmt.Errorf("%d subjects held by a pause on the new leader %s, want 1", st.Paused, leader.id)
		}
		return nil
	})
	quiet(t, paused, 200*time.Millisecond, "a paused subject after the leader change")
	apiCall(t, nc, wire.VerbLimitsGet, wire.PatternRequest{Pattern: "cpaused.>"}, &got)
	if !got.Paused {
		t.Fatalf("LIMITS.GET on the new leader = %+v, want paused", got)
	}
	apiCall(t, nc, wire.VerbResume, wire.PatternRequest{Pattern: "cpaused.>"}, &got)
	for i, s := range sent {
		r := next(t, paused, "a resumed message")
		if r.Header.Get(wire.HeaderTag) != s.Tag {
			t.Fatalf("resumed delivery %d is %q: out of fire order", i, r.Data)
		}
		ackSync(t, nc, r.Msg, wire.AnswerAck)
	}
}

// histogramCount is the sample count of the histogram name in reg.
func histogramCount(tb testing.TB, reg *prometheus.Registry, name string) uint64 {
	tb.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	tb.Fatalf("no histogram %s", name)
	return 0
}

// TestLimits_HeldLateness_ApartFromLateness checks that lateness caused
// by a pause is not reported as the service's: the deliveries of a
// subject paused, then resumed, land in fire_held_lateness_seconds, and
// the deliveries of a subject that nothing holds back in
// fire_lateness_seconds, so that an alert on the latter does not fire for
// a pause.
func TestLimits_HeldLateness_ApartFromLateness(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	h := newHarness(t, nil, bridge.WithRegisterer(reg))
	paused := subscribe(t, h.nc, "hl.paused")
	free := subscribe(t, h.nc, "hl.free")
	var got wire.Limit
	apiCall(t, h.nc, wire.VerbPause, wire.PatternRequest{Pattern: "hl.paused"}, &got)
	scheduleDue(t, h.nc, "hl.paused", 3)
	scheduleDue(t, h.nc, "hl.free", 1)
	ackSync(t, h.nc, next(t, free, "the free subject").Msg, wire.AnswerAck)
	checkFor(t, wait, 10*time.Millisecond, func() error {
		if st := h.svc.Stats(); st.Paused != 1 {
			return fmt.Errorf("%d subjects held by a pause, want 1", st.Paused)
		}
		return nil
	})
	apiCall(t, h.nc, wire.VerbResume, wire.PatternRequest{Pattern: "hl.paused"}, &got)
	for range 3 {
		ackSync(t, h.nc, next(t, paused, "a resumed message").Msg, wire.AnswerAck)
	}
	checkFor(t, wait, 10*time.Millisecond, func() error {
		held, late := histogramCount(t, reg, "natsdelay_fire_held_lateness_seconds"), histogramCount(t, reg, "natsdelay_fire_lateness_seconds")
		if held != 3 || late != 1 {
			return fmt.Errorf("held %d, late %d: want the 3 paused deliveries held and the free one late", held, late)
		}
		return nil
	})
}

// published records when the service published each delivery of a
// subject, from the `at` of its delivered events: the service's own
// clock at the publish, not the subscriber's at the arrival.
type published struct {
	mu sync.Mutex
	at []time.Time
}

// publishTimes subscribes to the delivered events of subject on nc, for
// a service with events on.
func publishTimes(tb testing.TB, nc *nats.Conn, subject string) *published {
	tb.Helper()
	p := &published{}
	sub, err := nc.Subscribe(wire.DefaultEventPrefix+"."+wire.EventDelivered+"."+subject, func(m *nats.Msg) {
		var e wire.Event
		if err := json.Unmarshal(m.Data, &e); err != nil {
			tb.Errorf("delivered event %s: %v", m.Data, err)
			return
		}
		at, err := time.Parse(time.RFC3339Nano, e.At)
		if err != nil {
			tb.Errorf("delivered event %s: at: %v", m.Data, err)
			return
		}
		p.mu.Lock()
		p.at = append(p.at, at)
		p.mu.Unlock()
	})
	if err != nil {
		tb.Fatal(err)
	}
	_ = sub.SetPendingLimits(-1, -1)
	tb.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		tb.Fatal(err)
	}
	return p
}

// times waits until n publishes are recorded and returns them in order.
func (p *published) times(tb testing.TB, n int) []time.Time {
	tb.Helper()
	var at []time.Time
	checkFor(tb, wait, 10*time.Millisecond, func() error {
		p.mu.Lock()
		at = append(at[:0], p.at...)
		p.mu.Unlock()
		if len(at) < n {
			return fmt.Errorf("%d delivered events, want %d", len(at), n)
		}
		return nil
	})
	slices.SortFunc(at, time.Time.Compare)
	return at
}

// withinBucket fails tb unless the publishes at are what a token bucket
// of rate r per second and burst b allows: in no span from one publish
// to a later one more than b plus what r adds over the span, with slack
// for the time from a pass's start, when it spends the tokens, to its
// publish, which the event's `at` is.
func withinBucket(tb testing.TB, at []time.Time, r float64, b int, slack time.Duration) {
	tb.Helper()
	for i := range at {
		for j := i + 1; j < len(at); j++ {
			span := at[j].Sub(at[i]) + slack
			if allowed := float64(b) + r*span.Seconds(); float64(j-i+1) > allowed {
				tb.Fatalf("publishes %d to %d (of %d, from %v to %v) are %d in %v: a bucket of %g/s and burst %d allows %.1f", i, j, len(at), at[0], at[len(at)-1], j-i+1, at[j].Sub(at[i]), r, b, allowed)
			}
		}
	}
}

// TestLimits_Rate_NotRefilledMidRun checks that a subject's rate bucket
// is one for as long as the service runs: not refilled when the subject
// runs out of due messages between two (its state in the dispatcher is
// dropped until the next falls due), nor when a limit of another pattern
// is set. By the service's own clock, a rate of 2/s with a burst of 1
// publishes messages due 150 ms apart half a second apart, and one with
// a burst of 3 publishes a backlog 3 at once, then half a second apart,
// whatever limits are set meanwhile.
func TestLimits_Rate_NotRefilledMidRun(t *testing.T) {
	t.Parallel()
	const rate, slack = 2, 150 * time.Millisecond
	h := newHarness(t, func(c *bridge.Config) { c.Events = true })

	t.Run("idle between messages", func(t *testing.T) {
		const burst, n = 1, 4
		setLimit(t, h.nc, wire.Limit{Pattern: "rr.idle", Rate: rate, Burst: burst})
		ackEach(t, h.nc, "rr.idle")
		pub := publishTimes(t, h.nc, "rr.idle")
		due := time.Now().Add(200 * time.Millisecond)
		msgs := make([]*nats.Msg, n)
		for i := range msgs {
			at := due.Add(time.Duration(i) * 150 * time.Millisecond)
			msgs[i] = newMsg("rr.idle", strconv.Itoa(i), wire.HeaderAt, at.UTC().Format(time.RFC3339Nano))
		}
		scheduleMany(t, h.nc, msgs)
		withinBucket(t, pub.times(t, n), rate, burst, slack)
	})

	t.Run("limit of another pattern set", func(t *testing.T) {
		const burst, n = 3, 6
		setLimit(t, h.nc, wire.Limit{Pattern: "rr.reload", Rate: rate, Burst: burst})
		ackEach(t, h.nc, "rr.reload")
		pub := publishTimes(t, h.nc, "rr.reload")
		scheduleDue(t, h.nc, "rr.reload", n)
		pub.times(t, burst)
		setLimit(t, h.nc, wire.Limit{Pattern: "other.>", MaxInFlight: 5})
		withinBucket(t, pub.times(t, n), rate, burst, slack)
	})
}
