package bridge_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/natsdelay/natsdelay/bridge"
	"github.com/natsdelay/natsdelay/bridge/wire"
)

// TestWriter_BatchBytesBounded checks the bound on a group commit's bytes:
// with MaxBatchBytes 10,000 and 40 publishers of 4 KiB each at once, every
// message is acknowledged, and no commit holds more than two of them
// (natsdelay_commit_batch_size never exceeds 2), where the message bound
// alone would let one commit take all 40.
func TestWriter_BatchBytesBounded(t *testing.T) {
	reg := prometheus.NewRegistry()
	_, nc := startService(t, func(c *bridge.Config) {
		c.MaxBatchBytes = 10_000
	}, bridge.WithRegisterer(reg))
	payload := make([]byte, 4<<10)
	calls := make([]*nats.Msg, 40)
	replies := make(chan *nats.Msg, len(calls))
	inbox := nats.NewInbox()
	sub, err := nc.ChanSubscribe(inbox, replies)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	for i := range calls {
		m := nats.NewMsg(fmt.Sprintf("delay.batch.%d", i))
		m.Reply, m.Data = inbox, payload
		m.Header.Set("Delay", "1h")
		if err := nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	for range calls {
		select {
		case rep := <-replies:
			if code := rep.Header.Get(wire.HeaderServiceErrorCode); code != "" {
				t.Fatalf("ingest: %s %s", code, rep.Header.Get(wire.HeaderServiceError))
			}
		case <-time.After(10 * time.Second):
			t.Fatal("not every message acknowledged")
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "natsdelay_commit_batch_size" {
			continue
		}
		h := mf.GetMetric()[0].GetHistogram()
		if h.GetSampleSum() != 40 {
			t.Fatalf("batches hold %v messages in all, want 40", h.GetSampleSum())
		}
		for _, b := range h.GetBucket() {
			if b.GetUpperBound() == 2 && b.GetCumulativeCount() != h.GetSampleCount() {
				t.Fatalf("%d of %d commits held more than 2 messages of 4 KiB with MaxBatchBytes 10,000",
					h.GetSampleCount()-b.GetCumulativeCount(), h.GetSampleCount())
			}
		}
		t.Logf("%d commits for 40 messages", h.GetSampleCount())
		return
	}
	t.Fatal("no natsdelay_commit_batch_size")
}
