package bridge_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge"
	"github.com/natsdelay/natsdelay/bridge/bridgetest"
	"github.com/natsdelay/natsdelay/delaystore"
)

// startService runs a Service through bridgetest and returns it with a
// client connection of its own.
func startService(t testing.TB, mod func(*bridge.Config), opts ...bridge.Option) (*bridge.Service, *nats.Conn) {
	t.Helper()
	h := bridgetest.New(t, mod, opts...)
	return h.Service, h.Conn
}

// startServiceOn is startService on the store st.
func startServiceOn(t testing.TB, st delaystore.Store, mod func(*bridge.Config), opts ...bridge.Option) (*bridge.Service, *nats.Conn) {
	t.Helper()
	h := bridgetest.NewOn(t, st, mod, opts...)
	return h.Service, h.Conn
}

// TestService_Schedule_DeliversAfterDelay checks the basic promise: an
// acknowledged message is delivered once its delay has passed, never before,
// and an ACK settles it.
func TestService_Schedule_DeliversAfterDelay(t *testing.T) {
	s, nc := startService(t, nil)
	got := make(chan *nats.Msg, 1)
	sub, err := nc.ChanSubscribe("orders.reminder", got)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	m := nats.NewMsg("delay.orders.reminder")
	m.Header.Set("delay", "150ms")
	m.Header.Set("X-Trace", "abc")
	m.Data = []byte(`{"order":42}`)
	sent := time.Now()
	rep, err := nc.RequestMsg(m, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var body struct {
		Tag, Subject string
		FireAt       string `json:"fire_at"`
	}
	if err := json.Unmarshal(rep.Data, &body); err != nil || len(body.Tag) != 48 || body.Subject != "orders.reminder" {
		t.Fatalf("reply %q: %v", rep.Data, err)
	}
	fireAt, err := time.Parse(time.RFC3339Nano, body.FireAt)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-got:
		now := time.Now()
		if now.Before(fireAt) || now.Sub(sent) < 150*time.Millisecond {
			t.Fatalf("delivered early: %v after sending, fire at %v, now %v", now.Sub(sent), fireAt, now)
		}
		if d.Header.Get("Delay-Tag") != body.Tag || d.Header.Get("Delay-Attempt") != "1" || d.Header.Get("X-Trace") != "abc" || d.Header.Get("Delay") != "" {
			t.Fatalf("headers %v", d.Header)
		}
		ok, err := nc.Request(d.Reply, nil, 5*time.Second)
		if err != nil || string(ok.Data) != "+OK" {
			t.Fatalf("ack sync = %v, %v", ok, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("not delivered")
	}
	if n := bridge.Pending(s); n != 0 {
		t.Fatalf("pending after ACK = %d, want 0", n)
	}
}
