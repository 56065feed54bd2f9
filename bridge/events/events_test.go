package events_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/natsdelay/natsdelay/bridge/events"
	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/keys"
)

// TestMain fails the package's tests if the Publisher's goroutine
// outlives its Close.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// wait bounds every wait for something the test caused.
const wait = 30 * time.Second

// gate is a Conn whose Publish blocks until it is opened: a connection
// that does not keep up. It records what was published.
type gate struct {
	entered chan struct{} // one send per Publish begun
	open    chan struct{}
	mu      sync.Mutex
	subj    []string
	bodies  [][]byte
}

func newGate() *gate { return &gate{entered: make(chan struct{}, 1024), open: make(chan struct{})} }

func (g *gate) Publish(subject string, data []byte) error {
	g.entered <- struct{}{}
	<-g.open
	g.mu.Lock()
	defer g.mu.Unlock()
	g.subj = append(g.subj, subject)
	g.bodies = append(g.bodies, append([]byte(nil), data...))
	return nil
}

func key(b byte) keys.Key {
	var k keys.Key
	for i := range k {
		k[i] = b + byte(i)
	}
	return k
}

// TestPublisher_Emit_FullQueue_DropsAndCounts checks the promise that
// events never make their emitter wait: while the connection is stuck,
// Emit fills the bounded queue and then drops, counting each drop, and
// returns at once every time; what was queued is published once the
// connection moves again, in order.
func TestPublisher_Emit_FullQueue_DropsAndCounts(t *testing.T) {
	g := newGate()
	p, err := events.New(g, events.Config{Buffer: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	emit := func(i int) bool {
		return p.Emit(events.Event{Kind: events.Delivered, Tag: key(byte(i)), Subject: "orders.new", Attempt: uint32(i)})
	}
	if !emit(0) {
		t.Fatal("first Emit dropped")
	}
	select {
	case <-g.entered: // the goroutine holds event 0, stuck in Publish
	case <-time.After(wait):
		t.Fatal("the publisher did not publish")
	}
	for i := 1; i <= 4; i++ {
		if !emit(i) {
			t.Fatalf("Emit %d dropped with room in the queue", i)
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 5; i < 8; i++ {
			if emit(i) {
				t.Errorf("Emit %d queued into a full queue", i)
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(wait):
		close(g.open)
		t.Fatal("Emit blocked on a full queue")
	}
	if st := p.Stats(); st.Dropped != 3 || st.Published != 0 {
		t.Fatalf("stats while stuck = %+v, want 3 dropped, 0 published", st)
	}
	close(g.open)
	p.Close()
	if st := p.Stats(); st.Published != 5 || st.Dropped != 3 {
		t.Fatalf("stats after Close = %+v, want 5 published, 3 dropped", st)
	}
	for i, b := range g.bodies {
		var e wire.Event
		if err := json.Unmarshal(b, &e); err != nil {
			t.Fatalf("body %d %s: %v", i, b, err)
		}
		if e.Attempt != uint32(i) || g.subj[i] != "$DELAY.EVENT.delivered.orders.new" {
			t.Errorf("event %d: subject %s, attempt %d: out of order or misaddressed", i, g.subj[i], e.Attempt)
		}
	}
	if p.Emit(events.Event{Kind: events.Acked, Subject: "x"}) || p.Stats().Dropped != 4 {
		t.Errorf("Emit after Close: not dropped and counted (%+v)", p.Stats())
	}
}

// TestPublisher_Fence_Down_PublishesNothing checks that a node without
// its lease (the fence down) publishes no event, and counts them.
func TestPublisher_Fence_Down_PublishesNothing(t *testing.T) {
	g := newGate()
	close(g.open)
	p, err := events.New(g, events.Config{Fence: func() bool { return false }})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		p.Emit(events.Event{Kind: events.Scheduled, Subject: "a"})
	}
	p.Close()
	if st := p.Stats(); st.Fenced != 3 || st.Published != 0 || len(g.subj) != 0 {
		t.Fatalf("stats = %+v, published %v: want 3 fenced and nothing published", st, g.subj)
	}
}

// TestPublisher_Nil_Off checks that events off costs nothing: a nil
// Publisher takes events without allocating, and its methods are safe.
func TestPublisher_Nil_Off(t *testing.T) {
	var p *events.Publisher
	e := events.Event{Kind: events.Acked, Tag: key(1), Subject: "orders.new", ID: "o-1", FireAt: time.Now()}
	if n := testing.AllocsPerRun(100, func() { p.Emit(e) }); n != 0 {
		t.Errorf("Emit on a nil Publisher allocates %v times", n)
	}
	if p.Emit(e) || p.Stats() != (events.Stats{}) {
		t.Error("a nil Publisher took an event")
	}
	p.Close()
}

// TestAppendBody_DecodesAsWireEvent checks the body against the
// documented wire.Event: every field, the times in the protocol's layout,
// the optional ones left out when empty, and strings that need escaping
// (quotes, control characters, bytes that are not UTF-8) written as
// encoding/json reads them back.
func TestAppendBody_DecodesAsWireEvent(t *testing.T) {
	fire := time.Date(2026, 12, 24, 18, 0, 0, 123_456_789, time.UTC)
	at := fire.Add(1500 * time.Millisecond).In(time.FixedZone("x", 3600))
	for _, tc := range []struct {
		name string
		e    events.Event
		want wire.Event
	}{
		{"delivered", events.Event{Kind: events.Delivered, Tag: key(1), Subject: "orders.new", ID: "o-1", Attempt: 2, FireAt: fire, At: at},
			wire.Event{Kind: "delivered", Tag: key(1).Tag(), ID: "o-1", Subject: "orders.new", Attempt: 2,
				FireAt: "2026-12-24T18:00:00.123Z", At: "2026-12-24T18:00:01.623Z"}},
		{"no id", events.Event{Kind: events.Scheduled, Tag: key(2), Subject: "a", FireAt: fire, At: fire},
			wire.Event{Kind: "scheduled", Tag: key(2).Tag(), Subject: "a", FireAt: "2026-12-24T18:00:00.123Z", At: "2026-12-24T18:00:00.123Z"}},
		{"escaped", events.Event{Kind: events.Dead, Tag: key(3), Subject: "a.b", ID: "q\"\\\n\t\x01é\xff<&>\u2028", Reason: "term: \"no\"", FireAt: fire, At: fire},
			wire.Event{Kind: "dead", Tag: key(3).Tag(), ID: "q\"\\\n\t\x01é\ufffd<&>\u2028", Subject: "a.b", Reason: "term: \"no\"",
				FireAt: "2026-12-24T18:00:00.123Z", At: "2026-12-24T18:00:00.123Z"}},
		{"rescheduled", events.Event{Kind: events.Rescheduled, Tag: key(4), Subject: "a", FireAt: fire.Add(time.Hour), PreviousFireAt: fire, At: fire},
			wire.Event{Kind: "rescheduled", Tag: key(4).Tag(), Subject: "a", FireAt: "2026-12-24T19:00:00.123Z",
				PreviousFireAt: "2026-12-24T18:00:00.123Z", At: "2026-12-24T18:00:00.123Z"}},
		{"replayed", events.Event{Kind: events.Replayed, Tag: key(5), Subject: "a", To: "b.c", Attempt: 7, FireAt: fire, At: fire},
			wire.Event{Kind: "replayed", Tag: key(5).Tag(), Subject: "a", To: "b.c", Attempt: 7, FireAt: "2026-12-24T18:00:00.123Z", At: "2026-12-24T18:00:00.123Z"}},
		{"traced", events.Event{Kind: events.Acked, Tag: key(6), Subject: "a", Attempt: 1, FireAt: fire, At: fire,
			TraceID: [16]byte{0x0a, 0xf7, 0x65, 0x19, 0x16, 0xcd, 0x43, 0xdd, 0x84, 0x48, 0xeb, 0x21, 0x1c, 0x80, 0x31, 0x9c}},
			wire.Event{Kind: "acked", Tag: key(6).Tag(), Subject: "a", Attempt: 1, FireAt: "2026-12-24T18:00:00.123Z", At: "2026-12-24T18:00:00.123Z",
				TraceID: "0af7651916cd43dd8448eb211c80319c"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := events.AppendBody(nil, tc.e)
			var got wire.Event
			dec := json.NewDecoder(strings.NewReader(string(b)))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&got); err != nil {
				t.Fatalf("body %s: %v", b, err)
			}
			if got != tc.want {
				t.Errorf("body %s\ndecodes as %+v\nwant       %+v", b, got, tc.want)
			}
			for _, optional := range []string{`"id"`, `"reason"`, `"previous_fire_at"`, `"to"`, `"trace_id"`} {
				field := map[string]string{`"id"`: tc.want.ID, `"reason"`: tc.want.Reason, `"previous_fire_at"`: tc.want.PreviousFireAt, `"to"`: tc.want.To,
					`"trace_id"`: tc.want.TraceID}[optional]
				if field == "" && strings.Contains(string(b), optional+":") {
					t.Errorf("body %s has an empty %s", b, optional)
				}
			}
		})
	}
}

// TestKind_String_WireNames checks that every kind has the wire name
// wire.EventKinds lists, in its order.
func TestKind_String_WireNames(t *testing.T) {
	names := wire.EventKinds()
	for i, name := range names {
		if got := events.Kind(i + 1).String(); got != name {
			t.Errorf("Kind(%d) = %q, want %q", i+1, got, name)
		}
	}
	if s := events.Kind(len(names) + 1).String(); s != "" {
		t.Errorf("a kind past the last is %q", s)
	}
}

// TestPublisher_Emit_DuringClose_DroppedAndCounted checks that every
// event emitted is told or counted: an Emit that finds the Publisher open
// and queues its event only after Close drained the queue for the last
// time counts it as dropped instead of leaving it in the queue, told by
// no counter.
func TestPublisher_Emit_DuringClose_DroppedAndCounted(t *testing.T) {
	g := newGate()
	close(g.open)
	p, err := events.New(g, events.Config{})
	if err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan struct{}), make(chan struct{})
	events.SetBeforeQueue(p, func() {
		close(entered)
		<-release
	})
	emitted := make(chan bool)
	go func() { emitted <- p.Emit(events.Event{Kind: events.Acked, Subject: "orders.new"}) }()
	select {
	case <-entered:
	case <-time.After(wait):
		t.Fatal("Emit did not reach its queue")
	}
	p.Close()
	close(release)
	select {
	case <-emitted:
	case <-time.After(wait):
		t.Fatal("Emit did not return")
	}
	if st := p.Stats(); st.Published+st.Dropped != 1 {
		t.Fatalf("stats = %+v: the event emitted during Close is neither published nor dropped", st)
	}
}

// records is a slog.Handler that keeps the records it is given.
type records struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec.Clone())
	return nil
}
func (r *records) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *records) WithGroup(string) slog.Handler      { return r }

// warnings returns the records logged so far at WARN, and the value of
// "suppressed" on the last of them.
func (r *records) warnings() (n int, suppressed string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rec := range r.recs {
		if rec.Level != slog.LevelWarn {
			continue
		}
		n++
		suppressed = ""
		rec.Attrs(func(a slog.Attr) bool {
			if a.Key == "suppressed" {
				suppressed = a.Value.String()
			}
			return true
		})
	}
	return n, suppressed
}

type refusing struct{}

func (refusing) Publish(string, []byte) error { return errors.New("nats: connection closed") }

// TestPublisher_PublishFails_WarnsOncePerInterval checks that a
// connection refusing events is logged once per interval, with the count
// of failures held back, for as long as it lasts: not once per process
// (an outage after the first would go unseen) and not once per event.
func TestPublisher_PublishFails_WarnsOncePerInterval(t *testing.T) {
	var clock struct {
		sync.Mutex
		now time.Time
	}
	clock.now = time.Date(2026, 12, 24, 18, 0, 0, 0, time.UTC)
	now := func() time.Time {
		clock.Lock()
		defer clock.Unlock()
		return clock.now
	}
	logs := &records{}
	p, err := events.New(refusing{}, events.Config{Now: now, Logger: slog.New(logs)})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	failMany := func(n int) {
		t.Helper()
		want := p.Stats().Failed + uint64(n)
		for range n {
			p.Emit(events.Event{Kind: events.Scheduled, Subject: "a"})
		}
		deadline := time.Now().Add(wait)
		for p.Stats().Failed < want {
			if time.Now().After(deadline) {
				t.Fatalf("stats = %+v, want %d failed", p.Stats(), want)
			}
			runtime.Gosched()
		}
	}
	failMany(5)
	if n, _ := logs.warnings(); n != 1 {
		t.Fatalf("%d warnings after 5 failures in one interval, want 1", n)
	}
	clock.Lock()
	clock.now = clock.now.Add(time.Minute)
	clock.Unlock()
	failMany(3)
	if n, suppressed := logs.warnings(); n != 2 || suppressed != "4" {
		t.Fatalf("%d warnings, the last with %s suppressed, after 3 more failures an interval later: want 2 and 4", n, suppressed)
	}
}
