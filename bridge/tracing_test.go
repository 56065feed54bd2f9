package bridge_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/natsdelay/natsdelay/bridge"
	"github.com/natsdelay/natsdelay/bridge/bridgetest"
	"github.com/natsdelay/natsdelay/bridge/client"
	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/delaystore/pebblestore"
)

// The publisher's span, as an instrumented publisher would send it.
var (
	pubTraceID = trace.TraceID{0x0a, 0xf7, 0x65, 0x19, 0x16, 0xcd, 0x43, 0xdd, 0x84, 0x48, 0xeb, 0x21, 0x1c, 0x80, 0x31, 0x9c}
	pubSpanID  = trace.SpanID{0xb7, 0xad, 0x6b, 0x71, 0x69, 0x20, 0x33, 0x31}
)

const (
	pubTraceParent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	pubTraceState  = "vendor=abc"
)

// tracedService runs a Service that records its spans in the returned
// in-memory exporter, synchronously as each span ends.
func tracedService(t *testing.T, mod func(*bridge.Config)) (*bridgetest.Harness, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return bridgetest.New(t, mod, bridge.WithTracerProvider(tp)), exp
}

// publishTraced schedules payload for subject with the headers h added,
// and returns the tag of the reply.
func publishTraced(t *testing.T, nc *nats.Conn, subject string, h nats.Header, delay string) string {
	t.Helper()
	m := nats.NewMsg("delay." + subject)
	m.Header.Set(wire.HeaderDelay, delay)
	for k, v := range h {
		m.Header[k] = v
	}
	m.Data = []byte("x")
	rep, err := nc.RequestMsg(m, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var body wire.ScheduleReply
	if err := json.Unmarshal(rep.Data, &body); err != nil || body.Tag == "" {
		t.Fatalf("reply %q %v: %v", rep.Data, rep.Header, err)
	}
	return body.Tag
}

// next waits for the next message on sub.
func next(t *testing.T, sub *nats.Subscription) *nats.Msg {
	t.Helper()
	m, err := sub.NextMsg(30 * time.Second)
	if err != nil {
		t.Fatalf("no delivery on %s: %v", sub.Subject, err)
	}
	return m
}

// answer sends body as a request to the delivery's reply subject and
// wants +OK: the answer was applied, and its span ended.
func answer(t *testing.T, nc *nats.Conn, d *nats.Msg, body string) {
	t.Helper()
	rep, err := nc.Request(d.Reply, []byte(body), 30*time.Second)
	if err != nil || string(rep.Data) != wire.ReplyOK {
		t.Fatalf("answer %q: %v, %v", body, rep, err)
	}
}

// spansNamed waits until the exporter holds n spans named name, and
// returns them in the order they ended. A delivery span ends after its
// publish returns, which the subscriber does not wait for.
func spansNamed(t *testing.T, exp *tracetest.InMemoryExporter, name string, n int) []tracetest.SpanStub {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var out []tracetest.SpanStub
		for _, s := range exp.GetSpans() {
			if s.Name == name {
				out = append(out, s)
			}
		}
		if len(out) >= n || time.Now().After(deadline) {
			if len(out) != n {
				t.Fatalf("%d spans named %q, want %d", len(out), name, n)
			}
			return out
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// attrs are a span's attributes by key.
func attrs(s tracetest.SpanStub) map[attribute.Key]attribute.Value {
	m := make(map[attribute.Key]attribute.Value, len(s.Attributes))
	for _, kv := range s.Attributes {
		m[kv.Key] = kv.Value
	}
	return m
}

// traceParentOf is the traceparent a propagator writes for sc.
func traceParentOf(sc trace.SpanContext) string {
	return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-" + sc.TraceFlags().String()
}

// TestTracing_FirstDelivery_ChildOfPublisher checks that a traced publish
// keeps its trace through the delay: the ingest span and the first
// delivery's span are children of the publisher's span, with the
// subject, tag and attempt; the delivery carries the traceparent of its
// own span, lowercase, in place of the publisher's (sent here in another
// case), and the tracestate; and the ACK's span is a child of the
// delivery's.
func TestTracing_FirstDelivery_ChildOfPublisher(t *testing.T) {
	h, exp := tracedService(t, nil)
	sub, err := h.Conn.SubscribeSync("orders.traced")
	if err != nil {
		t.Fatal(err)
	}
	tag := publishTraced(t, h.Conn, "orders.traced", nats.Header{"TraceParent": {pubTraceParent}, "TRACESTATE": {pubTraceState}}, "0s")

	ingest := spansNamed(t, exp, bridge.SpanIngest, 1)[0]
	if ingest.Parent.TraceID() != pubTraceID || ingest.Parent.SpanID() != pubSpanID || ingest.SpanContext.TraceID() != pubTraceID {
		t.Errorf("ingest span's parent %v in trace %v: want the publisher's span", ingest.Parent, ingest.SpanContext.TraceID())
	}
	if a := attrs(ingest); a[bridge.AttrTag].AsString() != tag || a["messaging.destination.name"].AsString() != "orders.traced" {
		t.Errorf("ingest span's attributes %v: want tag %s and the subject", ingest.Attributes, tag)
	}

	d := next(t, sub)
	deliver := spansNamed(t, exp, bridge.SpanDeliver, 1)[0]
	if deliver.Parent.SpanID() != pubSpanID || deliver.SpanContext.TraceID() != pubTraceID || len(deliver.Links) != 0 {
		t.Errorf("first delivery's span: parent %v, trace %v, links %v: want a child of the publisher's span",
			deliver.Parent, deliver.SpanContext.TraceID(), deliver.Links)
	}
	a := attrs(deliver)
	if a[bridge.AttrTag].AsString() != tag || a[bridge.AttrAttempt].AsInt64() != 1 || a["messaging.destination.name"].AsString() != "orders.traced" {
		t.Errorf("delivery span's attributes %v: want tag %s, attempt 1 and the subject", deliver.Attributes, tag)
	}
	if got, want := d.Header[wire.HeaderTraceParent], []string{traceParentOf(deliver.SpanContext)}; len(got) != 1 || got[0] != want[0] {
		t.Errorf("delivery's traceparent %q, want %q, the delivery span's", got, want)
	}
	if got := d.Header[wire.HeaderTraceState]; len(got) != 1 || got[0] != pubTraceState {
		t.Errorf("delivery's tracestate %q, want %q", got, pubTraceState)
	}
	if d.Header["TraceParent"] != nil || d.Header["TRACESTATE"] != nil {
		t.Errorf("the publisher's spellings were delivered too: %v", d.Header)
	}

	answer(t, h.Conn, d, "+ACK")
	ack := spansNamed(t, exp, bridge.SpanAck, 1)[0]
	if ack.Parent.SpanID() != deliver.SpanContext.SpanID() || ack.SpanContext.TraceID() != pubTraceID {
		t.Errorf("ACK span's parent %v: want the delivery's span %v", ack.Parent, deliver.SpanContext.SpanID())
	}
	if a := attrs(ack); a[bridge.AttrAnswer].AsString() != "+ACK" || a[bridge.AttrTag].AsString() != tag || a[bridge.AttrAttempt].AsInt64() != 1 {
		t.Errorf("ACK span's attributes %v", ack.Attributes)
	}
}

// TestTracing_Redelivery_LinkedNotChild checks that a redelivery is the
// root of a trace of its own linked to the publisher's span, carrying
// its own traceparent, and that the -NAK that caused it is recorded.
func TestTracing_Redelivery_LinkedNotChild(t *testing.T) {
	h, exp := tracedService(t, nil)
	sub, err := h.Conn.SubscribeSync("orders.retried")
	if err != nil {
		t.Fatal(err)
	}
	tag := publishTraced(t, h.Conn, "orders.retried", nats.Header{wire.HeaderTraceParent: {pubTraceParent}}, "0s")
	first := next(t, sub)
	answer(t, h.Conn, first, "-NAK")
	second := next(t, sub)
	if second.Header.Get(wire.HeaderAttempt) != "2" {
		t.Fatalf("second delivery's attempt %q", second.Header.Get(wire.HeaderAttempt))
	}
	spans := spansNamed(t, exp, bridge.SpanDeliver, 2)
	re := spans[1]
	if attrs(re)[bridge.AttrAttempt].AsInt64() != 2 || attrs(re)[bridge.AttrTag].AsString() != tag {
		t.Fatalf("second delivery span's attributes %v", re.Attributes)
	}
	if re.Parent.IsValid() || re.SpanContext.TraceID() == pubTraceID {
		t.Errorf("redelivery's span: parent %v in trace %v: want the root of a trace of its own", re.Parent, re.SpanContext.TraceID())
	}
	if len(re.Links) != 1 || re.Links[0].SpanContext.TraceID() != pubTraceID || re.Links[0].SpanContext.SpanID() != pubSpanID {
		t.Errorf("redelivery's links %v: want one, to the publisher's span", re.Links)
	}
	if got := second.Header.Get(wire.HeaderTraceParent); got != traceParentOf(re.SpanContext) {
		t.Errorf("redelivery's traceparent %q, want its span's %q", got, traceParentOf(re.SpanContext))
	}
	if second.Header.Get(wire.HeaderTraceState) != "" {
		t.Errorf("a new trace carries no tracestate: %v", second.Header)
	}
	nak := spansNamed(t, exp, bridge.SpanAck, 1)[0]
	if nak.Parent.SpanID() != spans[0].SpanContext.SpanID() || attrs(nak)[bridge.AttrAnswer].AsString() != "-NAK" {
		t.Errorf("-NAK span: parent %v, attributes %v: want a child of the first delivery's span", nak.Parent, nak.Attributes)
	}
	answer(t, h.Conn, second, "")
	if ack := spansNamed(t, exp, bridge.SpanAck, 2)[1]; ack.Parent.SpanID() != re.SpanContext.SpanID() || attrs(ack)[bridge.AttrAttempt].AsInt64() != 2 {
		t.Errorf("ACK span of the redelivery: parent %v, attributes %v", ack.Parent, ack.Attributes)
	}
}

// TestTracing_Untraced_NoSpansHeadersAsPublished checks that a publish
// without a traceparent is not traced: no span, and its delivery carries
// no traceparent. The service carries a trace, it starts none.
func TestTracing_Untraced_NoSpansHeadersAsPublished(t *testing.T) {
	h, exp := tracedService(t, nil)
	sub, err := h.Conn.SubscribeSync("orders.plain")
	if err != nil {
		t.Fatal(err)
	}
	publishTraced(t, h.Conn, "orders.plain", nats.Header{"X-Other": {"1"}, wire.HeaderTraceState: {pubTraceState}}, "0s")
	d := next(t, sub)
	answer(t, h.Conn, d, "+ACK")
	if spans := exp.GetSpans(); len(spans) != 0 {
		t.Errorf("%d spans of an untraced message: %v", len(spans), spans)
	}
	if d.Header.Get(wire.HeaderTraceParent) != "" || d.Header.Get(wire.HeaderTraceState) != pubTraceState || d.Header.Get("X-Other") != "1" {
		t.Errorf("untraced delivery's headers %v: want them as published", d.Header)
	}
}

// TestTracing_Off_HeadersAsPublished checks that without a tracer
// provider a traced publish is delivered with its headers as published,
// the traceparent in its own spelling included.
func TestTracing_Off_HeadersAsPublished(t *testing.T) {
	h := bridgetest.New(t, nil)
	sub, err := h.Conn.SubscribeSync("orders.off")
	if err != nil {
		t.Fatal(err)
	}
	publishTraced(t, h.Conn, "orders.off", nats.Header{"Traceparent": {pubTraceParent}}, "0s")
	d := next(t, sub)
	if got := d.Header["Traceparent"]; len(got) != 1 || got[0] != pubTraceParent || d.Header[wire.HeaderTraceParent] != nil {
		t.Errorf("headers %v: want the publisher's Traceparent as sent", d.Header)
	}
}

// TestTracing_Restart_TraceSurvivesStorage checks that the trace context
// is kept with the message on disk: a message stored by one service and
// delivered by the next, after a restart, is still a child of the
// publisher's span.
func TestTracing_Restart_TraceSurvivesStorage(t *testing.T) {
	dir := t.TempDir()
	open := func() *pebblestore.Store {
		st, err := pebblestore.Open(pebblestore.Config{Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	srv := bridgetest.RunServer(t)
	nc := bridgetest.Connect(t, srv)
	first := bridgetest.Start(t, srv, open(), nil)
	tag := publishTraced(t, nc, "orders.later", nats.Header{wire.HeaderTraceParent: {pubTraceParent}}, "1h")
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}

	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	bridgetest.Start(t, srv, open(), nil, bridge.WithTracerProvider(tp))
	sub, err := nc.SubscribeSync("orders.later")
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Fire(ctx, wire.MessageRef{Tag: tag}); err != nil {
		t.Fatal(err)
	}
	d := next(t, sub)
	deliver := spansNamed(t, exp, bridge.SpanDeliver, 1)[0]
	if deliver.Parent.SpanID() != pubSpanID || deliver.SpanContext.TraceID() != pubTraceID {
		t.Errorf("delivery after a restart: parent %v in trace %v: want a child of the publisher's span", deliver.Parent, deliver.SpanContext.TraceID())
	}
	if got := d.Header.Get(wire.HeaderTraceParent); got != traceParentOf(deliver.SpanContext) {
		t.Errorf("traceparent %q, want the delivery span's", got)
	}
}

// TestEvents_TraceID_OfThePublish checks that the lifecycle events of a
// traced message (scheduled, rescheduled by FIRE, delivered, acked) carry the trace id of the
// publish, with tracing off as on: it is the message's, kept with it.
func TestEvents_TraceID_OfThePublish(t *testing.T) {
	h := bridgetest.New(t, func(c *bridge.Config) { c.Events = true })
	evs, err := h.Conn.SubscribeSync(wire.DefaultEventPrefix + ".*.orders.evented")
	if err != nil {
		t.Fatal(err)
	}
	sub, err := h.Conn.SubscribeSync("orders.evented")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
	tag := publishTraced(t, h.Conn, "orders.evented", nats.Header{"Traceparent": {pubTraceParent}}, "1h")
	c, err := client.New(h.Conn)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Fire(ctx, wire.MessageRef{Tag: tag}); err != nil {
		t.Fatal(err)
	}
	answer(t, h.Conn, next(t, sub), "+ACK")
	seen := map[string]bool{}
	for len(seen) < 4 {
		var e wire.Event
		if err := json.Unmarshal(next(t, evs).Data, &e); err != nil {
			t.Fatal(err)
		}
		if e.TraceID != pubTraceID.String() {
			t.Errorf("%s event's trace_id %q, want %s", e.Kind, e.TraceID, pubTraceID)
		}
		seen[e.Kind] = true
	}
	for _, k := range []string{wire.EventScheduled, wire.EventRescheduled, wire.EventDelivered, wire.EventAcked} {
		if !seen[k] {
			t.Errorf("no %s event; saw %v", k, seen)
		}
	}
}

// TestTracing_RecurringLaterOccurrence_Linked checks that a recurring
// schedule's first occurrence is a child of the publisher's span and a
// later one the root of a trace of its own linked to it: a schedule that
// runs for months would otherwise grow one trace forever.
func TestTracing_RecurringLaterOccurrence_Linked(t *testing.T) {
	h, exp := tracedService(t, nil)
	sub, err := h.Conn.SubscribeSync("orders.every")
	if err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg("delay.orders.every")
	m.Header.Set(wire.HeaderEvery, "100ms")
	m.Header.Set(wire.HeaderLimit, "2")
	m.Header.Set(wire.HeaderTraceParent, pubTraceParent)
	if rep, err := h.Conn.RequestMsg(m, 30*time.Second); err != nil || rep.Header.Get(wire.HeaderServiceError) != "" {
		t.Fatalf("schedule: %v %v", rep, err)
	}
	first, second := next(t, sub), next(t, sub)
	answer(t, h.Conn, first, "+ACK")
	answer(t, h.Conn, second, "+ACK")
	byTag := map[string]tracetest.SpanStub{}
	for _, s := range spansNamed(t, exp, bridge.SpanDeliver, 2) {
		byTag[attrs(s)[bridge.AttrTag].AsString()] = s
	}
	one, two := byTag[first.Header.Get(wire.HeaderTag)], byTag[second.Header.Get(wire.HeaderTag)]
	if one.Parent.SpanID() != pubSpanID || len(one.Links) != 0 {
		t.Errorf("first occurrence: parent %v, links %v: want a child of the publisher's span", one.Parent, one.Links)
	}
	if two.Parent.IsValid() || two.SpanContext.TraceID() == pubTraceID || len(two.Links) != 1 || two.Links[0].SpanContext.SpanID() != pubSpanID {
		t.Errorf("second occurrence: parent %v in trace %v, links %v: want a trace of its own linked to the publisher's span",
			two.Parent, two.SpanContext.TraceID(), two.Links)
	}
	if attrs(two)[bridge.AttrAttempt].AsInt64() != 1 {
		t.Errorf("second occurrence's attempt %v, want 1: it is a message of its own", attrs(two)[bridge.AttrAttempt])
	}
}
