package bridge

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"time"

	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/dispatch"
	"github.com/natsdelay/natsdelay/keys"
)

// parseAck reads the JetStream ack vocabulary: empty or +ACK, -NAK with an
// optional delay (a JSON {"delay": ns} or a Go duration), +WPI, and +TERM
// with an optional reason.
func parseAck(p []byte) (dispatch.Ack, error) {
	p = bytes.TrimSpace(p)
	word, rest, _ := bytes.Cut(p, []byte(" "))
	rest = bytes.TrimSpace(rest)
	switch string(word) {
	case "", wire.AnswerAck:
		if len(rest) > 0 {
			break
		}
		return dispatch.Ack{Kind: dispatch.AckDone}, nil
	case wire.AnswerProgress:
		if len(rest) > 0 {
			break
		}
		return dispatch.Ack{Kind: dispatch.AckProgress}, nil
	case wire.AnswerTerm:
		return dispatch.Ack{Kind: dispatch.AckTerm, Reason: keys.Clip(string(rest))}, nil
	case wire.AnswerNak:
		if len(rest) == 0 {
			return dispatch.Ack{Kind: dispatch.AckNak}, nil
		}
		d, err := parseNakDelay(rest)
		if err != nil {
			return dispatch.Ack{}, err
		}
		return dispatch.Ack{Kind: dispatch.AckNak, Delay: d}, nil
	}
	return dispatch.Ack{}, badRequest("ack %q: want empty, +ACK, -NAK, -NAK <delay>, +WPI or +TERM [reason]", keys.Clip(string(p)))
}

func parseNakDelay(v []byte) (time.Duration, error) {
	if v[0] == '{' {
		var body struct {
			Delay *int64 `json:"delay"`
		}
		dec := json.NewDecoder(bytes.NewReader(v))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&body); err != nil || body.Delay == nil || dec.More() {
			return 0, badRequest(`-NAK %q: want {"delay": <nanoseconds>}, at most %d, or a Go duration such as 5s`, keys.Clip(string(v)), int64(math.MaxInt64))
		}
		if *body.Delay < 0 {
			return 0, badRequest(`-NAK %q: the delay must not be negative`, keys.Clip(string(v)))
		}
		return time.Duration(*body.Delay), nil
	}
	d, err := wire.ParseDays(strings.TrimSpace(string(v)))
	if err != nil || d < 0 {
		return 0, badRequest(`-NAK %q: want {"delay": <nanoseconds>} or a non-negative Go duration such as 5s or 7d, at most %v`, keys.Clip(string(v)), time.Duration(math.MaxInt64))
	}
	return d, nil
}
