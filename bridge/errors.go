package bridge

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"natsdelay/dispatch"
)

var (
	// ErrInvalidConfig is wrapped by every Config validation error.
	ErrInvalidConfig = errors.New("bridge: invalid config")
	// ErrBadRequest is wrapped by every error about bad input (400).
	ErrBadRequest = errors.New("bad request")
	// ErrUnavailable is wrapped when the service cannot accept now (503).
	ErrUnavailable = errors.New("unavailable")
	// ErrNotFound is wrapped when the API finds nothing (404).
	ErrNotFound = errors.New("not found")
	// ErrTooLarge is wrapped when a delivery or dead letter is not published
	// because the server would not take it: its protocol line would exceed
	// the server's max_control_line (which would close the connection) or
	// its headers and payload the server's max_payload. Ingest refuses such
	// messages; only ones stored by older versions meet it.
	ErrTooLarge error = undeliverableError("too large to publish")
)

// badRequest returns an error wrapping ErrBadRequest.
func badRequest(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadRequest, fmt.Sprintf(format, args...))
}

// ServiceError is an error answer in the NATS micro convention.
type ServiceError struct {
	Code        int    `json:"code"`
	Description string `json:"description"`
}

func (e *ServiceError) Error() string { return fmt.Sprintf("%d %s", e.Code, e.Description) }

// serviceError maps err to its answer: the code from its category and the
// text users read.
func serviceError(err error) *ServiceError {
	var se *ServiceError
	switch {
	case errors.As(err, &se):
		return se
	case errors.Is(err, ErrBadRequest):
		return &ServiceError{Code: 400, Description: err.Error()}
	case errors.Is(err, ErrNotFound):
		return &ServiceError{Code: 404, Description: err.Error()}
	default:
		return &ServiceError{Code: 503, Description: err.Error()}
	}
}

// respondError answers a micro request with err, if it has a reply subject.
func respondError(req micro.Request, err error) {
	if req.Reply() == "" {
		return
	}
	se := serviceError(err)
	body, _ := json.Marshal(struct {
		Error *ServiceError `json:"error"`
	}{se})
	_ = req.Error(strconv.Itoa(se.Code), se.Description, body)
}

// errorMsg builds the reply for err: status headers and a JSON body.
func errorMsg(subject string, err error) *nats.Msg {
	se := serviceError(err)
	body, _ := json.Marshal(struct {
		Error *ServiceError `json:"error"`
	}{se})
	m := nats.NewMsg(subject)
	m.Header.Set(HeaderServiceError, se.Description)
	m.Header.Set(HeaderServiceErrorCode, strconv.Itoa(se.Code))
	m.Data = body
	return m
}

// unavailable returns an error wrapping ErrUnavailable.
func unavailable(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrUnavailable, fmt.Sprintf(format, args...))
}

// undeliverableError is an error the dispatcher takes for
// dispatch.ErrUndeliverable: the message can never be published.
type undeliverableError string

func (e undeliverableError) Error() string { return string(e) }

func (e undeliverableError) Is(target error) bool { return target == dispatch.ErrUndeliverable }
