package integration_test

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge"
	"github.com/natsdelay/natsdelay/bridge/wire"
)

// outcome is what a hostile input must lead to.
type outcome int

const (
	// rejected: a 400 in the micro convention, and nothing stored.
	rejected outcome = iota
	// unroutable: the server never hands it to the service (no responders).
	unroutable
	// accepted: legal, if odd; it is stored and delivered unchanged.
	accepted
)

// wantCode fails tb unless rep is an error answer with code.
func wantCode(tb testing.TB, what string, rep *nats.Msg, code int) {
	tb.Helper()
	if got := rep.Header.Get(wire.HeaderServiceErrorCode); got != strconv.Itoa(code) {
		tb.Fatalf("%s: reply %q with headers %v, want a %d", what, clip(rep.Data), rep.Header, code)
	}
	var body struct {
		Error wire.ServiceError `json:"error"`
	}
	if err := json.Unmarshal(rep.Data, &body); err != nil || body.Error.Code != code || body.Error.Description == "" {
		tb.Fatalf("%s: body %q, want {\"error\":{\"code\":%d,...}}", what, clip(rep.Data), code)
	}
}

func clip(b []byte) []byte {
	if len(b) > 200 {
		return append(b[:200:200], "..."...)
	}
	return b
}

// garbage returns n random byte strings that are not valid ACKs: random
// bytes, and the ack words followed by junk. With ascii they hold no CR or
// LF, so they can be header values.
func garbage(r *rand.Rand, n int, ascii bool) [][]byte {
	out := make([][]byte, 0, n)
	for len(out) < n {
		b := make([]byte, 1+r.IntN(200))
		for i := range b {
			b[i] = byte(r.UintN(256))
			if ascii {
				b[i] = byte(' ' + 1 + r.UintN('~'-' '))
			}
		}
		if t := bytes.TrimSpace(b); len(t) == 0 || t[0] == '+' || t[0] == '-' {
			continue // could be a real ACK word
		}
		if len(out)%4 == 1 && !ascii {
			// A known word with junk after it is no ACK either.
			words := []string{"+ACK ", "+WPI ", "-NAK ", "-NAK {", "+ACK\t"}
			b = append([]byte(words[r.IntN(len(words))]), b...)
		}
		out = append(out, b)
	}
	return out
}

// TestHostile_Input_ServiceKeepsServing sends the service input meant to
// break it, through a real server: every bad input gets a clear 400 or is
// a harmless no-op, nothing unexpected is stored, and afterwards a normal
// schedule, delivery and ACK still work.
func TestHostile_Input_ServiceKeepsServing(t *testing.T) {
	const maxPayload = 4 << 10
	h := newHarness(t, func(c *bridge.Config) { c.MaxPayload = maxPayload })
	deliveries := subscribe(t, h.nc, "hostile.>")
	tried := 0

	msg := func(subject string, hdr ...string) *nats.Msg {
		m := newMsg("", "x", hdr...)
		m.Subject = subject
		return m
	}
	manyHeaders := newMsg("hostile.many", "x")
	for i := range 2000 {
		manyHeaders.Header.Set(fmt.Sprintf("X-H-%04d", i), strconv.Itoa(i))
	}
	bigValue := strings.Repeat("v", 64<<10)

	for _, tc := range []struct {
		name string
		msg  *nats.Msg
		want outcome
	}{
		{"64 KiB header value", newMsg("hostile.big", "x", "X-Big", bigValue), accepted},
		{"2000 headers", manyHeaders, accepted},
		{"64 KiB Delay value", newMsg("hostile.x", "x", "Delay", bigValue), rejected},
		{"non-UTF-8 header value", newMsg("hostile.x", "x", "X-Bin", "\xff\xfe"), rejected},
		{"non-UTF-8 Delay-Id", newMsg("hostile.x", "x", "Delay-Id", "\xc3\x28"), rejected},
		{"control character in Delay-Id", newMsg("hostile.x", "x", "Delay-Id", "a\x01b"), rejected},
		{"257-byte Delay-Id", newMsg("hostile.x", "x", "Delay-Id", strings.Repeat("i", 257)), rejected},
		{"wildcard *", msg("delay.hostile.*"), rejected},
		{"wildcard >", msg("delay.hostile.>"), rejected},
		{"wildcard inside a token", msg("delay.hostile.a*b"), rejected},
		{"non-UTF-8 subject", msg("delay.hostile.\xff"), rejected},
		{"empty token", msg("delay.hostile..x"), unroutable},
		{"empty target", msg("delay."), unroutable},
		{"leading empty token", msg("delay..hostile"), unroutable},
		{"trailing empty token", msg("delay.hostile."), unroutable},
		{"target inside the ingest prefix", msg("delay.delay.hostile"), rejected},
		{"target inside the ack prefix", msg("delay.$DELAY.ACK.x"), rejected},
		{"target inside the API prefix", msg("delay.$DELAY.API.INFO"), rejected},
		{"target inside $SRV", msg("delay.$SRV.PING"), rejected},
		{"Delay -1ms", newMsg("hostile.x", "x", "Delay", "-1ms"), rejected},
		{"Delay -1", newMsg("hostile.x", "x", "Delay", "-1"), rejected},
		{"Delay 9999999h", newMsg("hostile.x", "x", "Delay", "9999999h"), rejected},
		{"Delay 1e400", newMsg("hostile.x", "x", "Delay", "1e400"), rejected},
		{"Delay NaN", newMsg("hostile.x", "x", "Delay", "NaN"), rejected},
		{"Delay empty", newMsg("hostile.x", "x", "Delay", ""), rejected},
		{"Delay 2^63 ms", newMsg("hostile.x", "x", "Delay", "9223372036854775808"), rejected},
		{"Delay past 2262", newMsg("hostile.x", "x", "Delay", "2562047h"), rejected},
		{"Delay twice", newMsg("hostile.x", "x", "Delay", "1s", "delay", "2s"), rejected},
		{"Delay and Delay-At", newMsg("hostile.x", "x", "Delay", "1s", "Delay-At", "1798135200"), rejected},
		{"Delay-At year 0", newMsg("hostile.x", "x", "Delay-At", "0000-01-01T00:00:00Z"), rejected},
		{"Delay-At year 10000", newMsg("hostile.x", "x", "Delay-At", "10000-01-01T00:00:00Z"), rejected},
		{"Delay-At 1969", newMsg("hostile.x", "x", "Delay-At", "1969-12-31T23:59:59Z"), rejected},
		{"Delay-At 2262", newMsg("hostile.x", "x", "Delay-At", "2262-01-01T00:00:00Z"), rejected},
		{"Delay-At 1e400 seconds", newMsg("hostile.x", "x", "Delay-At", "1e400"), rejected},
		{"Delay-At 20 digits", newMsg("hostile.x", "x", "Delay-At", "99999999999999999999"), rejected},
		{"Delay-At 10 decimals", newMsg("hostile.x", "x", "Delay-At", "1798135200.0000000001"), rejected},
		{"Delay-At negative", newMsg("hostile.x", "x", "Delay-At", "-1"), rejected},
		{"Delay-TTL 0", newMsg("hostile.x", "x", "Delay-TTL", "0"), rejected},
		{"Delay-TTL -1s", newMsg("hostile.x", "x", "Delay-TTL", "-1s"), rejected},
		{"Delay-TTL past 2262", newMsg("hostile.x", "x", "Delay-TTL", "2562047h"), rejected},
		{"Delay-Max-Deliver 0", newMsg("hostile.x", "x", "Delay-Max-Deliver", "0"), rejected},
		{"Delay-Max-Deliver 2^32", newMsg("hostile.x", "x", "Delay-Max-Deliver", "4294967296"), rejected},
		{"Delay-Max-Deliver -1", newMsg("hostile.x", "x", "Delay-Max-Deliver", "-1"), rejected},
		{"Delay-Ack maybe", newMsg("hostile.x", "x", "Delay-Ack", "maybe"), rejected},
		{"payload over the limit", newMsg("hostile.x", strings.Repeat("p", maxPayload+1)), rejected},
	} {
		tried++
		rep, err := h.nc.RequestMsg(tc.msg, wait)
		switch tc.want {
		case unroutable:
			if !errors.Is(err, nats.ErrNoResponders) {
				t.Fatalf("%s: reply %v, error %v: want no responders", tc.name, rep, err)
			}
		case rejected:
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			wantCode(t, tc.name, rep, 400)
		case accepted:
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			s := parseScheduled(t, rep.Data)
			d := next(t, deliveries, tc.name)
			if tagKey(t, d.Msg) != s.Key {
				t.Fatalf("%s: delivered %s, scheduled %s", tc.name, tagKey(t, d.Msg), s.Key)
			}
			for name, vals := range tc.msg.Header {
				if got := d.Header.Values(name); len(got) != 1 || got[0] != vals[0] {
					t.Fatalf("%s: header %s delivered as %d values, want it unchanged", tc.name, name, len(got))
				}
			}
			ackSync(t, h.nc, d.Msg, "")
			waitGone(t, h.nc, s.Key)
		}
	}
	waitPending(t, h.nc, 0)

	// ACKs: one message is in flight, and its reply subject and tag get
	// garbage. None of it may settle, NAK or extend it.
	s := schedule(t, h.nc, newMsg("hostile.acked", "x"))
	d := next(t, deliveries, "delivery to ACK")
	r := rand.New(rand.NewPCG(1, 2))
	var acks []*nats.Msg
	for _, p := range garbage(r, 1000, false) {
		acks = append(acks, &nats.Msg{Subject: d.Reply, Data: p})
	}
	for _, p := range garbage(r, 1000, false) {
		m := nats.NewMsg(wire.DefaultAckPrefix)
		m.Header.Set(wire.HeaderTag, s.Tag)
		m.Data = p
		acks = append(acks, m)
	}
	for _, p := range garbage(r, 1000, true) {
		m := nats.NewMsg(wire.DefaultAckPrefix)
		m.Header.Set(wire.HeaderTag, string(p))
		acks = append(acks, m)
	}
	for _, subj := range []string{wire.DefaultAckPrefix + "." + strings.ToUpper(s.Tag), wire.DefaultAckPrefix + "." + s.Tag + ".x",
		wire.DefaultAckPrefix + ".x." + s.Tag, wire.DefaultAckPrefix + ".flush.x", wire.DefaultAckPrefix + "." + s.Tag[:46]} {
		acks = append(acks, &nats.Msg{Subject: subj, Data: []byte("+ACK")})
	}
	for _, p := range []string{`-NAK {"delay": -1}`, `-NAK {"delay": 1e400}`, `-NAK {"delay": "5s"}`, `-NAK {"delay": 1, "x": 2}`, "-NAK -5s", "-NAK 1e400", `-NAK {"delay": 1} {}`} {
		acks = append(acks, &nats.Msg{Subject: d.Reply, Data: []byte(p)})
	}
	acks = append(acks, nats.NewMsg(wire.DefaultAckPrefix)) // no Delay-Tag at all
	for i, rep := range requestMany(t, h.nc, acks) {
		wantCode(t, fmt.Sprintf("ack %d %q on %s", i, clip(acks[i].Data), acks[i].Subject), rep, 400)
	}
	tried += len(acks)

	// Random tags name nothing: a real ACK word for them is a no-op that
	// still answers +OK, and a forged no-responders notice is ignored.
	var random []*nats.Msg
	for range 1000 {
		k := make([]byte, 24)
		for i := range k {
			k[i] = byte(r.UintN(256))
		}
		subj := wire.DefaultAckPrefix + "." + hex.EncodeToString(k)
		forged := nats.NewMsg(subj)
		forged.Header.Set("Status", "503")
		if err := h.nc.PublishMsg(forged); err != nil {
			t.Fatal(err)
		}
		words := []string{"", "+ACK", "+TERM", "-NAK", "+WPI"}
		random = append(random, &nats.Msg{Subject: subj, Data: []byte(words[r.IntN(len(words))])})
	}
	for i, rep := range requestMany(t, h.nc, random) {
		if string(rep.Data) != "+OK" {
			t.Fatalf("ack %q on random tag %s: reply %q with headers %v, want +OK", random[i].Data, random[i].Subject, rep.Data, rep.Header)
		}
	}
	tried += 2 * len(random)

	// The message in flight was not touched: still pending, not
	// redelivered (GET reports the attempt in flight), and its real ACK
	// works.
	if m := stored(t, h.nc, s.Key); m.Attempt != 1 {
		t.Fatalf("attempt = %d after garbage ACKs, want 1", m.Attempt)
	}
	ackSync(t, h.nc, d.Msg, "+ACK")
	waitGone(t, h.nc, s.Key)

	// And the service still serves.
	roundTrip(t, h.nc, "after.hostile")
	waitPending(t, h.nc, 0)
	select {
	case extra := <-deliveries:
		t.Fatalf("unexpected delivery %s with headers %v", extra.Subject, extra.Header)
	default:
	}
	t.Logf("%d bad inputs tried", tried)
}
