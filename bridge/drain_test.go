package bridge_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge"
	"github.com/natsdelay/natsdelay/bridge/bridgetest"
	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/keys"
)

// drainResult is what a Drain run in a goroutine returned.
type drainResult struct {
	release func()
	err     error
}

// drainAsync runs Drain of the topic subject in a goroutine the test
// waits for, and returns once its hold is in force (or it returned): a
// publish after it is one made while the topic drains.
func drainAsync(ctx context.Context, svc *bridge.Service, subject string) <-chan drainResult {
	th := keys.TopicHash(subject)
	held := make(chan struct{})
	bridge.OnDrainHeld(svc, sync.OnceFunc(func() { close(held) }))
	ch := make(chan drainResult, 1)
	go func() {
		release, err := svc.Drain(ctx, func(h uint64) bool { return h == th })
		ch <- drainResult{release, err}
	}()
	select {
	case <-held:
	case r := <-ch:
		ch <- r // it returned first: the caller reads it
	}
	return ch
}

func drainDone(t *testing.T, ch <-chan drainResult) drainResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(30 * time.Second):
		t.Fatal("Drain did not return")
		return drainResult{}
	}
}

func nextData(t *testing.T, sub *nats.Subscription, what string) *nats.Msg {
	t.Helper()
	m, err := sub.NextMsg(30 * time.Second)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return m
}

// TestDrain_AnswerApplied_IngestGoesOn drains a topic with a delivery
// out (the ack wait a minute): its publishes are stored and the ACK of
// that delivery is applied (answered +OK, the message gone), Drain
// returns once it is, and the message published meanwhile goes out only
// once the hold is lifted, after another topic's.
func TestDrain_AnswerApplied_IngestGoesOn(t *testing.T) {
	h := bridgetest.New(t, func(c *bridge.Config) { c.Delivery.AckWait = time.Minute })
	nc := h.Conn
	sub, err := nc.SubscribeSync("drn.>")
	if err != nil {
		t.Fatal(err)
	}
	publish := func(subject, data string) {
		t.Helper()
		r, err := nc.Request("delay."+subject, []byte(data), 10*time.Second)
		if err == nil {
			err = wire.ParseError(r.Header, r.Data)
		}
		if err != nil {
			t.Fatalf("publish to %s while it drains: %v, want it stored", subject, err)
		}
	}
	publish("drn.hot", "first")
	first := nextData(t, sub, "the delivery out")
	drained := drainAsync(context.Background(), h.Service, "drn.hot")
	publish("drn.hot", "second")
	r, err := nc.Request(first.Reply, nil, 10*time.Second)
	if err != nil || string(r.Data) != "+OK" {
		t.Fatalf("ACK while the topic drains: %v %v, want +OK: applied, not dropped", r, err)
	}
	res := drainDone(t, drained)
	if res.err != nil {
		t.Fatal(res.err)
	}
	r, err = nc.Request("$DELAY.API.GET", []byte(`{"tag":"`+first.Header.Get(wire.HeaderTag)+`"}`), 10*time.Second)
	if err == nil {
		err = wire.ParseError(r.Header, r.Data)
	}
	if !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("GET of the message ACKed while it drained: %v, want a 404", err)
	}
	publish("drn.warm", "warm")
	if m := nextData(t, sub, "while held"); string(m.Data) != "warm" {
		t.Fatalf("while the topic is held: delivered %q, want only the other topic's message", m.Data)
	}
	res.release()
	res.release() // a second release changes nothing
	if m := nextData(t, sub, "after the hold"); string(m.Data) != "second" {
		t.Fatalf("after the hold: delivered %q, want the message published while it drained", m.Data)
	}
}

// TestDrain_BoundedByAckWait drains a topic whose delivery is never
// answered: Drain returns once the ack wait ran out, and the delivery
// comes again once the hold is lifted.
func TestDrain_BoundedByAckWait(t *testing.T) {
	h := bridgetest.New(t, func(c *bridge.Config) { c.Delivery.AckWait = 300 * time.Millisecond })
	nc := h.Conn
	sub, err := nc.SubscribeSync("drb.>")
	if err != nil {
		t.Fatal(err)
	}
	if r, err := nc.Request("delay.drb.slow", []byte("x"), 10*time.Second); err != nil || wire.ParseError(r.Header, r.Data) != nil {
		t.Fatalf("publish: %v %v", r, err)
	}
	nextData(t, sub, "the first delivery")
	res := drainDone(t, drainAsync(context.Background(), h.Service, "drb.slow"))
	if res.err != nil {
		t.Fatal(res.err)
	}
	res.release()
	if m := nextData(t, sub, "after the hold"); m.Header.Get(wire.HeaderAttempt) != "2" {
		t.Fatalf("after the hold: attempt %s, want 2", m.Header.Get(wire.HeaderAttempt))
	}
}

// TestDrain_ContextEnds_HoldLifted gives a Drain up (its context ends)
// while a delivery of the topic is out: it returns the context's error,
// and the topic's next message is delivered, the hold lifted.
func TestDrain_ContextEnds_HoldLifted(t *testing.T) {
	h := bridgetest.New(t, func(c *bridge.Config) { c.Delivery.AckWait = time.Minute })
	nc := h.Conn
	sub, err := nc.SubscribeSync("drc.>")
	if err != nil {
		t.Fatal(err)
	}
	publish := func(data string) {
		t.Helper()
		if r, err := nc.Request("delay.drc.t", []byte(data), 10*time.Second); err != nil || wire.ParseError(r.Header, r.Data) != nil {
			t.Fatalf("publish: %v %v", r, err)
		}
	}
	publish("out")
	nextData(t, sub, "the delivery out")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res := drainDone(t, drainAsync(ctx, h.Service, "drc.t"))
	if !errors.Is(res.err, context.Canceled) {
		t.Fatalf("Drain with its context ended, a delivery out: %v, want context.Canceled", res.err)
	}
	publish("next")
	if m := nextData(t, sub, "after the drain given up"); string(m.Data) != "next" {
		t.Fatalf("after the drain given up: delivered %q, want the next message", m.Data)
	}
}
