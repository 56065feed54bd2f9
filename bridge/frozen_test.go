package bridge_test

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge"
	"github.com/natsdelay/natsdelay/bridge/bridgetest"
	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/keys"
)

// TestSetFrozen_TopicHeldStill checks what a frozen topic's clients see:
// its publishes and the verbs that name one of its messages are 503s,
// its due message is not delivered and an answer to its delivery made
// before the freeze is dropped (the message stays), while another topic
// is served; thawed, it is delivered again.
func TestSetFrozen_TopicHeldStill(t *testing.T) {
	h := bridgetest.New(t, func(c *bridge.Config) { c.Delivery.AckWait = 300 * time.Millisecond })
	nc := h.Conn
	sub, err := nc.SubscribeSync("frz.>")
	if err != nil {
		t.Fatal(err)
	}
	request := func(subject string, body []byte, hdr ...string) (*nats.Msg, error) {
		m := &nats.Msg{Subject: subject, Data: body, Header: nats.Header{}}
		for i := 0; i+1 < len(hdr); i += 2 {
			m.Header.Set(hdr[i], hdr[i+1])
		}
		r, err := nc.RequestMsg(m, 10*time.Second)
		if err == nil {
			err = wire.ParseError(r.Header, r.Data)
		}
		return r, err
	}
	if _, err := request("delay.frz.cold", []byte("first")); err != nil {
		t.Fatal(err)
	}
	first, err := sub.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	cold := keys.TopicHash("frz.cold")
	if err := h.Service.SetFrozen(func(hash uint64) bool { return hash == cold }); err != nil {
		t.Fatal(err)
	}
	if err := first.Respond(nil); err != nil { // dropped: the message stays
		t.Fatal(err)
	}
	if _, err := request("delay.frz.cold", []byte("second")); !errors.Is(err, wire.ErrUnavailable) {
		t.Fatalf("publish to a frozen topic: %v, want a 503", err)
	}
	tag := first.Header.Get(wire.HeaderTag)
	if _, err := request("$DELAY.API.GET", []byte(`{"tag":"`+tag+`"}`)); !errors.Is(err, wire.ErrUnavailable) {
		t.Fatalf("GET of a frozen topic's message: %v, want a 503", err)
	}
	if _, err := request("delay.frz.warm", []byte("warm")); err != nil {
		t.Fatal(err)
	}
	// warm's delivery, unanswered, comes again after the ack wait; cold's,
	// whose ack wait ended first, must not come in between.
	for attempt := 1; attempt <= 2; attempt++ {
		m, err := sub.NextMsg(10 * time.Second)
		if err != nil || string(m.Data) != "warm" || m.Header.Get(wire.HeaderAttempt) != strconv.Itoa(attempt) {
			t.Fatalf("delivery while cold is frozen: %v, %v; want warm's attempt %d", m, err, attempt)
		}
		if attempt == 2 {
			_ = m.Respond(nil)
		}
	}
	if err := h.Service.SetFrozen(nil); err != nil {
		t.Fatal(err)
	}
	m, err := sub.NextMsg(10 * time.Second)
	if err != nil || string(m.Data) != "first" || m.Header.Get(wire.HeaderAttempt) != "2" {
		t.Fatalf("after the thaw: %v, %v; want cold's first message again, attempt 2", m, err)
	}
}
