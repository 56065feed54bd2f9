package integration_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge"
	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/keys"
)

// TestAck_Done_Deletes checks that an empty payload and +ACK, sent with
// plain msg.Respond, each delete the delivered message and only it.
func TestAck_Done_Deletes(t *testing.T) {
	t.Parallel()
	for _, payload := range []string{"", "+ACK", " +ACK\r\n"} {
		t.Run(fmt.Sprintf("%q", payload), func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, nil)
			got := subscribe(t, h.nc, "ack.done")
			other := schedule(t, h.nc, newMsg("ack.other", "stays", "Delay", "1h"))
			rep := schedule(t, h.nc, newMsg("ack.done", "x"))
			r := next(t, got, "delivery")
			if err := r.Respond([]byte(payload)); err != nil {
				t.Fatal(err)
			}
			waitGone(t, h.nc, rep.Key)
			waitPending(t, h.nc, 1)
			stored(t, h.nc, other.Key)
			quiet(t, got, 200*time.Millisecond, "after ACK")
		})
	}
}

// TestAck_Nak_RedeliversNow checks that -NAK redelivers at once, as
// attempt 2 with the same tag, well before the ack wait would have.
func TestAck_Nak_RedeliversNow(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *bridge.Config) { c.Delivery.AckWait = time.Minute })
	got := subscribe(t, h.nc, "ack.nak")
	rep := schedule(t, h.nc, newMsg("ack.nak", "x"))
	r1 := next(t, got, "first delivery")
	wantAttempt(t, r1.Msg, 1)
	ackSync(t, h.nc, r1.Msg, "-NAK")
	// next gives up after 10s, far less than the minute of ack wait, so
	// this delivery comes from the NAK.
	r2 := next(t, got, "redelivery after -NAK")
	wantAttempt(t, r2.Msg, 2)
	if r2.Header.Get(wire.HeaderTag) != rep.Tag || string(r2.Data) != "x" {
		t.Fatalf("redelivery %q with headers %v, want tag %s", r2.Data, r2.Header, rep.Tag)
	}
	ackSync(t, h.nc, r2.Msg, "+ACK")
	waitPending(t, h.nc, 0)
}

// TestAck_NakDelay_NotBefore checks that -NAK with a delay, in either
// form, redelivers after that delay and not before.
func TestAck_NakDelay_NotBefore(t *testing.T) {
	t.Parallel()
	const delay = 300 * time.Millisecond
	for _, payload := range []string{"-NAK 300ms", `-NAK {"delay": 300000000}`} {
		t.Run(payload, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, func(c *bridge.Config) { c.Delivery.AckWait = time.Minute })
			got := subscribe(t, h.nc, "ack.nakdelay")
			schedule(t, h.nc, newMsg("ack.nakdelay", "x"))
			r1 := next(t, got, "first delivery")
			nakAt := time.Now()
			ackSync(t, h.nc, r1.Msg, payload)
			r2 := next(t, got, "redelivery after "+payload)
			if d := r2.at.Sub(nakAt); d < delay {
				t.Fatalf("redelivered %v after %q, want at least %v", d, payload, delay)
			}
			wantAttempt(t, r2.Msg, 2)
			ackSync(t, h.nc, r2.Msg, "")
			waitPending(t, h.nc, 0)
		})
	}
}

// TestAck_NoAnswer_RedeliversAfterAckWait checks that a delivery nobody
// answers is redelivered once the ack wait has run out, as attempt 2, and
// not before.
func TestAck_NoAnswer_RedeliversAfterAckWait(t *testing.T) {
	t.Parallel()
	// NB: long enough that the ACK of the redelivery arrives within its
	// ack wait on a loaded machine; a shorter one let a third attempt go
	// out, rightly, before the ACK was applied.
	const ackWait = time.Second
	h := newHarness(t, func(c *bridge.Config) { c.Delivery.AckWait = ackWait })
	got := subscribe(t, h.nc, "ack.silent")
	rep := schedule(t, h.nc, newMsg("ack.silent", "x"))
	r1 := next(t, got, "first delivery")
	wantAttempt(t, r1.Msg, 1)
	r2 := next(t, got, "redelivery")
	wantAttempt(t, r2.Msg, 2)
	// The first delivery went out at its fire time at the earliest, so
	// the ack wait cannot have ended before fire time + ack wait.
	if earliest := rep.FireAt.Add(ackWait); r2.at.Before(earliest) {
		t.Fatalf("redelivered at %s, before fire time + ack wait %s", r2.at.Format(time.RFC3339Nano), earliest.Format(time.RFC3339Nano))
	}
	if r2.Header.Get(wire.HeaderTag) != rep.Tag {
		t.Fatalf("redelivery tag %q, want %s", r2.Header.Get(wire.HeaderTag), rep.Tag)
	}
	ackSync(t, h.nc, r2.Msg, "+ACK")
	waitPending(t, h.nc, 0)
	quiet(t, got, 2*ackWait, "after ACK of the redelivery")
}

// TestAck_Progress_ExtendsAckWait checks that +WPI restarts the ack wait:
// a consumer that keeps saying it is working for longer than the ack wait
// gets no redelivery, and its final ACK settles the message.
func TestAck_Progress_ExtendsAckWait(t *testing.T) {
	t.Parallel()
	const (
		ackWait  = 2 * time.Second // NB: long enough for a loaded machine to keep the pace
		interval = ackWait / 4
		rounds   = 6 // 1.5 ack waits in all
	)
	h := newHarness(t, func(c *bridge.Config) { c.Delivery.AckWait = ackWait })
	got := subscribe(t, h.nc, "ack.wpi")
	rep := schedule(t, h.nc, newMsg("ack.wpi", "x"))
	r := next(t, got, "delivery")
	start := time.Now()
	for range rounds {
		// The pause is the consumer's work; a redelivery during it fails.
		quiet(t, got, interval, "redelivery while the consumer reports progress")
		ackSync(t, h.nc, r.Msg, "+WPI")
	}
	if worked := time.Since(start); worked <= ackWait {
		t.Fatalf("worked only %v, want more than the ack wait %v", worked, ackWait)
	}
	ackSync(t, h.nc, r.Msg, "+ACK")
	if err := isGone(h.nc, rep.Key); err != nil {
		t.Fatal(err)
	}
	if st := h.svc.Stats(); st.Progress != rounds || st.Redelivered != 0 {
		t.Fatalf("stats %+v, want %d progress reports and no redelivery", st, rounds)
	}
}

// TestAck_Sync checks the ack sync and ack by header: an ACK with a reply
// is answered +OK once applied; an ACK (or NAK, WPI, TERM) for an unknown
// or already settled tag is also +OK and changes nothing; a message on
// $DELAY.ACK with a Delay-Tag header acknowledges that tag; bad acks are
// answered 400 and leave the message in flight.
func TestAck_Sync(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *bridge.Config) { c.Delivery.AckWait = time.Minute })
	got := subscribe(t, h.nc, "ack.sync")
	bystander := schedule(t, h.nc, newMsg("ack.bystander", "stays", "Delay", "1h"))

	t.Run("unknown tag", func(t *testing.T) {
		unknown := keys.New(keys.TopicHash("ack.sync"), 1, 1<<40).Tag()
		for _, p := range []string{"", "+ACK", "-NAK", "-NAK 1s", "+WPI", "+TERM why"} {
			rep, err := h.nc.Request(wire.DefaultAckPrefix+"."+unknown, []byte(p), wait)
			if err != nil || string(rep.Data) != "+OK" {
				t.Fatalf("%q for an unknown tag: %v, %v; want +OK", p, rep, err)
			}
		}
		if n := pending(t, h.nc); n != 1 {
			t.Fatalf("pending = %d, want 1", n)
		}
	})

	t.Run("already settled", func(t *testing.T) {
		rep := schedule(t, h.nc, newMsg("ack.sync", "one"))
		r := next(t, got, "delivery")
		ackSync(t, h.nc, r.Msg, "+ACK")
		if err := isGone(h.nc, rep.Key); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{"+ACK", "", "-NAK", "+WPI", "+TERM late"} {
			ackSync(t, h.nc, r.Msg, p)
		}
		quiet(t, got, 200*time.Millisecond, "after acks of a settled tag")
		if n := pending(t, h.nc); n != 1 {
			t.Fatalf("pending = %d, want 1 (the bystander)", n)
		}
	})

	t.Run("by header", func(t *testing.T) {
		for _, name := range []string{wire.HeaderTag, "delay-tag"} {
			rep := schedule(t, h.nc, newMsg("ack.sync", "two"))
			r := next(t, got, "delivery")
			m := nats.NewMsg(wire.DefaultAckPrefix)
			m.Header.Set(name, rep.Tag)
			m.Data = []byte("+ACK")
			ok, err := h.nc.RequestMsg(m, wait)
			if err != nil || string(ok.Data) != "+OK" {
				t.Fatalf("ACK by header %s: %v, %v; want +OK", name, ok, err)
			}
			if err := isGone(h.nc, tagKey(t, r.Msg)); err != nil {
				t.Fatal(err)
			}
		}
		// A plain publish works too, without confirmation.
		rep := schedule(t, h.nc, newMsg("ack.sync", "three"))
		next(t, got, "delivery")
		m := nats.NewMsg(wire.DefaultAckPrefix)
		m.Header.Set(wire.HeaderTag, rep.Tag)
		if err := h.nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
		waitGone(t, h.nc, rep.Key)
	})

	t.Run("bad acks", func(t *testing.T) {
		rep := schedule(t, h.nc, newMsg("ack.sync", "four"))
		r := next(t, got, "delivery")
		noTag := nats.NewMsg(wire.DefaultAckPrefix)
		noTag.Data = []byte("+ACK")
		twoTags := nats.NewMsg(wire.DefaultAckPrefix)
		twoTags.Header.Add(wire.HeaderTag, rep.Tag)
		twoTags.Header.Add(wire.HeaderTag, rep.Tag)
		bad := []struct {
			name string
			m    *nats.Msg
			want string
		}{
			{"unknown verb", &nats.Msg{Subject: r.Reply, Data: []byte("+NOPE")}, "+NOPE"},
			{"+ACK with junk", &nats.Msg{Subject: r.Reply, Data: []byte("+ACK now")}, "+ACK now"},
			{"bad NAK delay", &nats.Msg{Subject: r.Reply, Data: []byte("-NAK soon")}, "soon"},
			{"negative NAK delay", &nats.Msg{Subject: r.Reply, Data: []byte("-NAK -5s")}, "-5s"},
			{"bad NAK JSON", &nats.Msg{Subject: r.Reply, Data: []byte(`-NAK {"delay": "5s"}`)}, "delay"},
			{"tag not hex", &nats.Msg{Subject: wire.DefaultAckPrefix + "." + strings.Repeat("z", 48)}, "zzzz"},
			{"tag too short", &nats.Msg{Subject: wire.DefaultAckPrefix + ".abc"}, "abc"},
			{"extra token", &nats.Msg{Subject: r.Reply + ".x"}, "x"},
			{"no Delay-Tag header", noTag, wire.HeaderTag},
			{"two Delay-Tag headers", twoTags, wire.HeaderTag},
		}
		for _, b := range bad {
			rep, err := h.nc.RequestMsg(b.m, wait)
			if err != nil {
				t.Fatalf("%s: %v", b.name, err)
			}
			wantError(t, b.name, rep, 400, b.want)
		}
		// None of that touched the message: it is still in flight, and a
		// proper ACK settles it.
		stored(t, h.nc, rep.Key)
		quiet(t, got, 200*time.Millisecond, "after bad acks")
		ackSync(t, h.nc, r.Msg, "")
		if err := isGone(h.nc, rep.Key); err != nil {
			t.Fatal(err)
		}
	})

	stored(t, h.nc, bystander.Key)
}

// wantError fails tb unless rep is an error answer in the micro convention
// with code, whose description mentions want.
func wantError(tb testing.TB, what string, rep *nats.Msg, code int, want string) {
	tb.Helper()
	desc := rep.Header.Get(wire.HeaderServiceError)
	if got := rep.Header.Get(wire.HeaderServiceErrorCode); got != fmt.Sprint(code) || desc == "" {
		tb.Fatalf("%s: reply %q with headers %v, want a %d error", what, rep.Data, rep.Header, code)
	}
	var body struct {
		Error *struct {
			Code        int    `json:"code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(rep.Data, &body); err != nil || body.Error == nil {
		tb.Fatalf("%s: body %q: want {\"error\":{...}} (%v)", what, rep.Data, err)
	}
	if body.Error.Code != code || body.Error.Description != desc {
		tb.Fatalf("%s: body %q disagrees with headers %v", what, rep.Data, rep.Header)
	}
	if !strings.Contains(desc, want) {
		tb.Fatalf("%s: description %q does not mention %q", what, desc, want)
	}
}

// TestAck_Backoff_AfterAckWait checks the configured backoff: after an
// unanswered attempt N the redelivery waits the ack wait plus the Nth
// backoff value, the last value repeating.
func TestAck_Backoff_AfterAckWait(t *testing.T) {
	t.Parallel()
	const ackWait = 100 * time.Millisecond
	backoff := []time.Duration{300 * time.Millisecond, 150 * time.Millisecond}
	h := newHarness(t, func(c *bridge.Config) { c.Delivery.AckWait = ackWait; c.Delivery.Backoff = backoff })
	got := subscribe(t, h.nc, "ack.backoff")
	rep := schedule(t, h.nc, newMsg("ack.backoff", "x"))
	// The first delivery goes out at its fire time at the earliest, and
	// each later one at least an ack wait plus a backoff after the one
	// before, so the bounds add up from the fire time.
	earliest := rep.FireAt
	for n := 1; n <= 4; n++ {
		r := next(t, got, fmt.Sprintf("attempt %d", n))
		wantAttempt(t, r.Msg, n)
		if r.at.Before(earliest) {
			t.Fatalf("attempt %d at %s, want not before %s", n, r.at.Format(time.RFC3339Nano), earliest.Format(time.RFC3339Nano))
		}
		earliest = earliest.Add(ackWait + backoff[min(n-1, len(backoff)-1)])
	}
}
