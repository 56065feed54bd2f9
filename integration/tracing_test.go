package integration_test

import (
	"context"
	"errors"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/natsdelay/natsdelay/bridge"
	"github.com/natsdelay/natsdelay/bridge/client"
	"github.com/natsdelay/natsdelay/bridge/wire"
)

// TestCluster_Failover_TraceSurvives checks that a message's trace context
// is replicated with it: scheduled on one leader, delivered by the next
// after the first is killed, its delivery is still a child of the
// publisher's span and carries the traceparent of its delivery span.
func TestCluster_Failover_TraceSurvives(t *testing.T) {
	const (
		traceID     = "0af7651916cd43dd8448eb211c80319c"
		parentID    = "b7ad6b7169203331"
		traceParent = "00-" + traceID + "-" + parentID + "-01"
	)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	srv := startServer(t)
	nodes := startInProcessClusterWith(t, srv, 3, []bridge.Option{bridge.WithTracerProvider(tp)})
	first := serving(t, nodes)
	nc := connect(t, srv)
	deliveries := subscribe(t, nc, "orders.failover")
	s := scheduleInCluster(t, nc, newMsg("orders.failover", "traced", "Delay", "1h", "Traceparent", traceParent))

	first.kill(t)
	next := serving(t, nodes)
	t.Logf("killed %s; %s leads", first.id, next.id)
	c, err := client.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	checkFor(t, time.Minute, 50*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := c.Fire(ctx, wire.MessageRef{Tag: s.Tag})
		if err != nil && !client.IsRetryable(err) {
			t.Fatalf("FIRE %s: %v", s.Tag, err)
		}
		return err
	})
	var d received
	select {
	case d = <-deliveries:
	case <-time.After(time.Minute):
		t.Fatal("not delivered after the failover")
	}
	var span tracetest.SpanStub
	checkFor(t, time.Minute, 10*time.Millisecond, func() error {
		for _, sp := range exp.GetSpans() {
			if sp.Name == bridge.SpanDeliver {
				span = sp
				return nil
			}
		}
		return errNoSpanYet
	})
	if span.SpanContext.TraceID().String() != traceID || span.Parent.SpanID().String() != parentID {
		t.Errorf("delivery after the failover: span in trace %s, parent %s: want a child of the publisher's span",
			span.SpanContext.TraceID(), span.Parent.SpanID())
	}
	want := "00-" + traceID + "-" + span.SpanContext.SpanID().String() + "-01"
	if got := d.Header.Get(wire.HeaderTraceParent); got != want {
		t.Errorf("delivery's traceparent %q, want %q", got, want)
	}
}

// errNoSpanYet is what a wait for a span says until it ends.
var errNoSpanYet = errors.New("no delivery span yet")
