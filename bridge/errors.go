package bridge

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/natsdelay/natsdelay/bridge/internal/core"
	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/dispatch"
)

// ErrInvalidConfig is wrapped by every Config validation error, of the
// service's own settings and of those it hands to its core: it is core's,
// so one value matches both.
var ErrInvalidConfig = core.ErrInvalidConfig

// errTooLarge is wrapped when a delivery or dead letter is not published
// because the server would not take it: its protocol line would exceed
// the server's max_control_line (which would close the connection) or its
// headers and payload the server's max_payload. Ingest refuses such
// messages; only ones stored by older versions meet it.
var errTooLarge error = undeliverableError("too large to publish")

// badRequest returns an error wrapping wire.ErrBadRequest.
func badRequest(format string, args ...any) error {
	return fmt.Errorf("%w: %s", wire.ErrBadRequest, fmt.Sprintf(format, args...))
}

// respondError answers a micro request with err, if it has a reply subject.
func respondError(req micro.Request, err error) {
	if req.Reply() == "" {
		return
	}
	se := wire.NewServiceError(err)
	body, _ := json.Marshal(wire.ErrorReply{Error: se})
	_ = req.Error(strconv.Itoa(se.Code), se.Description, body)
}

// errorMsg builds the reply for err: status headers and a JSON body.
func errorMsg(subject string, err error) *nats.Msg {
	se := wire.NewServiceError(err)
	body, _ := json.Marshal(wire.ErrorReply{Error: se})
	m := nats.NewMsg(subject)
	m.Header.Set(wire.HeaderServiceError, se.Description)
	m.Header.Set(wire.HeaderServiceErrorCode, strconv.Itoa(se.Code))
	m.Data = body
	return m
}

// unavailable returns an error wrapping wire.ErrUnavailable.
func unavailable(format string, args ...any) error {
	return fmt.Errorf("%w: %s", wire.ErrUnavailable, fmt.Sprintf(format, args...))
}

// undeliverableError is an error the dispatcher takes for
// dispatch.ErrUndeliverable: the message can never be published.
type undeliverableError string

func (e undeliverableError) Error() string { return string(e) }

func (e undeliverableError) Is(target error) bool { return target == dispatch.ErrUndeliverable }
