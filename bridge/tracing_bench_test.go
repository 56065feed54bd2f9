package bridge_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/natsdelay/natsdelay/bridge"
	"github.com/natsdelay/natsdelay/bridge/bridgetest"
	"github.com/natsdelay/natsdelay/bridge/wire"
)

// ingestRequest is a publish to the ingest endpoint without a reply
// subject, as a benchmark hands it to the handler.
type ingestRequest struct {
	subject string
	h       micro.Headers
	data    []byte
}

func (r *ingestRequest) Respond([]byte, ...micro.RespondOpt) error               { return nil }
func (r *ingestRequest) RespondJSON(any, ...micro.RespondOpt) error              { return nil }
func (r *ingestRequest) Error(string, string, []byte, ...micro.RespondOpt) error { return nil }
func (r *ingestRequest) Data() []byte                                            { return r.data }
func (r *ingestRequest) Headers() micro.Headers                                  { return r.h }
func (r *ingestRequest) Subject() string                                         { return r.subject }
func (r *ingestRequest) Reply() string                                           { return "" }

// BenchmarkIngestPath_Tracing is the ingest path of one message, the
// handler and its share of the group commit on an in-memory store, with
// tracing off (no tracer provider: the default), and on for a publish
// with and without a traceparent. Off must allocate what it did before
// tracing existed.
func BenchmarkIngestPath_Tracing(b *testing.B) {
	for _, tc := range []struct {
		name   string
		on     bool
		traced bool
	}{{"off/untraced", false, false}, {"off/traced", false, true}, {"on/untraced", true, false}, {"on/traced", true, true}} {
		b.Run(tc.name, func(b *testing.B) {
			var opts []bridge.Option
			if tc.on {
				tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sdktrace.NewSimpleSpanProcessor(tracetest.NewNoopExporter())))
				b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
				opts = append(opts, bridge.WithTracerProvider(tp))
			}
			h := bridgetest.New(b, nil, opts...)
			handle := bridge.IngestHandler(h.Service)
			hdr := nats.Header{wire.HeaderDelay: {"1h"}, "Bench-Id": {"7"}}
			if tc.traced {
				hdr[wire.HeaderTraceParent] = []string{pubTraceParent}
			}
			req := &ingestRequest{subject: "delay.orders.eu.1234", h: micro.Headers(hdr), data: make([]byte, 256)}
			before := bridge.Pending(h.Service)
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				handle(req)
				n++
			}
			// The commits are part of the path: wait for them.
			deadline := time.Now().Add(30 * time.Second)
			for bridge.Pending(h.Service) < before+uint64(n) {
				if time.Now().After(deadline) {
					b.Fatalf("%d of %d committed", bridge.Pending(h.Service)-before, n)
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
}
