package bridge

import (
	"context"
	"strconv"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/test"
	"github.com/nats-io/nats.go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/keys"
)

// BenchmarkDeliverPath_Tracing is the publisher's work for one delivery,
// as BenchmarkDeliver, with tracing off (the default) and on, for a
// message published with and without a traceparent. Off must allocate
// what it did before tracing existed.
func BenchmarkDeliverPath_Tracing(b *testing.B) {
	opts := natsserver.DefaultTestOptions
	opts.Port = -1
	srv := natsserver.RunServer(&opts)
	defer srv.Shutdown()
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	for _, tc := range []struct {
		name       string
		on, traced bool
	}{{"off/untraced", false, false}, {"off/traced", false, true}, {"on/untraced", true, false}, {"on/traced", true, true}} {
		b.Run(tc.name, func(b *testing.B) {
			p := newPublisher(nc, wire.DefaultAckPrefix, DefaultMaxControlLine)
			if tc.on {
				tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sdktrace.NewSimpleSpanProcessor(tracetest.NewNoopExporter())))
				defer func() { _ = tp.Shutdown(context.Background()) }()
				p.tracer = newTracer(tp, 1024)
			}
			now := time.Now().UnixNano()
			msg := &delaystore.StoredMessage{
				Subject: "orders.eu.1234", Payload: make([]byte, 256), EnqueuedAtNs: now, FireAtNs: now,
				Headers: []*delaystore.Header{{Name: "Bench-Fire-At", Values: []string{strconv.FormatInt(now, 10)}}},
			}
			if tc.traced {
				msg.Headers = append(msg.Headers, &delaystore.Header{Name: wire.HeaderTraceParent,
					Values: []string{"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}})
			}
			k := keys.New(uint64(now), 1, 7)
			b.ReportAllocs()
			for b.Loop() {
				if err := p.Deliver(k, msg, 1); err != nil {
					b.Fatal(err)
				}
			}
			if err := nc.Flush(); err != nil {
				b.Fatal(err)
			}
		})
	}
}
