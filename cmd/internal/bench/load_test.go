package bench

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge/bridgetest"
)

// The bench's timeout is a bound on a stall, not on a run: a fill of
// millions takes far longer than one timeout and must not fail for that,
// while a service that stops replying must fail the run.
func TestPipelined_FailsWhenRepliesStopNotWhenSlow(t *testing.T) {
	srv := bridgetest.RunServer(t)
	nc := bridgetest.Connect(t, srv)
	responder := bridgetest.Connect(t, srv)
	const timeout = 500 * time.Millisecond

	var answered atomic.Int64
	stopAt := int64(-1) // answer everything
	sub, err := responder.Subscribe("slow", func(m *nats.Msg) {
		if s := atomic.LoadInt64(&stopAt); s >= 0 && answered.Load() >= s {
			return
		}
		// Steady progress, one reply every tenth of the timeout, so the
		// whole run lasts three timeouts.
		time.Sleep(timeout / 10)
		answered.Add(1)
		_ = m.Respond(nil)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := responder.Flush(); err != nil {
		t.Fatal(err)
	}
	always := func(*nats.Msg) bool { return true }
	msg := func(int) *nats.Msg { return nats.NewMsg("slow") }

	const n = 30
	el, failed, err := pipelined(nc, n, 4, timeout, msg, always, new(atomic.Int64))
	if err != nil || failed != 0 {
		t.Fatalf("slow but steady replies: %d failed, err %v", failed, err)
	}
	if el < timeout {
		t.Fatalf("the run took %v, under one timeout: it does not show a run longer than the timeout passing", el)
	}

	// Now the responder goes quiet after 5 more replies.
	atomic.StoreInt64(&stopAt, answered.Load()+5)
	_, _, err = pipelined(nc, n, 4, timeout, msg, always, new(atomic.Int64))
	if err == nil || !strings.Contains(err.Error(), "none for") {
		t.Fatalf("replies stopped: err %v, want a stall error", err)
	}
	_ = sub.Unsubscribe()
}

// A synchronous request that finds nobody subscribed (a cluster between
// leaders) is a refusal the run counts, as a 503 is and as a pipelined
// run counts the same status reply, not an error that ends the run; a
// request left unanswered still is one.
func TestRequesters_NoRespondersCountedAsRefused(t *testing.T) {
	srv := bridgetest.RunServer(t)
	nc := bridgetest.Connect(t, srv)
	always := func(*nats.Msg) bool { return true }
	msg := func(int) *nats.Msg { return nats.NewMsg("nobody.here") }
	_, failed, err := requesters([]*nats.Conn{nc}, 20, 4, 5*time.Second, msg, always, new(atomic.Int64))
	if err != nil || failed != 20 {
		t.Fatalf("20 requests to no subscriber: %d refused, err %v; want 20 refused and no error", failed, err)
	}
	silent := bridgetest.Connect(t, srv)
	sub, err := silent.Subscribe("silent", func(*nats.Msg) {})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := silent.Flush(); err != nil {
		t.Fatal(err)
	}
	msg = func(int) *nats.Msg { return nats.NewMsg("silent") }
	if _, _, err := requesters([]*nats.Conn{nc}, 2, 2, 200*time.Millisecond, msg, always, new(atomic.Int64)); err == nil {
		t.Fatal("requests nobody answers: no error")
	}
}
