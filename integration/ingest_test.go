package integration_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge"
	"github.com/natsdelay/natsdelay/bridge/wire"
)

// badInputs are ingest messages the service must refuse with a 400. want
// is a part of the description that says what was wrong.
var badInputs = []struct {
	name   string
	target string // default bad.t
	hdr    []string
	data   string
	want   string
}{
	{name: "unparsable delay", hdr: []string{"Delay", "90x"}, want: `Delay "90x": want a Go duration`},
	{name: "negative delay", hdr: []string{"Delay", "-5s"}, want: "must not be negative"},
	{name: "negative milliseconds", hdr: []string{"Delay", "-5"}, want: `Delay "-5"`},
	{name: "delay 1e400", hdr: []string{"Delay", "1e400"}, want: `Delay "1e400"`},
	{name: "milliseconds overflow", hdr: []string{"Delay", "99999999999999999999"}, want: "too large"},
	{name: "delay past 2262", hdr: []string{"Delay", "2500000h"}, want: "latest that can be stored"},
	{name: "empty delay", hdr: []string{"Delay", ""}, want: "Delay is empty"},
	{name: "Delay and Delay-At", hdr: []string{"Delay", "1s", "Delay-At", "2030-01-01T00:00:00Z"}, want: "both Delay and Delay-At"},
	{name: "Delay-At year 0", hdr: []string{"Delay-At", "0000-01-01T00:00:00Z"}, want: "before 1970"},
	{name: "Delay-At year 10000", hdr: []string{"Delay-At", "10000-01-01T00:00:00Z"}, want: "want RFC 3339"},
	{name: "Delay-At garbage", hdr: []string{"Delay-At", "next tuesday"}, want: `Delay-At "next tuesday"`},
	{name: "Delay-At bad month", hdr: []string{"Delay-At", "2030-13-01T00:00:00Z"}, want: "want RFC 3339"},
	{name: "Delay-At no zone", hdr: []string{"Delay-At", "2030-01-01T00:00:00"}, want: "want RFC 3339"},
	{name: "Delay-At too many decimals", hdr: []string{"Delay-At", "1798135200.1234567891"}, want: "Delay-At"},
	{name: "Delay-At Unix past 2262", hdr: []string{"Delay-At", "99999999999"}, want: "latest time that can be stored"},
	{name: "Delay-At negative Unix", hdr: []string{"Delay-At", "-1"}, want: `Delay-At "-1"`},
	{name: "empty Delay-At", hdr: []string{"Delay-At", ""}, want: "Delay-At"},
	{name: "TTL garbage", hdr: []string{"Delay-TTL", "abc"}, want: `Delay-TTL "abc"`},
	{name: "TTL zero", hdr: []string{"Delay-TTL", "0"}, want: "want a positive duration"},
	{name: "TTL negative", hdr: []string{"Delay-TTL", "-1s"}, want: "must not be negative"},
	{name: "TTL past 2262", hdr: []string{"Delay-TTL", "2500000h"}, want: "latest that can be stored"},
	{name: "max deliver zero", hdr: []string{"Delay-Max-Deliver", "0"}, want: `Delay-Max-Deliver "0": want a positive integer`},
	{name: "max deliver negative", hdr: []string{"Delay-Max-Deliver", "-1"}, want: `Delay-Max-Deliver "-1"`},
	{name: "max deliver not a number", hdr: []string{"Delay-Max-Deliver", "many"}, want: `Delay-Max-Deliver "many"`},
	{name: "max deliver overflow", hdr: []string{"Delay-Max-Deliver", "4294967296"}, want: "up to 4294967295"},
	{name: "bad Delay-Ack", hdr: []string{"Delay-Ack", "maybe"}, want: `Delay-Ack "maybe": want explicit or none`},
	{name: "delay beyond time.Duration", hdr: []string{"Delay", "10000000h"}, want: `Delay "10000000h"`},
	{name: "control character in target", target: "a.\x7fb", want: "control character"},
	{name: "target not UTF-8", target: "a.\xffb", want: "not valid UTF-8"},
	{name: "wildcard", target: "a.*", want: "wildcard"},
	{name: "full wildcard", target: "a.>", want: "wildcard"},
	{name: "inside the ack prefix", target: "$DELAY.ACK.x", want: `inside the service's own prefix "$DELAY.ACK"`},
	{name: "the ack prefix", target: "$DELAY.ACK", want: "own prefix"},
	{name: "inside the ingest prefix", target: "delay.x", want: `own prefix "delay"`},
	{name: "inside the API prefix", target: "$DELAY.API.INFO", want: "own prefix"},
	{name: "micro subjects", target: "$SRV.PING", want: "own prefix"},
	{name: "payload over the limit", data: strings.Repeat("x", 1025), want: "payload is 1025 bytes: the limit is 1024"},
	{name: "Delay-Id control char", hdr: []string{"Delay-Id", "a\x01b"}, want: "control character"},
	{name: "Delay-Id tab", hdr: []string{"Delay-Id", "a\tb"}, want: "control character"},
	{name: "empty Delay-Id", hdr: []string{"Delay-Id", ""}, want: "Delay-Id is empty"},
	{name: "Delay-Id too long", hdr: []string{"Delay-Id", strings.Repeat("i", 257)}, want: "the limit is 256"},
	{name: "header value not UTF-8", hdr: []string{"X-Bin", "a\xffb"}, want: "X-Bin value"},
	{name: "Delay twice", hdr: []string{"Delay", "1s", "Delay", "2s"}, want: "Delay given 2 times"},
	{name: "Delay twice, two spellings", hdr: []string{"Delay", "1s", "delay", "1s"}, want: "Delay given 2 times"},
	{name: "Delay-Id twice", hdr: []string{"Delay-Id", "a", "Delay-Id", "b"}, want: "Delay-Id given 2 times"},
	{name: "Delay-TTL twice", hdr: []string{"Delay-TTL", "1s", "DELAY-TTL", "1s"}, want: "Delay-TTL given 2 times"},
	{name: "debounce without id", hdr: []string{"Delay-Debounce", "30s"}, want: "Delay-Debounce without Delay-Id"},
	{name: "debounce with Delay", hdr: []string{"Delay-Debounce", "30s", "Delay-Id", "d", "Delay", "1s"}, want: "the debounce sets the fire time"},
	{name: "debounce with Delay-At", hdr: []string{"Delay-Debounce", "30s", "Delay-Id", "d", "Delay-At", "2030-01-01T00:00:00Z"}, want: "the debounce sets the fire time"},
	{name: "debounce recurring", hdr: []string{"Delay-Debounce", "30s", "Delay-Id", "d", "Delay-Every", "1h"}, want: "Delay-Debounce on a recurring schedule"},
	{name: "debounce zero", hdr: []string{"Delay-Debounce", "0", "Delay-Id", "d"}, want: `Delay-Debounce "0": want a positive duration`},
	{name: "debounce garbage", hdr: []string{"Delay-Debounce", "soon", "Delay-Id", "d"}, want: `Delay-Debounce "soon"`},
	{name: "debounce max alone", hdr: []string{"Delay-Debounce-Max", "5m", "Delay-Id", "d"}, want: "Delay-Debounce-Max without Delay-Debounce"},
	{name: "throttle without id", hdr: []string{"Delay-Throttle", "1m"}, want: "Delay-Throttle without Delay-Id"},
	{name: "throttle with Delay", hdr: []string{"Delay-Throttle", "1m", "Delay-Id", "t", "Delay", "1s"}, want: "the throttle sets the fire time"},
	{name: "throttle recurring", hdr: []string{"Delay-Throttle", "1m", "Delay-Id", "t", "Delay-Cron", "@daily"}, want: "Delay-Throttle on a recurring schedule"},
	{name: "throttle with debounce", hdr: []string{"Delay-Throttle", "1m", "Delay-Id", "t", "Delay-Debounce", "1m"}, want: "Delay-Throttle with Delay-Debounce"},
	{name: "throttle negative", hdr: []string{"Delay-Throttle", "-1s", "Delay-Id", "t"}, want: `Delay-Throttle "-1s"`},
	{name: "throttle twice", hdr: []string{"Delay-Throttle", "1m", "delay-throttle", "2m", "Delay-Id", "t"}, want: "Delay-Throttle given 2 times"},
	{name: "debounce max shorter", hdr: []string{"Delay-Debounce", "30s", "Delay-Debounce-Max", "10s", "Delay-Id", "d"}, want: "want at least the debounce"},
	{name: "exclude not recurring", hdr: []string{"Delay-Exclude", "2026-12-25"}, want: "Delay-Exclude without Delay-Every or Delay-Cron"},
	{name: "exclude bad date", hdr: []string{"Delay-Every", "1h", "Delay-Exclude", "2026-12-25,2026-02-30"}, want: `Delay-Exclude "2026-12-25,2026-02-30": "2026-02-30": want dates such as 2026-12-25`},
	{name: "exclude range backwards", hdr: []string{"Delay-Cron", "0 9 * * *", "Delay-Exclude", "2027-02-07..2027-02-01"}, want: "the range ends before it starts"},
	{name: "exclude empty", hdr: []string{"Delay-Every", "1h", "Delay-Exclude", ""}, want: `Delay-Exclude ""`},
	{name: "jitter not recurring", hdr: []string{"Delay-Jitter", "30s"}, want: "Delay-Jitter without Delay-Every or Delay-Cron"},
	{name: "jitter zero", hdr: []string{"Delay-Every", "1h", "Delay-Jitter", "0"}, want: `Delay-Jitter "0": want a positive duration`},
	{name: "jitter garbage", hdr: []string{"Delay-Every", "1h", "Delay-Jitter", "some"}, want: `Delay-Jitter "some"`},
	{name: "jitter as long as the interval", hdr: []string{"Delay-Every", "1m", "Delay-Jitter", "1m"}, want: "come as little as 1m0s apart: want less than that"},
	{name: "jitter over the cron gap", hdr: []string{"Delay-Cron", "*/15 9-17 * * MON-FRI", "Delay-Jitter", "20m"}, want: "come as little as 15m0s apart"},
}

// badMsg builds the ingest message of bad input i.
func badMsg(i int) *nats.Msg {
	b := badInputs[i]
	target := b.target
	if target == "" {
		target = "bad.t"
	}
	return newMsg(target, b.data, b.hdr...)
}

// TestIngest_BadInput checks that every kind of bad input is refused with
// a 400 in the micro convention (Nats-Service-Error and
// Nats-Service-Error-Code headers, and a JSON error body) that says what
// was wrong, and that nothing is stored: no pending message and no event
// ID is used (the next valid message gets the next ID in its tag).
func TestIngest_BadInput(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *bridge.Config) { c.MaxPayload = 1024 })
	// Something already stored, so "unchanged" is not just "empty".
	last := schedule(t, h.nc, newMsg("bad.t", "ok", "Delay", "1h"))
	for i, b := range badInputs {
		t.Run(b.name, func(t *testing.T) {
			before := pending(t, h.nc)
			rep, err := h.nc.RequestMsg(badMsg(i), wait)
			if err != nil {
				t.Fatalf("request: %v", err)
			}
			wantError(t, b.name, rep, 400, b.want)
			// The error is sent without storing anything, and a valid
			// message would have been committed before its reply.
			if p := pending(t, h.nc); p != before {
				t.Fatalf("pending %d after a refused message, want %d", p, before)
			}
			valid := schedule(t, h.nc, newMsg("bad.t", "ok", "Delay", "1h"))
			prev := last.Key.EventID()
			last = valid
			if id := valid.Key.EventID(); id != prev+1 {
				t.Fatalf("event id %d after a refused message, want %d: the refused one took an ID", id, prev+1)
			}
		})
	}
}

// TestIngest_BadInput_NoReply checks that an invalid plain publish, which
// has nobody to tell, is never stored either.
func TestIngest_BadInput_NoReply(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *bridge.Config) { c.MaxPayload = 1024 })
	for i := range badInputs {
		if err := h.nc.PublishMsg(badMsg(i)); err != nil {
			t.Fatal(err)
		}
	}
	// The service handles ingest in order, so once this valid request is
	// answered every publish before it has been handled.
	valid := schedule(t, h.nc, newMsg("bad.t", "ok", "Delay", "1h"))
	if p, id := pending(t, h.nc), valid.Key.EventID(); p != 1 || id != 1 {
		t.Fatalf("pending %d, the valid message's event id %d; want only the valid message stored, with the first ID (1, 1)", p, id)
	}
}

// TestIngest_Limits checks the edges that must still be accepted: a
// payload of exactly the limit, the longest Delay-Id, the largest max
// deliver, and control header values with surrounding space.
func TestIngest_Limits(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *bridge.Config) { c.MaxPayload = 1024 })
	for _, m := range []*nats.Msg{
		newMsg("edge.t", strings.Repeat("x", 1024), "Delay", "1h"),
		newMsg("edge.t", "", "Delay", "1h", "Delay-Id", strings.Repeat("i", 256)),
		newMsg("edge.t", "", "Delay", "1h", "Delay-Max-Deliver", "4294967295"),
		newMsg("edge.t", "", "Delay", " 1h ", "Delay-TTL", " 1s", "Delay-Ack", "None "),
	} {
		schedule(t, h.nc, m)
	}
	if n := pending(t, h.nc); n != 4 {
		t.Fatalf("pending = %d, want 4", n)
	}
}

// TestIngest_EmptyToken checks targets with an empty token. nats-server
// itself does not route a subject with an empty token (delay.a..b,
// delay.a., delay.) to the delay.> subscription, so the publisher learns
// of "no responders" instead of getting a 400; either way nothing may be
// stored.
func TestIngest_EmptyToken(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	for _, subj := range []string{"delay.a..b", "delay.a.", "delay."} {
		rep, err := h.nc.RequestMsg(&nats.Msg{Subject: subj}, wait)
		switch {
		case errors.Is(err, nats.ErrNoResponders):
		case err != nil:
			t.Fatalf("%s: %v", subj, err)
		default:
			wantError(t, subj, rep, 400, "empty")
		}
	}
	if p := pending(t, h.nc); p != 0 {
		t.Fatalf("pending %d, want nothing stored", p)
	}
	if id := schedule(t, h.nc, newMsg("empty.ok", "x", "Delay", "1h")).Key.EventID(); id != 1 {
		t.Fatalf("the first valid message has event id %d, want 1: a refused one took an ID", id)
	}
}

// TestIngest_BadInput_SparesOthers checks that a bad message does not fail
// the good ones that arrive with it: messages accepted in the same instant
// are committed together, and each publisher still gets its own answer.
func TestIngest_BadInput_SparesOthers(t *testing.T) {
	t.Parallel()
	const n = 200
	h := newHarness(t, func(c *bridge.Config) { c.MaxPayload = 1024 })
	inbox := nats.NewInbox()
	sub, err := h.nc.SubscribeSync(inbox + ".*")
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		t.Fatal(err)
	}
	// Published back to back, good and bad share group commits.
	for i := range n {
		m := newMsg("spare.t", "good", "Delay", "1h")
		if i%2 == 1 {
			m = badMsg(i / 2 % len(badInputs))
		}
		m.Reply = inbox + "." + strconv.Itoa(i)
		if err := h.nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	for range n {
		rep, err := sub.NextMsg(wait)
		if err != nil {
			t.Fatal(err)
		}
		i, _ := strconv.Atoi(rep.Subject[len(inbox)+1:])
		code := rep.Header.Get(wire.HeaderServiceErrorCode)
		switch {
		case i%2 == 0 && code != "":
			t.Fatalf("good message %d refused: %s %s", i, code, rep.Header.Get(wire.HeaderServiceError))
		case i%2 == 1 && code != "400":
			t.Fatalf("bad message %d (%s): reply %q with headers %v, want a 400", i, badInputs[i/2%len(badInputs)].name, rep.Data, rep.Header)
		}
	}
	if p := pending(t, h.nc); p != n/2 {
		t.Fatalf("pending = %d, want the %d good messages", p, n/2)
	}
}
