package fleet

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/natsdelay/natsdelay/bridge/wire"
)

// request hands a message that reached this node on another subject to
// the cell's service in process, as if it had arrived on subject.
type request struct {
	nc      *nats.Conn
	msg     *nats.Msg
	subject string
}

var _ micro.Request = (*request)(nil)

func (r *request) Respond(data []byte, opts ...micro.RespondOpt) error {
	m := &nats.Msg{Subject: r.msg.Reply, Data: data, Header: nats.Header{}}
	for _, o := range opts {
		o(m)
	}
	return r.nc.PublishMsg(m)
}

func (r *request) RespondJSON(v any, opts ...micro.RespondOpt) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return r.Respond(b, opts...)
}

func (r *request) Error(code, description string, data []byte, opts ...micro.RespondOpt) error {
	return r.Respond(data, append([]micro.RespondOpt{func(m *nats.Msg) {
		m.Header.Set(micro.ErrorHeader, description)
		m.Header.Set(micro.ErrorCodeHeader, code)
	}}, opts...)...)
}

func (r *request) Data() []byte           { return r.msg.Data }
func (r *request) Headers() micro.Headers { return micro.Headers(r.msg.Header) }
func (r *request) Subject() string        { return r.subject }
func (r *request) Reply() string          { return r.msg.Reply }

// answerError answers the requester of m, if it waits for an answer, with
// the error code and text, in the protocol's error convention.
func answerError(nc *nats.Conn, m *nats.Msg, code int, format string, args ...any) {
	if m.Reply == "" {
		return
	}
	se := &wire.ServiceError{Code: code, Description: fmt.Sprintf(format, args...)}
	body, _ := json.Marshal(wire.ErrorReply{Error: se})
	out := &nats.Msg{Subject: m.Reply, Data: body, Header: nats.Header{}}
	out.Header.Set(wire.HeaderServiceError, se.Description)
	out.Header.Set(wire.HeaderServiceErrorCode, strconv.Itoa(code))
	_ = nc.PublishMsg(out)
}
