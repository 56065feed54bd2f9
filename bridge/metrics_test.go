package bridge_test

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/natsdelay/natsdelay/bridge"
)

// TestService_Metrics_MoveWithMessages checks that the metrics follow what
// happens: a scheduled, delivered and ACKed message moves the counters, the
// commit and lateness histograms, and an invalid request counts as invalid.
func TestService_Metrics_MoveWithMessages(t *testing.T) {
	reg := prometheus.NewRegistry()
	svc, nc := startService(t, nil, bridge.WithRegisterer(reg))
	got := make(chan *nats.Msg, 1)
	sub, _ := nc.ChanSubscribe("m.x", got)
	defer sub.Unsubscribe()
	if _, err := nc.Request("delay.m.x", []byte("hi"), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	bad := nats.NewMsg("delay.m.x")
	bad.Header.Set("Delay", "nope")
	if _, err := nc.RequestMsg(bad, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-got:
		if _, err := nc.Request(m.Reply, nil, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("not delivered")
	}
	// A delivery counts once the flush after it comes back, which may be
	// after its ACK.
	for deadline := time.Now().Add(10 * time.Second); svc.Stats().Delivered == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the delivery was not counted")
		}
	}
	want := `
# HELP natsdelay_ingest_requests_total Ingest messages by result: ok (stored), duplicate (a resend within the duplicate window, answered with the first reply), invalid (400) or unavailable (503).
# TYPE natsdelay_ingest_requests_total counter
natsdelay_ingest_requests_total{result="invalid"} 1
natsdelay_ingest_requests_total{result="ok"} 1
# HELP natsdelay_messages_acked_total ACKs that settled a pending message.
# TYPE natsdelay_messages_acked_total counter
natsdelay_messages_acked_total 1
# HELP natsdelay_messages_delivered_total First deliveries that reached a subscriber (bounces are in no_responders_total).
# TYPE natsdelay_messages_delivered_total counter
natsdelay_messages_delivered_total 1
# HELP natsdelay_messages_pending Messages stored and not yet settled.
# TYPE natsdelay_messages_pending gauge
natsdelay_messages_pending 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"natsdelay_ingest_requests_total", "natsdelay_messages_acked_total", "natsdelay_messages_delivered_total", "natsdelay_messages_pending"); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	observed := map[string]uint64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			if h := m.GetHistogram(); h != nil {
				observed[f.GetName()] += h.GetSampleCount()
			}
		}
	}
	for _, h := range []string{"natsdelay_commit_batch_size", "natsdelay_commit_duration_seconds", "natsdelay_fire_lateness_seconds"} {
		if observed[h] == 0 {
			t.Errorf("%s has no observations (histograms seen: %v)", h, observed)
		}
	}
}
