package integration_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/natsdelay/natsdelay/bridge"
	"github.com/natsdelay/natsdelay/bridge/bridgetest"
	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/delaystore/pebblestore"
)

// eventHarness is a service with lifecycle events on, over a Pebble store
// on disk, and a subscription to every event.
type eventHarness struct {
	*harness
	events <-chan received
	start  time.Time
}

func newEventHarness(t *testing.T, mod func(*bridge.Config), opts ...bridge.Option) *eventHarness {
	t.Helper()
	st := openPebble(t, pebblestore.Config{Dir: t.TempDir()})
	h := bridgetest.NewOn(t, st, func(c *bridge.Config) {
		c.Events = true
		if mod != nil {
			mod(c)
		}
	}, opts...)
	eh := &eventHarness{harness: &harness{srv: h.Server, svc: h.Service, nc: h.Conn}, start: time.Now()}
	eh.events = subscribe(t, connect(t, h.Server), wire.DefaultEventPrefix+".>")
	return eh
}

// wantEvent is an event a test expects: its kind and the fields that are
// not the message's own (which every event of a message shares).
type wantEvent struct {
	kind    string
	attempt uint32
	reason  string
}

// expectEvents reads len(want) events about the message s, in any order
// (a delivery is told once its flush returns, which its ACK may beat),
// and checks each against the documented body: the subject
// $DELAY.EVENT.<kind>.<subject>, exactly the fields of wire.Event, the
// message's tag, id, subject and fire time as its ingest reply gave them,
// the attempt and reason wanted, and a time it happened between the
// test's start and now, and for a delivery never before the fire time.
func (h *eventHarness) expectEvents(t *testing.T, s scheduled, id string, want ...wantEvent) {
	t.Helper()
	left := append([]wantEvent(nil), want...)
	for range want {
		r := next(t, h.events, fmt.Sprintf("events of %s (still %v)", s.Subject, left))
		var e wire.Event
		dec := json.NewDecoder(bytes.NewReader(r.Data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&e); err != nil {
			t.Fatalf("event on %s: body %s: %v", r.Subject, r.Data, err)
		}
		if wantSubj := wire.DefaultEventPrefix + "." + e.Kind + "." + s.Subject; r.Subject != wantSubj {
			t.Errorf("event %s on %s, want on %s", r.Data, r.Subject, wantSubj)
		}
		if e.Tag != s.Tag || e.ID != id || e.Subject != s.Subject || e.FireAt != s.FireAtRaw {
			t.Errorf("event %s: want tag %s, id %q, subject %s, fire_at %s", r.Data, s.Tag, id, s.Subject, s.FireAtRaw)
		}
		at := parseTime(t, e.At)
		if at.Before(h.start.Truncate(time.Millisecond)) || at.After(time.Now()) {
			t.Errorf("event %s: at %s is not between the test's start %s and now", r.Data, e.At, h.start.Format(wire.TimeLayout))
		}
		if e.Kind == wire.EventDelivered && at.Before(s.FireAt) {
			t.Errorf("event %s: delivered before its fire time", r.Data)
		}
		i := 0
		for i < len(left) && (left[i].kind != e.Kind || left[i].attempt != e.Attempt || left[i].reason != e.Reason) {
			i++
		}
		if i == len(left) {
			t.Fatalf("event %s: not one of those still expected, %+v", r.Data, left)
		}
		left = append(left[:i], left[i+1:]...)
	}
}

// quietEvents fails t if any event arrives within d: an observation window
// for "no more events than those expected".
func (h *eventHarness) quietEvents(t *testing.T, d time.Duration) {
	t.Helper()
	quiet(t, h.events, d, "lifecycle events")
}

// TestEvents_EachKind_DocumentedBody checks that with --events each thing
// that happens to a message through the real service (real NATS, a store
// on disk) is published once, on $DELAY.EVENT.<kind>.<subject>, with the
// body docs/protocol.md documents: scheduled, delivered, acked, nak,
// term, dead (after a +TERM, and at Delay-Max-Deliver), expired and
// canceled.
func TestEvents_EachKind_DocumentedBody(t *testing.T) {
	t.Run("scheduled delivered nak acked", func(t *testing.T) {
		h := newEventHarness(t, nil)
		deliveries := subscribe(t, h.nc, "ev.ack")
		s := schedule(t, h.nc, newMsg("ev.ack", "x", "Delay-Id", "order-1"))
		m := next(t, deliveries, "delivery 1")
		notEarly(t, m, s.FireAt)
		ackSync(t, h.nc, m.Msg, "-NAK")
		m = next(t, deliveries, "delivery 2")
		wantAttempt(t, m.Msg, 2)
		ackSync(t, h.nc, m.Msg, "+ACK")
		h.expectEvents(t, s, "order-1",
			wantEvent{kind: "scheduled"}, wantEvent{kind: "delivered", attempt: 1}, wantEvent{kind: "nak", attempt: 1},
			wantEvent{kind: "delivered", attempt: 2}, wantEvent{kind: "acked", attempt: 2})
		h.quietEvents(t, 200*time.Millisecond)
	})
	t.Run("term dead", func(t *testing.T) {
		h := newEventHarness(t, func(c *bridge.Config) { c.Delivery.DeadLetterSubject = "dlq.ev" })
		deliveries := subscribe(t, h.nc, "ev.term")
		dead := subscribe(t, h.nc, "dlq.ev")
		s := schedule(t, h.nc, newMsg("ev.term", "x"))
		ackSync(t, h.nc, next(t, deliveries, "delivery").Msg, "+TERM not mine")
		next(t, dead, "dead letter")
		h.expectEvents(t, s, "",
			wantEvent{kind: "scheduled"}, wantEvent{kind: "delivered", attempt: 1},
			wantEvent{kind: "term", attempt: 1, reason: "not mine"}, wantEvent{kind: "dead", attempt: 1, reason: "term: not mine"})
		h.quietEvents(t, 200*time.Millisecond)
	})
	t.Run("max deliver dead", func(t *testing.T) {
		h := newEventHarness(t, func(c *bridge.Config) { c.Delivery.AckWait = 200 * time.Millisecond })
		deliveries := subscribe(t, h.nc, "ev.max")
		s := schedule(t, h.nc, newMsg("ev.max", "x", "Delay-Max-Deliver", "1", "Delay-Id", "m"))
		next(t, deliveries, "delivery") // never answered
		waitGone(t, h.nc, s.Key)
		h.expectEvents(t, s, "m",
			wantEvent{kind: "scheduled"}, wantEvent{kind: "delivered", attempt: 1}, wantEvent{kind: "dead", attempt: 1, reason: "max-deliver"})
		h.quietEvents(t, 200*time.Millisecond)
	})
	t.Run("expired", func(t *testing.T) {
		h := newEventHarness(t, func(c *bridge.Config) { c.Expiry.Interval = 20 * time.Millisecond })
		// NB: nobody subscribes, so it stays pending until its TTL passes.
		s := schedule(t, h.nc, newMsg("ev.ttl", "x", "Delay-TTL", "100ms"))
		waitGone(t, h.nc, s.Key)
		h.expectEvents(t, s, "", wantEvent{kind: "scheduled"}, wantEvent{kind: "expired"})
		h.quietEvents(t, 200*time.Millisecond)
	})
	t.Run("canceled", func(t *testing.T) {
		h := newEventHarness(t, nil)
		s := schedule(t, h.nc, newMsg("ev.cancel", "x", "Delay", "1h", "Delay-Id", "c-1"))
		var r cancelReply
		apiCall(t, h.nc, wire.VerbCancel, wire.MessageRef{Subject: "ev.cancel", ID: "c-1"}, &r)
		if !r.Canceled {
			t.Fatal("CANCEL: not canceled")
		}
		h.expectEvents(t, s, "c-1", wantEvent{kind: "scheduled"}, wantEvent{kind: "canceled"})
		h.quietEvents(t, 200*time.Millisecond)
	})
}

// TestEvents_Off_NonePublished checks that without --events (the
// default) the service publishes no event at all, whatever happens to
// its messages, and has no event publisher.
func TestEvents_Off_NonePublished(t *testing.T) {
	h := newHarness(t, func(c *bridge.Config) { c.Delivery.DeadLetterSubject = "dlq.off" })
	if h.svc.Events() != nil {
		t.Fatal("events off, yet the service has an event publisher")
	}
	events := subscribe(t, connect(t, h.srv), ">")
	deliveries := subscribe(t, h.nc, "off.x")
	s := schedule(t, h.nc, newMsg("off.x", "x"))
	ackSync(t, h.nc, next(t, deliveries, "delivery").Msg, "-NAK")
	ackSync(t, h.nc, next(t, deliveries, "redelivery").Msg, "+TERM")
	waitGone(t, h.nc, s.Key)
	c := schedule(t, h.nc, newMsg("off.y", "x", "Delay", "1h"))
	cancelTag(t, h.nc, c.Tag)
	deadline := time.After(300 * time.Millisecond)
	for {
		select {
		case r := <-events:
			if strings.HasPrefix(r.Subject, wire.DefaultEventPrefix) {
				t.Fatalf("events off, yet %s was published: %s", r.Subject, r.Data)
			}
		case <-deadline:
			return
		}
	}
}

// TestEvents_SlowSubscriber_DeliveryGoesOn checks that events never hold
// delivery up: with a subscriber to every event that takes none (its
// handler is stuck, its client drops what does not fit), every message is
// delivered and ACKed all the same; the stuck subscriber lost events
// rather than slowing anything, and on the service's side every event is
// accounted for, published or counted as dropped in the metric, with a
// queue far smaller than the burst.
func TestEvents_SlowSubscriber_DeliveryGoesOn(t *testing.T) {
	const n = 500
	reg := prometheus.NewRegistry()
	h := newEventHarness(t, func(c *bridge.Config) { c.EventBuffer = 16 }, bridge.WithRegisterer(reg))
	// Its client tells of the events it drops as a slow consumer: that
	// is the test's point, so it is counted here, not printed as an
	// error, and any other asynchronous error still fails the test.
	var slowNotices atomic.Int64
	other := make(chan error, 1)
	slow := bridgetest.Connect(t, h.srv, nats.MaxReconnects(0), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrSlowConsumer) {
			slowNotices.Add(1)
			return
		}
		select {
		case other <- err:
		default:
		}
	}))
	stuck := make(chan struct{})
	defer close(stuck)
	sub, err := slow.Subscribe(wire.DefaultEventPrefix+".>", func(*nats.Msg) { <-stuck })
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.SetPendingLimits(10, 1<<20); err != nil {
		t.Fatal(err)
	}
	if err := slow.Flush(); err != nil {
		t.Fatal(err)
	}
	var acked atomic.Int64
	consumer := connect(t, h.srv)
	if _, err := consumer.Subscribe("slow.ev", func(m *nats.Msg) {
		if m.Respond([]byte("+ACK")) == nil {
			acked.Add(1)
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := consumer.Flush(); err != nil {
		t.Fatal(err)
	}
	msgs := make([]*nats.Msg, n)
	for i := range msgs {
		msgs[i] = newMsg("slow.ev", "x")
	}
	scheduleMany(t, h.nc, msgs)
	waitProgress(t, wait, n, func() int { return int(h.svc.Stats().Acked) }, "ACKs applied")
	dropped, err := sub.Dropped()
	if err != nil {
		t.Fatal(err)
	}
	if dropped == 0 {
		t.Errorf("the stuck subscriber dropped no event of %d", 3*n)
	}
	select {
	case err := <-other:
		t.Errorf("the stuck subscriber's connection: %v", err)
	default:
	}
	checkFor(t, wait, 10*time.Millisecond, func() error {
		st := h.svc.Events().Stats()
		if got := st.Published + st.Dropped; got != 3*n {
			return fmt.Errorf("published %d + dropped %d = %d events, want scheduled, delivered and acked of %d messages", st.Published, st.Dropped, got, n)
		}
		return nil
	})
	st := h.svc.Events().Stats()
	t.Logf("events: published %d, dropped %d; the stuck subscriber dropped %d (%d slow-consumer notices)", st.Published, st.Dropped, dropped, slowNotices.Load())
	if got := gathered(t, reg, "natsdelay_events_dropped_total", "reason", "full"); got != float64(st.Dropped) {
		t.Errorf("natsdelay_events_dropped_total{reason=full} = %v, want %d", got, st.Dropped)
	}
	if got := gathered(t, reg, "natsdelay_events_published_total", "", ""); got != float64(st.Published) {
		t.Errorf("natsdelay_events_published_total = %v, want %d", got, st.Published)
	}
}

// gathered is the value of the metric name (with label=value, when label
// is set) in reg.
func gathered(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			match := label == ""
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					match = true
				}
			}
			if match {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no metric %s{%s=%q}", name, label, value)
	return 0
}
