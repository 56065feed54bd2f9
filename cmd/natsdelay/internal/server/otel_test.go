package server

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge"
	"github.com/natsdelay/natsdelay/bridge/wire"
)

// TestServer_OTel_ExportsAndFlushesOnClose checks Options.OTel end to
// end: the exporter is configured by the standard OTEL_EXPORTER_OTLP_*
// variables alone (here the endpoint of a collector stand-in), a traced
// publish is recorded, and Close flushes the spans still queued (the
// batch would wait 5 s): the ingest span reaches the collector before
// Close returns.
func TestServer_OTel_ExportsAndFlushesOnClose(t *testing.T) {
	var mu sync.Mutex
	var bodies [][]byte
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.URL.Path == "/v1/traces" {
			mu.Lock()
			bodies = append(bodies, b)
			mu.Unlock()
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer collector.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "60000") // only the flush at Close exports

	srv := openTraced(t)
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	var all []byte
	for _, b := range bodies {
		all = append(all, b...)
	}
	// The export is protobuf, in which strings are their bytes.
	for _, want := range []string{bridge.SpanIngest, "natsdelay", "orders.otel"} {
		if !bytes.Contains(all, []byte(want)) {
			t.Errorf("the collector got %d exports without %q", len(bodies), want)
		}
	}
	traceID := []byte{0x0a, 0xf7, 0x65, 0x19, 0x16, 0xcd, 0x43, 0xdd, 0x84, 0x48, 0xeb, 0x21, 0x1c, 0x80, 0x31, 0x9c}
	if !bytes.Contains(all, traceID) {
		t.Errorf("the exported span is not in the publisher's trace")
	}
}

// TestServer_OTel_CollectorHangsAtClose_StopSucceeds checks that spans
// the collector does not take within the stop's flush are logged and
// dropped, as a failed export is while serving, and do not make the stop
// fail: a collector that hung when natsdelay stopped made `serve` exit 1
// after a stop that lost no message.
func TestServer_OTel_CollectorHangsAtClose_StopSucceeds(t *testing.T) {
	asked := make(chan struct{}, 1)
	release := make(chan struct{})
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case asked <- struct{}{}:
		default:
		}
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer collector.Close()
	defer close(release)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "60000") // only the flush at Close exports
	defer func(wait time.Duration) { otelShutdownWait = wait }(otelShutdownWait)
	otelShutdownWait = 200 * time.Millisecond

	srv := openTraced(t)
	if err := srv.Close(); err != nil {
		t.Fatalf("a stop whose span flush the collector did not take: %v", err)
	}
	select {
	case <-asked:
	default:
		t.Fatal("the collector was never asked: the test did not reach the flush it checks")
	}
}

// openTraced opens a server with tracing on and schedules one message
// whose publish carries a trace context.
func openTraced(t *testing.T) *Server {
	t.Helper()
	srv, err := Open(t.Context(), Options{Engine: "memory", NATSListen: "127.0.0.1:0", OTel: true})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	m := nats.NewMsg(wire.DefaultIngestPrefix + ".orders.otel")
	m.Header.Set(wire.HeaderDelay, "1h")
	m.Header.Set(wire.HeaderTraceParent, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	if rep, err := nc.RequestMsg(m, 30*time.Second); err != nil || rep.Header.Get(wire.HeaderServiceError) != "" {
		t.Fatalf("schedule: %v %v", rep, err)
	}
	return srv
}
