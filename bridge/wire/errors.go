package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Error codes as values. An error reply decoded by ParseError, a
// *ServiceError, matches the one of its code with errors.Is; the service
// wraps them in its own errors, and answers with their code.
var (
	// ErrBadRequest is a 400: the request or message is not valid and
	// nothing was stored. Sending it again will not help.
	ErrBadRequest = errors.New("bad request")
	// ErrNotFound is a 404: the API found no such pending message.
	ErrNotFound = errors.New("not found")
	// ErrConflict is a 409: the message is in a state that does not allow
	// the request now (RESCHEDULE of a message in flight); nothing changed.
	ErrConflict = errors.New("conflict")
	// ErrUnavailable is a 503: the service cannot take the request now
	// (shutting down, storage failing, not connected); try again later.
	ErrUnavailable = errors.New("unavailable")
)

// Code is the reply code of err: 400, 404, 409 or 503 by the category err
// wraps, the code of a *ServiceError it wraps, and 503 for anything else.
func Code(err error) int {
	var se *ServiceError
	switch {
	case errors.As(err, &se):
		return se.Code
	case errors.Is(err, ErrBadRequest):
		return 400
	case errors.Is(err, ErrNotFound):
		return 404
	case errors.Is(err, ErrConflict):
		return 409
	default:
		return 503
	}
}

// ServiceError is an error answer in the NATS micro convention: the body
// of an ErrorReply, and the two service error headers.
type ServiceError struct {
	Code        int    `json:"code"`
	Description string `json:"description"`
}

// Error is the code and the description, "404 not found: ...", or the
// description alone when the code is not known (0).
func (e *ServiceError) Error() string {
	if e.Code == 0 {
		return e.Description
	}
	return fmt.Sprintf("%d %s", e.Code, e.Description)
}

// Is reports whether target is the error code value of e's code:
// errors.Is(err, wire.ErrNotFound) holds for a 404.
func (e *ServiceError) Is(target error) bool {
	switch target {
	case ErrBadRequest:
		return e.Code == 400
	case ErrNotFound:
		return e.Code == 404
	case ErrConflict:
		return e.Code == 409
	case ErrUnavailable:
		return e.Code == 503
	}
	return false
}

// ErrorReply is the JSON body of an error answer.
type ErrorReply struct {
	Error *ServiceError `json:"error"`
}

// NewServiceError maps err to its answer: the code from its category and
// the text users read.
func NewServiceError(err error) *ServiceError {
	var se *ServiceError
	if errors.As(err, &se) {
		return se
	}
	return &ServiceError{Code: Code(err), Description: err.Error()}
}

// ParseError returns the error a reply carries, or nil if it is not an
// error answer: a *ServiceError, from the JSON body if it has one with a
// code, else from the service error headers (a code that is not a number
// is kept as 0 in Code and shown in Description). header is the reply's
// header, such as a nats.Header; names are matched in any case.
func ParseError(header map[string][]string, data []byte) error {
	get := func(name string) string {
		if v := header[name]; len(v) > 0 {
			return v[0]
		}
		for k, v := range header {
			if strings.EqualFold(k, name) && len(v) > 0 {
				return v[0]
			}
		}
		return ""
	}
	desc, code := get(HeaderServiceError), get(HeaderServiceErrorCode)
	if desc == "" && code == "" {
		return nil
	}
	var body ErrorReply
	if json.Unmarshal(data, &body) == nil && body.Error != nil && body.Error.Code != 0 {
		return body.Error
	}
	n, err := strconv.Atoi(code)
	if err != nil {
		return &ServiceError{Description: strings.TrimSpace(code + " " + desc)}
	}
	return &ServiceError{Code: n, Description: desc}
}
