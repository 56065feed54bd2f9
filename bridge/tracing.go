package bridge

import (
	"context"
	"errors"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/dispatch"
	"github.com/natsdelay/natsdelay/keys"
)

// The names of the spans the service records, and of its attributes
// beside OpenTelemetry's messaging conventions. A span's name is fixed,
// whatever the subject, so that it says what was done: the subject is
// an attribute.
const (
	// SpanIngest is a publish to the ingest prefix, from its receipt to
	// its commit: a child of the publisher's span.
	SpanIngest = "natsdelay ingest"
	// SpanDeliver is one delivery attempt: the first a child of the
	// publisher's span, any later one (a redelivery, or a later
	// occurrence of a recurring schedule) the root of a trace of its own,
	// linked to the publisher's span.
	SpanDeliver = "natsdelay deliver"
	// SpanAck is a consumer's answer to a traced delivery, from its
	// receipt until it is applied: a child of the delivery's span.
	SpanAck = "natsdelay ack"

	// AttrTag is the delivery tag; AttrAttempt the delivery attempt, 1
	// for the first; AttrAnswer the consumer's answer (+ACK, -NAK 5s,
	// +TERM, ...); AttrDuplicate is set on an ingest span that was a
	// resend within the duplicate window, which stored nothing.
	AttrTag       = "natsdelay.tag"
	AttrAttempt   = "natsdelay.attempt"
	AttrAnswer    = "natsdelay.answer"
	AttrDuplicate = "natsdelay.duplicate"
)

// OpenTelemetry's messaging attributes, as its semantic conventions name
// them.
const (
	attrSystem      = "messaging.system"
	attrDestination = "messaging.destination.name"
	attrOperation   = "messaging.operation.type"
)

// tracer records the spans of traced messages: those whose publish
// carried a W3C traceparent. A message without one is not traced: the
// service carries a trace through the delay, it starts none. A Service
// without tracing has a nil *tracer, and each path that would record a
// span checks that pointer and does nothing more.
//
// It is safe for concurrent use.
type tracer struct {
	t    trace.Tracer
	prop propagation.TraceContext

	// mu guards flights: the span of the last traced delivery of each
	// key, so that the answer to it is recorded as its child. Bounded by
	// maxFlights: past it one entry is forgotten for each added, and the
	// answer to a forgotten delivery records no span. Entries go when an
	// answer settles the message or it is dead-lettered; one whose
	// message ended otherwise (expired, canceled, moved) stays until
	// pushed out.
	mu         sync.Mutex
	flights    map[keys.Key]deliverySpan
	maxFlights int
}

// deliverySpan is what the answer to a traced delivery needs of it.
type deliverySpan struct {
	sc      trace.SpanContext
	subject string
	attempt uint32
}

// newTracer records spans through tp; maxFlights bounds the deliveries
// it remembers for their answers' spans.
func newTracer(tp trace.TracerProvider, maxFlights int) *tracer {
	return &tracer{
		t:          tp.Tracer("github.com/natsdelay/natsdelay/bridge"),
		flights:    make(map[keys.Key]deliverySpan),
		maxFlights: maxFlights,
	}
}

// headerCarrier reads a NATS header for the propagator with names
// matched in any case, as W3C Trace Context asks of HTTP, and writes the
// names as given (lowercase): nats.go's Header is case-sensitive, and a
// consumer's propagator looks for "traceparent".
type headerCarrier nats.Header

func (c headerCarrier) Get(name string) string {
	if v := c[name]; len(v) > 0 {
		return v[0]
	}
	for k, v := range c {
		if len(v) > 0 && strings.EqualFold(k, name) {
			return v[0]
		}
	}
	return ""
}

// Set replaces every header named name in any case with one of value.
func (c headerCarrier) Set(name, value string) {
	dropHeader(nats.Header(c), name)
	c[name] = []string{value}
}

// dropHeader deletes from h every header named name in any case.
func dropHeader(h nats.Header, name string) {
	for k := range h {
		if strings.EqualFold(k, name) {
			delete(h, k)
		}
	}
}

func (c headerCarrier) Keys() []string {
	out := make([]string, 0, len(c))
	for k := range c {
		out = append(out, k)
	}
	return out
}

// storedCarrier reads a stored message's headers for the propagator,
// names matched in any case.
type storedCarrier []*delaystore.Header

func (c storedCarrier) Get(name string) string {
	for _, h := range c {
		if len(h.Values) > 0 && strings.EqualFold(h.Name, name) {
			return h.Values[0]
		}
	}
	return ""
}

// Set is not used: stored headers are only read.
func (c storedCarrier) Set(string, string) {}

func (c storedCarrier) Keys() []string {
	out := make([]string, 0, len(c))
	for _, h := range c {
		out = append(out, h.Name)
	}
	return out
}

// remote is the publisher's span context that c carries; not valid when
// it carries none, or one that W3C Trace Context does not accept.
func (t *tracer) remote(c propagation.TextMapCarrier) trace.SpanContext {
	return trace.SpanContextFromContext(t.prop.Extract(context.Background(), c))
}

// ingest starts the span of a publish to subject with the headers h, or
// returns nil when h carries no trace context.
func (t *tracer) ingest(h nats.Header, subject string) trace.Span {
	parent := t.remote(headerCarrier(h))
	if !parent.IsValid() {
		return nil
	}
	_, span := t.t.Start(trace.ContextWithRemoteSpanContext(context.Background(), parent), SpanIngest,
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(attribute.String(attrSystem, "nats"), attribute.String(attrDestination, subject),
			attribute.String(attrOperation, "receive")))
	return span
}

// endIngest ends an ingest span with what the commit gave: the tag, or
// the error the publisher was answered with.
func endIngest(span trace.Span, res delaystore.Outcome, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	} else {
		span.SetAttributes(attribute.String(AttrTag, res.Key.Tag()))
		if res.Duplicate {
			span.SetAttributes(attribute.Bool(AttrDuplicate, true))
		}
	}
	span.End()
}

// deliver starts the span of attempt number attempt of msg, stored under
// key, and puts its trace context in h, the delivery's header, in place
// of the publisher's. It returns nil, and leaves h as it is, when msg
// carries no trace context.
//
// The first delivery of a message is a child of the publisher's span, as
// the publisher asked for it. A redelivery, or a later occurrence of a
// recurring schedule, is the root of a trace of its own with a link to
// the publisher's span: it may come long after, and as a child it would
// stretch the publisher's trace over every retry and every occurrence.
func (t *tracer) deliver(h nats.Header, key keys.Key, msg *delaystore.StoredMessage, attempt uint32) trace.Span {
	parent := t.remote(storedCarrier(msg.Headers))
	if !parent.IsValid() {
		return nil
	}
	opts := []trace.SpanStartOption{
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(attribute.String(attrSystem, "nats"), attribute.String(attrDestination, msg.Subject),
			attribute.String(attrOperation, "send"), attribute.String(AttrTag, key.Tag()), attribute.Int64(AttrAttempt, int64(attempt))),
	}
	ctx := context.Background()
	if attempt <= 1 && msg.GetRecurrence().GetSeq() <= 1 {
		ctx = trace.ContextWithRemoteSpanContext(ctx, parent)
	} else {
		opts = append(opts, trace.WithNewRoot(), trace.WithLinks(trace.Link{SpanContext: parent}))
	}
	ctx, span := t.t.Start(ctx, SpanDeliver, opts...)
	// NB: the stored names are the publisher's, in any case; the
	// delivery carries one lowercase traceparent, and a tracestate only
	// if the span has one.
	dropHeader(h, wire.HeaderTraceParent)
	dropHeader(h, wire.HeaderTraceState)
	t.prop.Inject(ctx, headerCarrier(h))
	t.remember(key, span.SpanContext(), msg, attempt)
	return span
}

// delivered ends a delivery span with the publish's outcome; one that
// did not go out is forgotten.
func (t *tracer) delivered(span trace.Span, key keys.Key, err error) {
	if err != nil {
		t.forget(key)
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// remember keeps the span of key's delivery for the answer to it. NB:
// before the publish, as a consumer may answer before Deliver returns.
func (t *tracer) remember(key keys.Key, sc trace.SpanContext, msg *delaystore.StoredMessage, attempt uint32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.flights[key]; !ok && len(t.flights) >= t.maxFlights {
		for k := range t.flights {
			delete(t.flights, k)
			break
		}
	}
	// The subject is cloned: msg is the dispatcher's, which may reuse
	// what it holds.
	t.flights[key] = deliverySpan{sc: sc, subject: strings.Clone(msg.Subject), attempt: attempt}
}

// forget drops what is remembered of key's delivery: its message ended
// with no answer to come.
func (t *tracer) forget(key keys.Key) {
	t.mu.Lock()
	delete(t.flights, key)
	t.mu.Unlock()
}

// answer starts the span of the answer a to the delivery key, a child of
// the delivery's span, and returns the func that ends it once the answer
// is applied, with the error it got. It returns nil when the delivery
// was not traced, or is not remembered: one of an earlier process, or
// pushed out.
func (t *tracer) answer(key keys.Key, a dispatch.Ack) func(error) {
	t.mu.Lock()
	d, ok := t.flights[key]
	if ok && (a.Kind == dispatch.AckDone || a.Kind == dispatch.AckTerm) {
		delete(t.flights, key)
	}
	t.mu.Unlock()
	if !ok {
		return nil
	}
	_, span := t.t.Start(trace.ContextWithSpanContext(context.Background(), d.sc), SpanAck,
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(attribute.String(attrSystem, "nats"), attribute.String(attrDestination, d.subject),
			attribute.String(attrOperation, "settle"), attribute.String(AttrTag, key.Tag()),
			attribute.Int64(AttrAttempt, int64(d.attempt)), attribute.String(AttrAnswer, a.String())))
	return func(err error) {
		// An answer to a delivery settled already is a harmless no-op.
		if err != nil && !errors.Is(err, dispatch.ErrUnknownTag) && !errors.Is(err, dispatch.ErrNotInFlight) {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
}

// thenDone is done (which may be nil) with end called first.
func thenDone(end, done func(error)) func(error) {
	return func(err error) {
		end(err)
		if done != nil {
			done(err)
		}
	}
}
