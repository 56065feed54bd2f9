package integration_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge"
	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/dispatch"
)

// fairnessSize is the in-flight window and the unanswered messages of the
// silent subject in the fairness test: the default window with more than
// it unanswered under NATSDELAY_SOAK=1 (make soak), and a small window,
// still overrun by the silent subject, in make test.
func fairnessSize() (window, silent int) {
	if os.Getenv("NATSDELAY_SOAK") != "" {
		return dispatch.DefaultConfig().MaxInFlight, 70_000
	}
	return 2048, 3000
}

// TestWindow_SilentSubject_DoesNotStarveOthers checks fairness by default:
// one subject whose consumer never answers, with more messages due than
// the whole in-flight window holds, cannot delay another subject. Its
// deliveries stay within its own in-flight limit (an eighth of the
// window by default) and are redelivered every ack wait on their own,
// while each of the healthy subject's 100 messages, due once the silent
// one has filled its share, is published within a second of its fire time
// (or of its commit, if that came after), both by the service's clock:
// the `at` of its delivered and scheduled events, not its arrival.
func TestWindow_SilentSubject_DoesNotStarveOthers(t *testing.T) {
	t.Parallel()
	window, silent := fairnessSize()
	limit := window / 8 // the default per-subject limit
	h := newHarness(t, func(c *bridge.Config) {
		c.Delivery.MaxInFlight, c.Delivery.AckWait = window, 5*time.Second
		c.Events, c.EventBuffer = true, 2*silent
	})
	published := eventsAt(t, connect(t, h.srv), wire.EventDelivered, "fair.healthy")
	stored := eventsAt(t, connect(t, h.srv), wire.EventScheduled, "fair.healthy")

	var unanswered atomic.Int64
	sub, err := h.nc.Subscribe("fair.silent", func(*nats.Msg) { unanswered.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	_ = sub.SetPendingLimits(-1, -1)
	healthy := subscribe(t, h.nc, "fair.healthy")

	for sent := 0; sent < silent; sent += 10_000 {
		msgs := make([]*nats.Msg, min(10_000, silent-sent))
		for i := range msgs {
			msgs[i] = newMsg("fair.silent", strconv.Itoa(sent+i))
		}
		scheduleMany(t, h.nc, msgs)
	}
	checkFor(t, wait, 10*time.Millisecond, func() error {
		if n := unanswered.Load(); n < int64(limit) {
			return fmt.Errorf("%d deliveries to the silent subject, want its limit %d first", n, limit)
		}
		return nil
	})

	const n = 100
	due := time.Now().Add(500 * time.Millisecond)
	msgs := make([]*nats.Msg, n)
	for i := range msgs {
		msgs[i] = newMsg("fair.healthy", strconv.Itoa(i), wire.HeaderAt, due.UTC().Format(time.RFC3339Nano))
	}
	scheduleMany(t, h.nc, msgs)
	for i := range n {
		r := next(t, healthy, fmt.Sprintf("healthy delivery %d of %d (stats %+v)", i+1, n, h.svc.Stats()))
		if string(r.Data) != strconv.Itoa(i) {
			t.Fatalf("healthy delivery %d is %q, want %q: out of fire order", i+1, r.Data, strconv.Itoa(i))
		}
		if err := r.Respond([]byte(wire.AnswerAck)); err != nil {
			t.Fatal(err)
		}
	}
	_, publishedAt := published.tags(t, n)
	_, storedAt := stored.tags(t, n)
	for tag, at := range publishedAt {
		due := parseTime(t, msgs[0].Header.Get(wire.HeaderAt)).Truncate(time.Millisecond)
		if s := storedAt[tag]; s.After(due) {
			due = s
		}
		if late := at.Sub(due); late > time.Second {
			t.Fatalf("healthy delivery %s published %v after it was due and stored, want within 1s (stats %+v)", tag, late, h.svc.Stats())
		}
	}
	// Once the healthy ACKs are applied, only the silent subject's share
	// is in flight, and it is shown as limited, by name.
	checkFor(t, wait, 10*time.Millisecond, func() error {
		if st := h.svc.Stats(); st.InFlight != uint64(limit) || st.Limited != 1 {
			return fmt.Errorf("%d in flight and %d subjects limited, want the silent subject's %d and 1", st.InFlight, st.Limited, limit)
		}
		return nil
	})
	var subjects wire.SubjectsReply
	apiCall(t, h.nc, wire.VerbSubjects, wire.SubjectsRequest{Filter: "fair.>"}, &subjects)
	want := []wire.SubjectInfo{{Subject: "fair.silent", Pending: uint64(silent), DueNow: uint64(silent), InFlight: limit, Limited: true}}
	if !slices.Equal(subjects.Subjects, want) {
		t.Fatalf("SUBJECTS fair.> = %+v, want %+v", subjects.Subjects, want)
	}
	if in := info(t, h.nc); !slices.Equal(in.LimitedSubjects, []string{"fair.silent"}) || in.Stats.Limited != 1 {
		t.Fatalf("INFO limited_subjects %v, subjects_limited %d: want fair.silent, 1", in.LimitedSubjects, in.Stats.Limited)
	}
}

// resumeSize is the in-flight window, the pass limit and the subjects of
// the paused pattern, one message due each, in the resume test: the
// defaults and 100,000 subjects under NATSDELAY_SOAK=1 (make soak), a
// small window and a thousand in make test.
func resumeSize() (window, passLimit, subjects int) {
	if os.Getenv("NATSDELAY_SOAK") != "" {
		d := dispatch.DefaultConfig()
		return d.MaxInFlight, d.PassLimit, 100_000
	}
	return 2048, 64, 1000
}

// TestWindow_Resume_SharesWithOthers checks that a resume shares the
// window like any other backlog: with a pattern of many subjects paused,
// each with a message due, a message of another subject that falls due
// just after the RESUME is published after at most the first share of
// the window (a subject's default max in flight) of the resumed
// deliveries published since it was stored, not after all of them. It
// counts places in the publish order, as one subscription to both sees
// it, and places each resumed delivery before or after the other was
// stored by the `at` of their events (delivered, scheduled): the
// service's clock, not the test's.
func TestWindow_Resume_SharesWithOthers(t *testing.T) {
	t.Parallel()
	window, passLimit, subjects := resumeSize()
	share := window / 8
	h := newHarness(t, func(c *bridge.Config) {
		c.Delivery.MaxInFlight, c.Delivery.PassLimit = window, passLimit
		c.Events, c.EventBuffer = true, 4*subjects
	})
	var got wire.Limit
	apiCall(t, h.nc, wire.VerbPause, wire.PatternRequest{Pattern: "rs.p.>"}, &got)
	order := publishOrder(t, connect(t, h.srv), "rs.>")
	published := eventsAt(t, connect(t, h.srv), wire.EventDelivered, "rs.>")
	stored := eventsAt(t, connect(t, h.srv), wire.EventScheduled, "rs.other")
	for sent := 0; sent < subjects; sent += 10_000 {
		msgs := make([]*nats.Msg, min(10_000, subjects-sent))
		for i := range msgs {
			msgs[i] = newMsg("rs.p."+strconv.Itoa(sent+i), "x")
		}
		scheduleMany(t, h.nc, msgs)
	}
	checkFor(t, wait, 10*time.Millisecond, func() error {
		if st := h.svc.Stats(); st.Paused != uint64(subjects) {
			return fmt.Errorf("%d subjects held by the pause, want %d", st.Paused, subjects)
		}
		return nil
	})

	apiCall(t, h.nc, wire.VerbResume, wire.PatternRequest{Pattern: "rs.p.>"}, &got)
	other := schedule(t, h.nc, newMsg("rs.other", "due after the resume"))
	tags, _ := order.tags(t, subjects+1)
	_, at := published.tags(t, subjects+1)
	_, storedAt := stored.tags(t, 1)
	if st := h.svc.Events().Stats(); st.Dropped != 0 {
		t.Fatalf("%d events dropped: the publish times are incomplete", st.Dropped)
	}
	place := slices.Index(tags, other.Tag)
	ahead := 0
	for _, tag := range tags[:max(place, 0)] {
		if at[tag].After(storedAt[other.Tag]) {
			ahead++
		}
	}
	t.Logf("the other subject's delivery was publish %d of %d after the resume; %d resumed ones went out after it was stored and before it", place+1, subjects+1, ahead)
	if place < 0 || ahead > share {
		t.Fatalf("%d resumed deliveries published after the other subject's message was stored and before it, of %d subjects resumed: want at most the first share of the window, %d", ahead, subjects, share)
	}
}

// tagLog records tags in the order one subscription receives them, with
// a time for each.
type tagLog struct {
	mu    sync.Mutex
	order []string
	at    map[string]time.Time
}

// publishOrder ACKs every delivery on subject and records its tag, in the
// order the service published them (one connection publishes them all, and
// one subscription sees them in that order).
func publishOrder(tb testing.TB, nc *nats.Conn, subject string) *tagLog {
	tb.Helper()
	l := &tagLog{}
	l.subscribe(tb, nc, subject, func(m *nats.Msg) (string, time.Time) {
		_ = m.Respond([]byte(wire.AnswerAck))
		return m.Header.Get(wire.HeaderTag), time.Time{}
	})
	return l
}

// eventsAt records, by tag, the `at` of each event of kind about a
// subject matching subject: when the service did it (a delivered event's
// is its publish, a scheduled event's its commit).
func eventsAt(tb testing.TB, nc *nats.Conn, kind, subject string) *tagLog {
	tb.Helper()
	l := &tagLog{at: make(map[string]time.Time)}
	l.subscribe(tb, nc, wire.DefaultEventPrefix+"."+kind+"."+subject, func(m *nats.Msg) (string, time.Time) {
		var e wire.Event
		if err := json.Unmarshal(m.Data, &e); err != nil {
			tb.Errorf("event %s: %v", m.Data, err)
		}
		at, err := time.Parse(time.RFC3339Nano, e.At)
		if err != nil {
			tb.Errorf("event %s: at: %v", m.Data, err)
		}
		return e.Tag, at
	})
	return l
}

func (l *tagLog) subscribe(tb testing.TB, nc *nats.Conn, subject string, read func(*nats.Msg) (string, time.Time)) {
	tb.Helper()
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
		tag, at := read(m)
		l.mu.Lock()
		l.order = append(l.order, tag)
		if l.at != nil {
			l.at[tag] = at
		}
		l.mu.Unlock()
	})
	if err != nil {
		tb.Fatal(err)
	}
	_ = sub.SetPendingLimits(-1, -1)
	tb.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		tb.Fatal(err)
	}
}

// tags waits until n tags are recorded, and returns them in order and by
// tag.
func (l *tagLog) tags(tb testing.TB, n int) ([]string, map[string]time.Time) {
	tb.Helper()
	count := func() int {
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.order)
	}
	waitProgress(tb, wait, n, count, "tags recorded")
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.order), maps.Clone(l.at)
}
