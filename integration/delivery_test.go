package integration_test

import (
	"fmt"
	"github.com/natsdelay/natsdelay/bridge/wire"
	"slices"
	"strings"
	"testing"
	"time"
)

// controlHeaders are the ingest headers that must never reach a consumer
// (Delay-Id comes back, but as the delivery header the service sets).
var controlHeaders = []string{"Delay", "Delay-At", "Delay-TTL", "Delay-Ack", "Delay-Max-Deliver"}

// TestDelivery_Delay_NeverEarly checks the core flow on every engine: a
// message is delivered after its delay and never before, with the delivery
// headers of PROTOCOL.md section 2, the publisher's other headers and
// payload unchanged, no control header passed on, and an ACK deletes it.
func TestDelivery_Delay_NeverEarly(t *testing.T) {
	t.Parallel()
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			srv := startServer(t)
			startService(t, srv, e.open(t, t.TempDir()), nil)
			nc := connect(t, srv)
			got := subscribe(t, nc, "orders.reminder")

			const delay = 300 * time.Millisecond
			m := newMsg("orders.reminder", `{"order":42}`,
				"dElAy", "300ms", // control headers are matched without regard to case
				"Delay-TTL", "1h",
				"Delay-Id", "order-42",
				"Delay-Ack", "explicit",
				"Delay-Max-Deliver", "5",
				"X-Trace", "abc",
				"X-Trace", "def",
				"content-type", "application/json")
			sent := time.Now()
			rep := schedule(t, nc, m)
			accepted := time.Now()
			if rep.Subject != "orders.reminder" {
				t.Fatalf("reply subject = %q, want orders.reminder", rep.Subject)
			}
			// fire_at has whole milliseconds, truncated.
			if rep.FireAt.Before(sent.Add(delay-time.Millisecond)) || rep.FireAt.After(accepted.Add(delay)) {
				t.Fatalf("fire_at %s, want %v after a time in [%s, %s]", rep.FireAtRaw, delay, sent.Format(time.RFC3339Nano), accepted.Format(time.RFC3339Nano))
			}
			if n := pending(t, nc); n != 1 {
				t.Fatalf("pending after the reply = %d, want 1: the reply comes after the commit", n)
			}

			r := next(t, got, "delivery")
			notEarly(t, r, sent.Add(delay))
			if string(r.Data) != `{"order":42}` {
				t.Fatalf("payload %q", r.Data)
			}
			h := r.Header
			if h.Get(wire.HeaderTag) != rep.Tag || r.Reply != wire.DefaultAckPrefix+"."+rep.Tag {
				t.Fatalf("tag %q, reply %q; want the reply's tag %s", h.Get(wire.HeaderTag), r.Reply, rep.Tag)
			}
			wantAttempt(t, r.Msg, 1)
			if h.Get(wire.HeaderFireAt) != rep.FireAtRaw {
				t.Fatalf("%s = %q, want the reply's fire_at %q", wire.HeaderFireAt, h.Get(wire.HeaderFireAt), rep.FireAtRaw)
			}
			enq := parseTime(t, h.Get(wire.HeaderEnqueuedAt))
			if enq.Before(sent.Truncate(time.Millisecond)) || enq.After(accepted) {
				t.Fatalf("%s = %s, want between %s and %s", wire.HeaderEnqueuedAt, enq, sent, accepted)
			}
			if h.Get(wire.HeaderID) != "order-42" {
				t.Fatalf("%s = %q, want order-42", wire.HeaderID, h.Get(wire.HeaderID))
			}
			if !slices.Equal(h.Values("X-Trace"), []string{"abc", "def"}) || h.Get("content-type") != "application/json" {
				t.Fatalf("passthrough headers changed: %v", h)
			}
			for name := range h {
				for _, c := range controlHeaders {
					if strings.EqualFold(name, c) {
						t.Fatalf("control header %s passed on: %v", name, h)
					}
				}
			}

			ackSync(t, nc, r.Msg, "")
			if n := pending(t, nc); n != 0 {
				t.Fatalf("pending after ACK = %d, want 0", n)
			}
			if err := isGone(nc, rep.Key); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestDelivery_FireTimeForms checks that every accepted way of saying when
// (Delay as a duration or integer milliseconds, Delay-At as RFC 3339 or
// Unix seconds, a past Delay-At, nothing at all) sets the fire time it
// says, and that the message is not delivered before it.
func TestDelivery_FireTimeForms(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	// at is a fire time in whole milliseconds, a little ahead of when the
	// case runs; each case builds its headers from it.
	type when func(at time.Time) []string
	cases := []struct {
		name   string
		hdr    when
		delay  time.Duration // relative to the request, when neither exact nor dueNow
		exact  func(at time.Time) time.Time
		dueNow bool
	}{
		{name: "Delay duration", hdr: fixed("Delay", "250ms"), delay: 250 * time.Millisecond},
		{name: "Delay milliseconds", hdr: fixed("Delay", "300"), delay: 300 * time.Millisecond},
		{name: "Delay-At RFC 3339", hdr: func(at time.Time) []string { return []string{"Delay-At", at.Format(time.RFC3339Nano)} }},
		{name: "Delay-At RFC 3339 offset", hdr: func(at time.Time) []string {
			return []string{"Delay-At", at.In(time.FixedZone("x", 5*3600+1800)).Format(time.RFC3339Nano)}
		}},
		{name: "Delay-At Unix seconds", hdr: func(at time.Time) []string {
			return []string{"Delay-At", fmt.Sprintf("%d.%03d", at.Unix(), at.Nanosecond()/1e6)}
		}},
		{name: "Delay-At whole Unix seconds", hdr: func(at time.Time) []string { return []string{"Delay-At", fmt.Sprint(at.Unix() + 1)} },
			exact: func(at time.Time) time.Time { return time.Unix(at.Unix()+1, 0) }},
		{name: "Delay-At in the past", hdr: fixed("Delay-At", "2001-02-03T04:05:06Z"), dueNow: true},
		{name: "no fire time", hdr: fixed(), dueNow: true},
		{name: "Delay zero", hdr: fixed("Delay", "0s"), dueNow: true},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			subj := fmt.Sprintf("forms.%d", i)
			got := subscribe(t, h.nc, subj)
			sent := time.Now()
			at := sent.Add(400 * time.Millisecond).Truncate(time.Millisecond)
			rep := schedule(t, h.nc, newMsg(subj, c.name, c.hdr(at)...))
			accepted := time.Now()
			var want time.Time
			switch {
			case c.exact != nil || (c.delay == 0 && !c.dueNow):
				want = at
				if c.exact != nil {
					want = c.exact(at)
				}
				if !rep.FireAt.Equal(want) {
					t.Fatalf("fire_at %s, want %s", rep.FireAtRaw, want.UTC().Format(time.RFC3339Nano))
				}
			case c.dueNow:
				want = sent
				if rep.FireAt.Before(sent.Truncate(time.Millisecond)) || rep.FireAt.After(accepted) {
					t.Fatalf("fire_at %s, want the time of acceptance, in [%s, %s]", rep.FireAtRaw, sent, accepted)
				}
			default:
				want = sent.Add(c.delay)
				if rep.FireAt.Before(sent.Add(c.delay-time.Millisecond)) || rep.FireAt.After(accepted.Add(c.delay)) {
					t.Fatalf("fire_at %s, want %v after acceptance, in [%s, %s]", rep.FireAtRaw, c.delay, sent, accepted)
				}
			}
			r := next(t, got, "delivery")
			notEarly(t, r, want)
			if string(r.Data) != c.name || r.Header.Get(wire.HeaderFireAt) != rep.FireAtRaw {
				t.Fatalf("delivery %q with headers %v, want %q fired at %s", r.Data, r.Header, c.name, rep.FireAtRaw)
			}
			ackSync(t, h.nc, r.Msg, "+ACK")
		})
	}
}

// fixed is a case's headers that do not depend on the fire time.
func fixed(hdr ...string) func(time.Time) []string {
	return func(time.Time) []string { return hdr }
}
