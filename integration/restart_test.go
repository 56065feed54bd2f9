package integration_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge"
	"github.com/natsdelay/natsdelay/bridge/wire"
)

// TestRestart_PendingSurvive checks durability across a restart on every
// durable engine: messages pending when the Service closes are delivered
// by the next one on the same data, never before their fire time; attempt
// counts survive (attempt 2 before the restart, 3 after); the Delay-Id
// index survives, so replacing still works; event IDs go on from the last
// one given, as a clean stop returns the IDs it leased and did not use
// (docs/limits.md); and what was ACKed stays gone.
func TestRestart_PendingSurvive(t *testing.T) {
	t.Parallel()
	for _, e := range engines {
		if !e.durable {
			continue
		}
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			srv := startServer(t)
			nc := connect(t, srv)
			gotA := subscribe(t, nc, "restart.a")

			// Backoff 0 then 1h: the first ack wait leads straight to attempt
			// 2, and after that nothing goes out before the restart, so the
			// next attempt is the restarted service's.
			svc := startService(t, srv, e.open(t, dir), func(c *bridge.Config) {
				c.Delivery.AckWait = 300 * time.Millisecond
				c.Delivery.Backoff = []time.Duration{0, time.Hour}
			})
			a := schedule(t, nc, newMsg("restart.a", "a", "X-Trace", "t1"))
			// Nobody listens on restart.b yet, so it stays pending across
			// the restart even if it falls due before.
			b := schedule(t, nc, newMsg("restart.b", "b", "Delay", "1s"))
			c := schedule(t, nc, newMsg("restart.c", "c", "Delay", "1h", "Delay-Id", "c"))
			wantAttempt(t, next(t, gotA, "attempt 1").Msg, 1)
			wantAttempt(t, next(t, gotA, "attempt 2 after the ack wait").Msg, 2)
			// c was scheduled last: its event ID is the last one given.
			lastID := c.Key.EventID()
			if err := svc.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			if err := nc.Flush(); err != nil {
				t.Fatal(err)
			}
			if len(gotA) > 0 {
				t.Fatalf("a delivery after attempt 2 before the restart: %v", (<-gotA).Header)
			}

			svc = startService(t, srv, e.open(t, dir), func(c *bridge.Config) { c.Delivery.AckWait = time.Minute })
			if p := pending(t, nc); p != 3 {
				t.Fatalf("after restart: pending %d, want 3", p)
			}
			r := next(t, gotA, "delivery after restart")
			wantAttempt(t, r.Msg, 3)
			if r.Header.Get(wire.HeaderTag) != a.Tag || string(r.Data) != "a" || r.Header.Get("X-Trace") != "t1" {
				t.Fatalf("delivered %q with headers %v, want message a", r.Data, r.Header)
			}
			ackSync(t, nc, r.Msg, "")

			gotB := subscribe(t, nc, "restart.b")
			rb := next(t, gotB, "delivery of b after restart")
			notEarly(t, rb, b.FireAt)
			wantAttempt(t, rb.Msg, 1)
			ackSync(t, nc, rb.Msg, "")

			gotC := subscribe(t, nc, "restart.c")
			c2 := schedule(t, nc, newMsg("restart.c", "c2", "Delay", "100ms", "Delay-Id", "c"))
			if err := isGone(nc, c.Key); err != nil {
				t.Fatalf("Delay-Id replace after restart: %v", err)
			}
			if c2.Key.EventID() != lastID+1 {
				t.Fatalf("event id %d after restart, want the next after %d", c2.Key.EventID(), lastID)
			}
			rc := next(t, gotC, "delivery of the replacement")
			if string(rc.Data) != "c2" {
				t.Fatalf("delivered %q, want c2", rc.Data)
			}
			ackSync(t, nc, rc.Msg, "")
			if n := pending(t, nc); n != 0 {
				t.Fatalf("pending = %d, want 0", n)
			}
			if err := svc.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}

			// What was ACKed does not come back.
			startService(t, srv, e.open(t, dir), nil)
			if p := pending(t, nc); p != 0 {
				t.Fatalf("after second restart: pending %d, want 0", p)
			}
			for _, ch := range []<-chan received{gotA, gotB, gotC} {
				quiet(t, ch, 200*time.Millisecond, "delivery of an ACKed message after restart")
			}
			if d := schedule(t, nc, newMsg("restart.d", "d", "Delay", "1h")); d.Key.EventID() != c2.Key.EventID()+1 {
				t.Fatalf("event id %d after the second restart, want the next after %d", d.Key.EventID(), c2.Key.EventID())
			}
		})
	}
}

// TestRestart_RepliedMeansStored checks the ingest promise across Close:
// while requests are still arriving, Close answers every one it took,
// either with success or with a 503, and every message that got a success
// reply is there when the data is opened again, and nothing else is.
func TestRestart_RepliedMeansStored(t *testing.T) {
	t.Parallel()
	const n = 2000
	for _, e := range engines {
		if !e.durable {
			continue
		}
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			srv := startServer(t)
			nc := connect(t, srv)
			svc := startService(t, srv, e.open(t, dir), nil)

			inbox := nats.NewInbox()
			replies := make(chan *nats.Msg, n)
			sub, err := nc.Subscribe(inbox+".*", func(m *nats.Msg) { replies <- m })
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Unsubscribe()
			if err := sub.SetPendingLimits(-1, -1); err != nil {
				t.Fatal(err)
			}
			var ok []scheduled
			refused := 0
			handle := func(rep *nats.Msg) {
				switch code := rep.Header.Get(wire.HeaderServiceErrorCode); {
				case code == "503":
					refused++
				case rep.Header.Get("Status") == "503":
					// No responders: the service had stopped listening.
					refused++
				case code != "":
					t.Fatalf("error %s: %s", code, rep.Header.Get(wire.HeaderServiceError))
				default:
					ok = append(ok, parseScheduled(t, rep.Data))
				}
			}
			receive := func() {
				select {
				case rep := <-replies:
					handle(rep)
				case <-time.After(wait):
					t.Fatalf("%d accepted and %d refused of %d requests, then silence", len(ok), refused, n)
				}
			}
			publish := func(from, to int) {
				for i := from; i < to; i++ {
					m := newMsg("replied.s", strconv.Itoa(i), "Delay", "1h")
					m.Reply = inbox + "." + strconv.Itoa(i)
					if err := nc.PublishMsg(m); err != nil {
						t.Fatal(err)
					}
				}
				if err := nc.Flush(); err != nil {
					t.Fatal(err)
				}
			}
			publish(0, n/2)
			// Close once the service is busy committing, while the rest is
			// still on its way.
			receive()
			closed := make(chan error, 1)
			go func() { closed <- svc.Close() }()
			publish(n/2, n)
			for range n - 1 {
				receive()
			}
			if err := <-closed; err != nil {
				t.Fatalf("Close: %v", err)
			}
			t.Logf("accepted %d, refused %d", len(ok), refused)

			startService(t, srv, e.open(t, dir), nil)
			if p := pending(t, nc); p != uint64(len(ok)) {
				t.Fatalf("pending after reopen = %d, want the %d accepted", p, len(ok))
			}
			listed := map[string]bool{}
			for m, err := range api(nc).List(context.Background(), wire.ListRequest{Subject: "replied.s"}) {
				if err != nil {
					t.Fatalf("LIST replied.s: %v", err)
				}
				listed[m.Tag] = true
			}
			for _, s := range ok {
				if !listed[s.Tag] {
					t.Fatalf("accepted message %s is not pending after reopen", s.Tag)
				}
			}
		})
	}
}

// TestRestart_AnswerEarlierDelivery checks that +ACK and +TERM work for a
// delivery made before a restart: the tag is the storage key, so the
// restarted service settles the message even though it never delivered
// it itself, and the dead letter carries the attempt count from before.
func TestRestart_AnswerEarlierDelivery(t *testing.T) {
	t.Parallel()
	for _, e := range engines {
		if !e.durable {
			continue
		}
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			srv := startServer(t)
			nc := connect(t, srv)
			mod := func(c *bridge.Config) { c.Delivery.AckWait = time.Minute; c.Delivery.DeadLetterSubject = deadLetters }
			svc := startService(t, srv, e.open(t, dir), mod)
			sub, err := nc.SubscribeSync("restart.old")
			if err != nil {
				t.Fatal(err)
			}
			acked := schedule(t, nc, newMsg("restart.old", "ack me", "X-Trace", "t1"))
			termed := schedule(t, nc, newMsg("restart.old", "term me", "X-Trace", "t1"))
			var ds []*nats.Msg
			for range 2 {
				d, err := sub.NextMsg(wait)
				if err != nil {
					t.Fatal(err)
				}
				ds = append(ds, d)
			}
			// Nobody listens after the restart, so the new service cannot
			// have delivered these messages itself.
			if err := sub.Unsubscribe(); err != nil {
				t.Fatal(err)
			}
			if err := svc.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}

			dead := subscribe(t, nc, deadLetters)
			startService(t, srv, e.open(t, dir), mod)
			ackSync(t, nc, ds[0], "+ACK")
			ackSync(t, nc, ds[1], "+TERM old")
			for _, k := range []scheduled{acked, termed} {
				if err := isGone(nc, k.Key); err != nil {
					t.Fatal(err)
				}
			}
			dl := next(t, dead, "dead letter")
			wantDeadLetter(t, dl.Msg, termed, "term me", 1, "term: old")
			got := subscribe(t, nc, "restart.old")
			quiet(t, got, 300*time.Millisecond, "delivery of a settled message")
		})
	}
}

// TestRestart_ExpiredWhileDown checks that a message whose TTL ran out
// while the service was down is never delivered after the restart: it is
// dead-lettered with reason expired and deleted.
func TestRestart_ExpiredWhileDown(t *testing.T) {
	t.Parallel()
	for _, e := range engines {
		if !e.durable {
			continue
		}
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			srv := startServer(t)
			nc := connect(t, srv)
			mod := func(c *bridge.Config) {
				c.Delivery.DeadLetterSubject = deadLetters
				c.Delivery.DeadLetterExpired = true
				c.Expiry.Interval = 50 * time.Millisecond
			}
			svc := startService(t, srv, e.open(t, dir), mod)
			rep := schedule(t, nc, newMsg("restart.ttl", "x", "Delay", "100ms", "Delay-TTL", "100ms", "X-Trace", "t1"))
			if err := svc.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			// Stay down until the message has expired.
			expireAt := rep.FireAt.Add(100 * time.Millisecond)
			checkFor(t, wait, 10*time.Millisecond, func() error {
				if time.Now().Before(expireAt.Add(time.Millisecond)) {
					return fmt.Errorf("not expired yet")
				}
				return nil
			})
			got := subscribe(t, nc, "restart.ttl")
			dead := subscribe(t, nc, deadLetters)
			startService(t, srv, e.open(t, dir), mod)
			dl := next(t, dead, "dead letter")
			wantDeadLetter(t, dl.Msg, rep, "x", 0, "expired")
			waitGone(t, nc, rep.Key)
			quiet(t, got, 300*time.Millisecond, "delivery of a message that expired while the service was down")
		})
	}
}
