package bridge_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/natsdelay/natsdelay/bridge"
	"github.com/natsdelay/natsdelay/bridge/wire"
)

// handed is a message handed to the service in process, as a cell of a
// fleet hands what it routes: its answer goes to its reply subject.
type handed struct {
	nc      *nats.Conn
	subject string
	reply   string
	header  nats.Header
	data    []byte
}

var _ micro.Request = (*handed)(nil)

func (h *handed) Respond(data []byte, opts ...micro.RespondOpt) error {
	m := &nats.Msg{Subject: h.reply, Data: data, Header: nats.Header{}}
	for _, o := range opts {
		o(m)
	}
	return h.nc.PublishMsg(m)
}

func (h *handed) RespondJSON(v any, opts ...micro.RespondOpt) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return h.Respond(b, opts...)
}

func (h *handed) Error(code, description string, data []byte, opts ...micro.RespondOpt) error {
	return h.Respond(data, append([]micro.RespondOpt{func(m *nats.Msg) {
		m.Header.Set(micro.ErrorHeader, description)
		m.Header.Set(micro.ErrorCodeHeader, code)
	}}, opts...)...)
}

func (h *handed) Data() []byte           { return h.data }
func (h *handed) Headers() micro.Headers { return micro.Headers(h.header) }
func (h *handed) Subject() string        { return h.subject }
func (h *handed) Reply() string          { return h.reply }

// TestService_IngestBatch_EachAnsweredAndStored hands the service five
// messages at once, one of them with a delay it cannot read: the four
// others are stored, each answered on its own reply subject with its
// tag and subject, and the bad one is answered with a 400 and stored
// not at all, as the ingest endpoint answers each.
func TestService_IngestBatch_EachAnsweredAndStored(t *testing.T) {
	s, nc := startService(t, nil)
	answers := make(chan *nats.Msg, 16)
	sub, err := nc.ChanSubscribe("_INBOX.batch.>", answers)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	var reqs []micro.Request
	for i := range 5 {
		delay := "1h"
		if i == 2 {
			delay = "soon"
		}
		reqs = append(reqs, &handed{nc: nc, subject: fmt.Sprintf("delay.orders.%d", i), reply: fmt.Sprintf("_INBOX.batch.%d", i),
			header: nats.Header{"Delay": {delay}}, data: []byte(fmt.Sprint(i))})
	}
	s.IngestBatch(reqs)
	got := map[string]*nats.Msg{}
	for len(got) < 5 {
		select {
		case m := <-answers:
			got[m.Subject] = m
		case <-time.After(30 * time.Second):
			t.Fatalf("%d of 5 answered", len(got))
		}
	}
	for i := range 5 {
		m := got[fmt.Sprintf("_INBOX.batch.%d", i)]
		err := wire.ParseError(m.Header, m.Data)
		if i == 2 {
			var se *wire.ServiceError
			if !errors.As(err, &se) || se.Code != 400 {
				t.Errorf("message 2, delay %q: answered %q (%v), want a 400", "soon", m.Data, err)
			}
			continue
		}
		var body struct{ Tag, Subject string }
		if err != nil || json.Unmarshal(m.Data, &body) != nil || len(body.Tag) != 48 || body.Subject != fmt.Sprintf("orders.%d", i) {
			t.Errorf("message %d: answered %q (%v), want its tag and subject", i, m.Data, err)
		}
	}
	if n := bridge.Pending(s); n != 4 {
		t.Fatalf("pending %d, want the 4 valid messages", n)
	}
}
