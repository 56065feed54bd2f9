package integration_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge"
	"github.com/natsdelay/natsdelay/bridge/client"
	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/delaystore/pebblestore"
	"github.com/natsdelay/natsdelay/keys"
)

// TestDedup_ResendAfterDelivery_DeliveredOnce is a publisher retrying
// after a timeout, as client.WithRetry does: the same message, Delay-Id
// and all, sent again after the first was stored, delivered and ACKed.
// The resend is answered with the first reply and delivered no second
// time, also after a restart on the same store; a message with the same
// Delay-Id and another payload still replaces the pending one, and any
// message with a Nats-Msg-Id seen within the window is a duplicate.
func TestDedup_ResendAfterDelivery_DeliveredOnce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv := startServer(t)
	nc := connect(t, srv)
	c := api(nc)
	got := subscribe(t, nc, "dedup.a")
	open := func() *bridge.Service {
		return startService(t, srv, openPebble(t, pebblestore.Config{Dir: dir}), nil)
	}
	svc := open()

	order := client.Message{Subject: "dedup.a", ID: "order-1", Data: []byte("charge 10")}
	first := mustSchedule(t, c, order)
	r := next(t, got, "first delivery")
	if r.Header.Get(wire.HeaderTag) != first.Tag {
		t.Fatalf("delivered tag %s, want %s", r.Header.Get(wire.HeaderTag), first.Tag)
	}
	ackSync(t, nc, r.Msg, "")
	waitPending(t, nc, 0)

	// The resend, once the first is gone: the first reply, nothing stored.
	wantDuplicate(t, mustSchedule(t, c, order), first)
	wantNext(t, nc, got, c, "marker-1")

	// A deliberate replacement: same Delay-Id, another payload.
	v1 := mustSchedule(t, c, client.Message{Subject: "dedup.a", ID: "order-2", Data: []byte("v1"), Delay: time.Hour})
	v2msg := client.Message{Subject: "dedup.a", ID: "order-2", Data: []byte("v2"), Delay: time.Hour}
	v2 := mustSchedule(t, c, v2msg)
	if v2.Duplicate || v2.Tag == v1.Tag {
		t.Fatalf("replacement answered %+v, want a new tag (the first was %s)", v2, v1.Tag)
	}
	if err := isGone(nc, keyOf(t, v1.Tag)); err != nil {
		t.Fatalf("replaced message: %v", err)
	}

	// A Nats-Msg-Id: any message with it within the window is a duplicate.
	n1 := schedule(t, nc, newMsg("dedup.a", "n1", "Nats-Msg-Id", "n-1", "Delay", "1h"))
	rep, err := nc.RequestMsg(newMsg("dedup.a", "other payload", "Nats-Msg-Id", "n-1"), wait)
	if err != nil {
		t.Fatal(err)
	}
	if d := parseReply(t, rep.Data); !d.Duplicate || d.Tag != n1.Tag {
		t.Fatalf("repeat of a Nats-Msg-Id answered %s, want the first reply (tag %s) marked as a duplicate", rep.Data, n1.Tag)
	}
	if p := pending(t, nc); p != 2 {
		t.Fatalf("pending %d, want 2 (order-2 and n-1)", p)
	}

	// The window is on disk: a restart keeps it.
	if err := svc.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	open()
	wantDuplicate(t, mustSchedule(t, c, order), first)
	wantDuplicate(t, mustSchedule(t, c, v2msg), v2)
	if p := pending(t, nc); p != 2 {
		t.Fatalf("after restart: pending %d, want 2", p)
	}
	wantNext(t, nc, got, c, "marker-2")
}

// TestDedup_IngestEdges checks the Nats-Msg-Id that ingest refuses, each
// with a 400 that says why, storing nothing.
func TestDedup_IngestEdges(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	long := make([]byte, 257)
	for i := range long {
		long[i] = 'x'
	}
	for _, tt := range []struct {
		name string
		msg  *nats.Msg
		want string
	}{
		{"twice", newMsg("dedup.e", "", "Nats-Msg-Id", "a", "Nats-Msg-Id", "b"), "bad request: Nats-Msg-Id given 2 times: want at most one"},
		{"long", newMsg("dedup.e", "", "Nats-Msg-Id", string(long)), "bad request: Nats-Msg-Id is 257 bytes: the limit is 256, as it keys the duplicate window"},
		{"control", newMsg("dedup.e", "", "Nats-Msg-Id", "a\tb"), `bad request: Nats-Msg-Id "a\tb" contains a control character`},
		{"long Delay-Id", newMsg("dedup.e", "", "Delay-Id", string(long)), "bad request: Delay-Id is 257 bytes: the limit is 256"},
	} {
		rep, err := h.nc.RequestMsg(tt.msg, wait)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if code, text := rep.Header.Get(wire.HeaderServiceErrorCode), rep.Header.Get(wire.HeaderServiceError); code != "400" || text != tt.want {
			t.Errorf("%s: answered %s %q, want 400 %q", tt.name, code, text, tt.want)
		}
	}
	if p := pending(t, h.nc); p != 0 {
		t.Fatalf("pending %d after refused messages, want 0", p)
	}
}

func mustSchedule(tb testing.TB, c *client.Client, m client.Message) *client.Scheduled {
	tb.Helper()
	s, err := c.Schedule(context.Background(), m)
	if err != nil {
		tb.Fatalf("schedule %s %s: %v", m.Subject, m.ID, err)
	}
	return s
}

// wantDuplicate fails tb unless got is the reply first marked as a
// duplicate.
func wantDuplicate(tb testing.TB, got, first *client.Scheduled) {
	tb.Helper()
	if !got.Duplicate || got.Tag != first.Tag || !got.FireAt.Equal(first.FireAt) {
		tb.Fatalf("resend answered %+v, want the first reply %+v marked as a duplicate", got, first)
	}
}

// wantNext schedules a marker due now on the subject of got and fails tb
// unless it is the next delivery there: a second copy of anything due
// before it would come first, as deliveries of a subject go in order.
func wantNext(tb testing.TB, nc *nats.Conn, got <-chan received, c *client.Client, marker string) {
	tb.Helper()
	mustSchedule(tb, c, client.Message{Subject: "dedup.a", ID: marker})
	r := next(tb, got, marker)
	if id := r.Header.Get(wire.HeaderID); id != marker {
		tb.Fatalf("delivered %s %q before %s: a resend was delivered", id, r.Data, marker)
	}
	ackSync(tb, nc, r.Msg, "")
}

func keyOf(tb testing.TB, tag string) keys.Key {
	tb.Helper()
	k, err := keys.ParseTag(tag)
	if err != nil {
		tb.Fatalf("tag %q: %v", tag, err)
	}
	return k
}

func parseReply(tb testing.TB, data []byte) wire.ScheduleReply {
	tb.Helper()
	var r wire.ScheduleReply
	if err := json.Unmarshal(data, &r); err != nil {
		tb.Fatalf("reply %q: %v", data, err)
	}
	return r
}
