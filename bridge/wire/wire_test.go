package wire_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/natsdelay/natsdelay/bridge/wire"
)

// TestParseError_Is checks that a client can tell an error reply's code
// with errors.Is, from the JSON body or from the headers alone.
func TestParseError_Is(t *testing.T) {
	for _, c := range []struct {
		name   string
		header map[string][]string
		body   string
		want   error
		text   string
	}{
		{"body", map[string][]string{wire.HeaderServiceError: {"x"}, wire.HeaderServiceErrorCode: {"404"}},
			`{"error":{"code":404,"description":"not found: no pending message"}}`, wire.ErrNotFound, "404 not found: no pending message"},
		{"headers only", map[string][]string{wire.HeaderServiceError: {"bad request: x"}, wire.HeaderServiceErrorCode: {"400"}},
			"", wire.ErrBadRequest, "400 bad request: x"},
		{"headers in another case", map[string][]string{"nats-service-error": {"unavailable: y"}, "nats-service-error-code": {"503"}},
			"", wire.ErrUnavailable, "503 unavailable: y"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := wire.ParseError(c.header, []byte(c.body))
			if !errors.Is(err, c.want) || err.Error() != c.text {
				t.Errorf("ParseError = %v, want %q matching %v", err, c.text, c.want)
			}
		})
	}
	if err := wire.ParseError(map[string][]string{}, []byte(`{"tag":"x"}`)); err != nil {
		t.Errorf("ParseError of a success = %v, want nil", err)
	}
}

// TestCode checks that the service's wrapped errors answer with their
// category's code, and anything else with a 503.
func TestCode(t *testing.T) {
	for err, want := range map[error]int{
		fmt.Errorf("%w: x", wire.ErrBadRequest):  400,
		fmt.Errorf("%w: x", wire.ErrNotFound):    404,
		fmt.Errorf("%w: x", wire.ErrUnavailable): 503,
		errors.New("disk on fire"):               503,
	} {
		if got := wire.Code(err); got != want {
			t.Errorf("Code(%v) = %d, want %d", err, got, want)
		}
	}
}

// TestParseDays checks the duration grammar of Delay, Delay-TTL and -NAK.
func TestParseDays(t *testing.T) {
	for _, c := range []struct {
		in      string
		want    time.Duration
		tooLong bool
		bad     bool
	}{
		{in: "90s", want: 90 * time.Second},
		{in: "7d", want: 7 * 24 * time.Hour},
		{in: "1d12h", want: 36 * time.Hour},
		{in: "1d-5s", bad: true},
		{in: "xd", bad: true},
		{in: "999999999d", tooLong: true},
		{in: "99999999999h", tooLong: true},
	} {
		got, err := wire.ParseDays(c.in)
		switch {
		case c.tooLong:
			if !errors.Is(err, wire.ErrDurationTooLong) {
				t.Errorf("ParseDays(%q) = %v, %v; want ErrDurationTooLong", c.in, got, err)
			}
		case c.bad:
			if err == nil || errors.Is(err, wire.ErrDurationTooLong) {
				t.Errorf("ParseDays(%q) = %v, %v; want a syntax error", c.in, got, err)
			}
		case err != nil || got != c.want:
			t.Errorf("ParseDays(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
}
