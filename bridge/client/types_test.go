package client_test

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge/client"
	"github.com/natsdelay/natsdelay/bridge/wire"
)

func mustClient(tb testing.TB, nc *nats.Conn, opts ...client.Option) *client.Client {
	tb.Helper()
	c, err := client.New(nc, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// A Delivery is no JetStream message: it embeds no *nats.Msg, so none of
// its methods (Metadata, NakWithDelay, DoubleAck ...) compiles on a
// Delivery only to fail at run time. The answers it shares a name with
// are its own, in natsdelay's vocabulary; Msg returns the message.
func TestDelivery_HasNoMethodOfNatsMsgButItsAnswers(t *testing.T) {
	dt := reflect.TypeFor[client.Delivery]()
	for f := range dt.Fields() {
		if f.Anonymous {
			t.Errorf("Delivery embeds %s: its methods are Delivery's", f.Type)
		}
	}
	own := map[string]bool{"Ack": true, "AckSync": true, "Nak": true, "InProgress": true, "Term": true}
	mt := reflect.TypeFor[*nats.Msg]()
	for m := range mt.Methods() {
		if _, ok := dt.MethodByName(m.Name); ok && !own[m.Name] {
			t.Errorf("Delivery has %s, a method of *nats.Msg", m.Name)
		}
	}
	if _, ok := dt.MethodByName("Metadata"); ok {
		t.Error("Delivery has Metadata, which fails on every delivery")
	}
	m := nats.NewMsg("orders.x")
	if d := client.NewDelivery(nil, m); d.Msg() != m || d.Subject() != "orders.x" {
		t.Errorf("Msg() = %p, Subject() = %q; want the message %p and its subject", d.Msg(), d.Subject(), m)
	}
}

// The occurrences of a recurring schedule tell their planned time and
// the next one's as times; the last has no next; every delivery tells
// when the message was accepted.
func TestDelivery_OccurrenceNextAndEnqueuedAt(t *testing.T) {
	h, c := newClient(t)
	ctx := context.Background()
	got := make(chan client.Delivery, 2)
	sub, err := client.Subscribe(h.Conn, "ticks", func(d client.Delivery) {
		got <- d
		_ = d.Ack()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := h.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
	before := time.Now().Add(-time.Millisecond)
	if _, err := c.Schedule(ctx, client.Message{Subject: "ticks", Every: 100 * time.Millisecond, Limit: 2}); err != nil {
		t.Fatal(err)
	}
	var ds []client.Delivery
	for len(ds) < 2 {
		select {
		case d := <-got:
			ds = append(ds, d)
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of 2 occurrences delivered", len(ds))
		}
	}
	first, last := ds[0], ds[1]
	if first.Schedule() != "@every 100ms" || first.Occurrence().IsZero() || !first.Next().Equal(last.Occurrence()) {
		t.Errorf("first: schedule %q occurrence %v next %v; want @every 100ms, a time, and the second's occurrence %v",
			first.Schedule(), first.Occurrence(), first.Next(), last.Occurrence())
	}
	if !last.Next().IsZero() || last.Header().Get(wire.HeaderNext) != "" {
		t.Errorf("the last occurrence's Next = %v, want none", last.Next())
	}
	for _, d := range ds {
		if e := d.EnqueuedAt(); e.Before(before) || e.After(d.FireAt()) {
			t.Errorf("EnqueuedAt = %v, want after %v and not after its fire time %v", e, before, d.FireAt())
		}
	}
}

// The answers' times are time.Time: GET's of a pending message and of a
// recurring schedule, RESCHEDULE's and a dead letter's, each the time
// the service stored.
func TestAnswers_TimesAreTimes(t *testing.T) {
	_, c := newClient(t)
	ctx := context.Background()
	at := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	s, err := c.Schedule(ctx, client.Message{Subject: "times.a", ID: "a", At: at, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	m, err := c.Get(ctx, wire.MessageRef{Tag: s.Tag})
	if err != nil {
		t.Fatal(err)
	}
	if !m.FireAt.Equal(at) || !m.ExpireAt.Equal(at.Add(time.Minute)) || m.EnqueuedAt.IsZero() || m.EnqueuedAt.After(at) {
		t.Errorf("Get: fire %v expire %v enqueued %v; want %v, a minute later, and a time before", m.FireAt, m.ExpireAt, m.EnqueuedAt, at)
	}
	moved, err := c.Reschedule(ctx, wire.RescheduleRequest{Tag: s.Tag, Shift: "1h"})
	if err != nil || !moved.FireAt.Equal(at.Add(time.Hour)) {
		t.Fatalf("Reschedule by 1h = %+v, %v; want the fire time %v", moved, err, at.Add(time.Hour))
	}
	r, err := c.Schedule(ctx, client.Message{Subject: "times.r", ID: "r", Every: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	occ, err := c.Get(ctx, wire.MessageRef{Tag: r.Tag})
	if err != nil {
		t.Fatal(err)
	}
	if sch := occ.Schedule; sch == nil || !sch.Occurrence.Equal(r.FireAt) || len(sch.Next) == 0 || !sch.Next[0].Equal(r.FireAt) {
		t.Errorf("Get of an occurrence: schedule %+v, want its occurrence and first next at %v", sch, r.FireAt)
	}
}

// A dead letter's time of death is a time.Time.
func TestDeadLetters_DiedAtIsATime(t *testing.T) {
	h, c := newClient(t)
	ctx := context.Background()
	sub, err := client.Subscribe(h.Conn, "dies", func(d client.Delivery) { _ = d.Term("no") })
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := h.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
	before := time.Now().Add(-time.Millisecond)
	s, err := c.Schedule(ctx, client.Message{Subject: "dies"})
	if err != nil {
		t.Fatal(err)
	}
	var d *client.DeadLetterInfo
	waitFor(t, "the dead letter", func() bool {
		d, err = c.DeadLetter(ctx, wire.MessageRef{Tag: s.Tag})
		return err == nil
	})
	if d.DiedAt.Before(before) || d.DiedAt.Before(d.FireAt) || d.Reason != "term: no" {
		t.Errorf("dead letter died at %v for %q; want after %v and its fire time %v, for term: no", d.DiedAt, d.Reason, before, d.FireAt)
	}
	n := 0
	for dl, err := range c.DeadLetters(ctx, wire.DeadListRequest{}) {
		if err != nil || !dl.DiedAt.Equal(d.DiedAt) {
			t.Fatalf("DeadLetters: %+v, %v; want the one that died at %v", dl, err, d.DiedAt)
		}
		n++
	}
	if n != 1 {
		t.Errorf("DeadLetters walked %d, want 1", n)
	}
}

// BulkAll runs every step of an operation, each under the one op it
// chose before the first (so that a retried step moves nothing twice),
// and sums them.
func TestBulkAll_RunsEveryStepUnderOneOp(t *testing.T) {
	h, c := newClient(t)
	ctx := context.Background()
	for i := range 25 {
		if _, err := c.Schedule(ctx, client.Message{Subject: "bulk.all", ID: string(rune('a' + i)), Delay: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	ops := make(chan string, 16)
	watch, err := h.Conn.Subscribe(wire.DefaultAPIPrefix+"."+wire.VerbBulk+".CANCEL", func(m *nats.Msg) {
		var r wire.BulkRequest
		_ = json.Unmarshal(m.Data, &r)
		ops <- r.Op
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = watch.Unsubscribe() }()
	if err := h.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
	ten, steps := 10, 0
	res, err := c.BulkAll(ctx, "CANCEL", wire.BulkRequest{Filter: wire.Filter{Subject: "bulk.>"}, Limit: &ten}, func(r *client.BulkReply) error {
		steps++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Count != 25 || res.Steps != 3 || steps != 3 || res.Cursor != "" || wire.CheckBulkOp(res.Op) != nil {
		t.Fatalf("BulkAll = %+v after %d calls, want 25 canceled in 3 steps, done, under an op", res, steps)
	}
	for range 3 {
		if op := <-ops; op != res.Op {
			t.Errorf("a step was sent with op %q, want %q", op, res.Op)
		}
	}
	if p := pending(t, h.Service); p != 0 {
		t.Errorf("pending after BulkAll CANCEL: %d, want 0", p)
	}
}

// A timeout of 0 or less, or a negative back-off, is refused with an
// error that names it, not taken for a request that never waits.
func TestNew_RefusesAZeroTimeout(t *testing.T) {
	for _, tc := range []struct {
		opt  client.Option
		want string
	}{
		{client.WithTimeout(0), "timeout must be more than 0"},
		{client.WithTimeout(-time.Second), "timeout must be more than 0"},
		{client.WithRetry(3, -time.Second), "backoff must not be negative"},
	} {
		c, err := client.New(nil, tc.opt)
		if c != nil || err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New = %v, %v; want no client and an error saying %q", c, err, tc.want)
		}
	}
	if _, err := client.New(nil, client.WithTimeout(time.Millisecond)); err != nil {
		t.Errorf("New with a 1ms timeout: %v", err)
	}
}
