package integration_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge"
	"github.com/natsdelay/natsdelay/bridge/wire"
)

const deadLetters = "natsdelay.dead"

// wantDeadLetter fails tb unless dl is the dead letter of the message
// scheduled as rep with payload, after attempt deliveries, for reason, and
// carries the publisher's X-Trace header.
func wantDeadLetter(tb testing.TB, dl *nats.Msg, rep scheduled, payload string, attempt int, reason string) {
	tb.Helper()
	h := dl.Header
	switch {
	case string(dl.Data) != payload,
		h.Get(wire.HeaderTag) != rep.Tag,
		h.Get(wire.HeaderAttempt) != fmt.Sprint(attempt),
		h.Get(wire.HeaderSubject) != rep.Subject,
		h.Get(wire.HeaderReason) != reason,
		!slices.Equal(h.Values("X-Trace"), []string{"t1"}):
		tb.Fatalf("dead letter %q with headers %v; want %q, tag %s, attempt %d, subject %s, reason %q, X-Trace t1",
			dl.Data, h, payload, rep.Tag, attempt, rep.Subject, reason)
	}
	for _, c := range controlHeaders {
		if h.Get(c) != "" {
			tb.Fatalf("dead letter carries control header %s: %v", c, h)
		}
	}
}

// TestDeadLetter_Term checks that +TERM, with or without a reason, deletes
// the message and publishes it once to the dead-letter subject with the
// original headers and payload plus Delay-Tag, Delay-Attempt,
// Delay-Subject and Delay-Reason, and that it is never delivered again.
func TestDeadLetter_Term(t *testing.T) {
	t.Parallel()
	// Long enough that the +TERM answers the first attempt on a loaded
	// machine: a redelivery before it would make the dead letter's
	// attempt 2.
	const ackWait = 2 * time.Second
	h := newHarness(t, func(c *bridge.Config) {
		c.Delivery.DeadLetterSubject = deadLetters
		c.Delivery.AckWait = ackWait
	})
	got := subscribe(t, h.nc, "dl.term")
	dead := subscribe(t, h.nc, deadLetters)
	for _, c := range []struct{ payload, reason string }{
		{"+TERM bad payload", "term: bad payload"},
		{"+TERM", "term"},
	} {
		rep := schedule(t, h.nc, newMsg("dl.term", c.payload, "X-Trace", "t1", "Delay-Max-Deliver", "5"))
		r := next(t, got, "delivery")
		ackSync(t, h.nc, r.Msg, c.payload)
		// The ack sync answers once the delete is committed.
		if err := isGone(h.nc, rep.Key); err != nil {
			t.Fatal(err)
		}
		dl := next(t, dead, "dead letter")
		wantDeadLetter(t, dl.Msg, rep, c.payload, 1, c.reason)
	}
	quiet(t, got, 2*ackWait, "delivery after +TERM")
	quiet(t, dead, 0, "second dead letter")
	if n := pending(t, h.nc); n != 0 {
		t.Fatalf("pending = %d, want 0", n)
	}
}

// TestDeadLetter_MaxDeliver checks that a message that was delivered its
// maximum number of times without an ACK (the configured default or its
// own Delay-Max-Deliver, which wins; NAKs count as in JetStream) is
// dead-lettered with reason max-deliver and the last attempt, deleted, and
// not delivered again.
func TestDeadLetter_MaxDeliver(t *testing.T) {
	t.Parallel()
	const ackWait = 200 * time.Millisecond
	cases := []struct {
		name       string
		maxDeliver uint32 // bridge.Config.MaxDeliver
		hdr        []string
		answer     string // what the consumer says; "" is silence
		attempts   int
	}{
		{name: "config default", maxDeliver: 2, attempts: 2},
		{name: "header wins over config", maxDeliver: 5, hdr: []string{"Delay-Max-Deliver", "1"}, attempts: 1},
		{name: "header without config", hdr: []string{"delay-max-deliver", "3"}, attempts: 3},
		{name: "NAK counts", hdr: []string{"Delay-Max-Deliver", "2"}, answer: "-NAK", attempts: 2},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, func(cfg *bridge.Config) {
				cfg.Delivery.DeadLetterSubject = deadLetters
				cfg.Delivery.AckWait = ackWait
				cfg.Delivery.MaxDeliver = c.maxDeliver
			})
			subj := fmt.Sprintf("dl.max.%d", i)
			got := subscribe(t, h.nc, subj)
			dead := subscribe(t, h.nc, deadLetters)
			rep := schedule(t, h.nc, newMsg(subj, "x", append([]string{"X-Trace", "t1"}, c.hdr...)...))
			for n := 1; n <= c.attempts; n++ {
				r := next(t, got, fmt.Sprintf("delivery %d", n))
				wantAttempt(t, r.Msg, n)
				if c.answer != "" {
					ackSync(t, h.nc, r.Msg, c.answer)
				}
			}
			dl := next(t, dead, "dead letter")
			wantDeadLetter(t, dl.Msg, rep, "x", c.attempts, "max-deliver")
			waitGone(t, h.nc, rep.Key)
			waitPending(t, h.nc, 0)
			quiet(t, got, 2*ackWait, "delivery after the dead letter")
			quiet(t, dead, 0, "second dead letter")
		})
	}
}

// TestDeadLetter_MaxDeliver_NoSubject checks that without a dead-letter
// subject a message past its max deliver is deleted, and nothing is
// published for it.
func TestDeadLetter_MaxDeliver_NoSubject(t *testing.T) {
	t.Parallel()
	const ackWait = 200 * time.Millisecond
	h := newHarness(t, func(c *bridge.Config) { c.Delivery.AckWait = ackWait; c.Delivery.MaxDeliver = 1 })
	got := subscribe(t, h.nc, "dl.nosubj")
	rep := schedule(t, h.nc, newMsg("dl.nosubj", "x"))
	wantAttempt(t, next(t, got, "delivery").Msg, 1)
	waitGone(t, h.nc, rep.Key)
	quiet(t, got, 2*ackWait, "delivery after max deliver")
	if st := h.svc.Stats(); st.Redelivered != 0 {
		t.Fatalf("stats %+v: want no redelivery", st)
	}
}

// TestExpiry_TTL checks Delay-TTL: a message not ACKed by fire time + TTL
// is deleted and never delivered again, and is dead-lettered with reason
// expired when DeadLetterExpired is set. It is checked both for a message
// that keeps being redelivered and for one that nobody could receive.
func TestExpiry_TTL(t *testing.T) {
	t.Parallel()
	const (
		ackWait = 150 * time.Millisecond
		ttl     = 500 * time.Millisecond
	)
	opts := func(dlq bool) func(*bridge.Config) {
		return func(c *bridge.Config) {
			c.Delivery.AckWait = ackWait
			c.Expiry.Interval = 50 * time.Millisecond
			c.Delivery.DeadLetterSubject = deadLetters
			c.Delivery.DeadLetterExpired = dlq
		}
	}

	t.Run("redelivered until expired", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, opts(true))
		got := subscribe(t, h.nc, "ttl.busy")
		dead := subscribe(t, h.nc, deadLetters)
		rep := schedule(t, h.nc, newMsg("ttl.busy", "x", "Delay-TTL", "500ms", "X-Trace", "t1"))
		expireAt := rep.FireAt.Add(ttl)
		first := next(t, got, "first delivery")
		wantAttempt(t, first.Msg, 1)
		// Deliveries and the dead letter come from one connection, so every
		// delivery published before the dead letter arrives before it.
		var last int
		var dl received
	collect:
		for {
			select {
			case r := <-got:
				last = attempt(t, r.Msg)
			case dl = <-dead:
				break collect
			case <-time.After(wait):
				t.Fatal("no dead letter for the expired message")
			}
		}
		if dl.at.Before(expireAt) {
			t.Fatalf("dead-lettered at %s, before the expiry %s", dl.at.Format(time.RFC3339Nano), expireAt.Format(time.RFC3339Nano))
		}
		if last < 2 {
			t.Fatalf("last delivery before expiry was attempt %d, want redeliveries within the TTL", last)
		}
		wantDeadLetter(t, dl.Msg, rep, "x", last, "expired")
		waitGone(t, h.nc, rep.Key)
		quiet(t, got, 3*ackWait, "delivery after expiry")
		quiet(t, dead, 0, "second dead letter")
	})

	t.Run("nobody listening", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, opts(true))
		dead := subscribe(t, h.nc, deadLetters)
		rep := schedule(t, h.nc, newMsg("ttl.idle", "x", "Delay-TTL", "500ms", "X-Trace", "t1"))
		dl := next(t, dead, "dead letter")
		if dl.at.Before(rep.FireAt.Add(ttl)) {
			t.Fatalf("dead-lettered at %s, before the expiry", dl.at.Format(time.RFC3339Nano))
		}
		// Nobody ever received it, so no attempt was counted.
		wantDeadLetter(t, dl.Msg, rep, "x", 0, "expired")
		waitGone(t, h.nc, rep.Key)
		got := subscribe(t, h.nc, "ttl.idle")
		quiet(t, got, 3*ackWait, "delivery of an expired message")
	})

	t.Run("without dead letter", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, opts(false))
		dead := subscribe(t, h.nc, deadLetters)
		got := subscribe(t, h.nc, "ttl.quiet")
		rep := schedule(t, h.nc, newMsg("ttl.quiet", "x", "Delay-TTL", "300ms", "Delay", "100ms"))
		next(t, got, "delivery")
		waitGone(t, h.nc, rep.Key)
		if st := h.svc.Stats(); st.Expired != 1 {
			t.Fatalf("stats %+v, want 1 expired", st)
		}
		// Drop what was delivered before the delete; nothing may follow.
		for len(got) > 0 {
			<-got
		}
		quiet(t, got, 3*ackWait, "delivery after expiry")
		quiet(t, dead, 0, "dead letter without DeadLetterExpired")
	})
}

// TestDeadLetter_TermByTag checks that +TERM on $DELAY.ACK with a
// Delay-Tag header works for a message that was never delivered: it is
// dead-lettered with no attempts counted, deleted, and never delivered.
func TestDeadLetter_TermByTag(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *bridge.Config) { c.Delivery.DeadLetterSubject = deadLetters })
	got := subscribe(t, h.nc, "dl.bytag")
	dead := subscribe(t, h.nc, deadLetters)
	// Paused until the +TERM is answered, so the message cannot be
	// delivered before it on a loaded machine.
	resume := pauseSubjects(t, h.nc, "dl.bytag")
	rep := schedule(t, h.nc, newMsg("dl.bytag", "x", "Delay", "300ms", "X-Trace", "t1"))
	m := nats.NewMsg(wire.DefaultAckPrefix)
	m.Header.Set(wire.HeaderTag, rep.Tag)
	m.Data = []byte("+TERM not needed")
	ok, err := h.nc.RequestMsg(m, wait)
	if err != nil || string(ok.Data) != "+OK" {
		t.Fatalf("+TERM by tag: %v, %v; want +OK", ok, err)
	}
	if err := isGone(h.nc, rep.Key); err != nil {
		t.Fatal(err)
	}
	resume()
	wantDeadLetter(t, next(t, dead, "dead letter").Msg, rep, "x", 0, "term: not needed")
	quiet(t, got, time.Until(rep.FireAt.Add(300*time.Millisecond)), "delivery of a TERMed message")
}
