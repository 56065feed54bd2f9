package bridge

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// TestParseSchedule_NonUTF8Header checks that a header that cannot be
// stored is the message's own bad request, so it cannot fail the group
// commit it would share with other publishers' messages.
func TestParseSchedule_NonUTF8Header(t *testing.T) {
	lim := scheduleLimits{reserved: []string{"delay"}}
	for name, h := range map[string]nats.Header{
		"value": {"X-Bin": {"\xff\xfe"}},
		"name":  {"X-\xff": {"ok"}},
	} {
		if _, err := parseSchedule("a.b", h, nil, time.Now(), lim); !errors.Is(err, ErrBadRequest) {
			t.Errorf("%s: error = %v, want ErrBadRequest", name, err)
		}
	}
}

// FuzzParseSchedule checks that ingest parsing never panics, and that what
// it accepts is never due before it was accepted and keeps no control header.
func FuzzParseSchedule(f *testing.F) {
	f.Add("a.b", "Delay", "90s", []byte("x"))
	f.Add("a.b", "Delay-At", "2026-12-24T18:00:00Z", []byte{})
	f.Add("a..b", "Delay-TTL", "-1ms", []byte{})
	f.Add("a.*", "delay", "1e400", []byte{})
	f.Add("a.b", "Delay-At", "1798135200.5", []byte{})
	f.Add("a.b", "Delay-Max-Deliver", "0", []byte{})
	f.Fuzz(func(t *testing.T, subject, name, value string, data []byte) {
		now := time.Unix(1_800_000_000, 0)
		h := nats.Header{name: {value}}
		m, err := parseSchedule(subject, h, data, now, scheduleLimits{maxPayload: 1 << 20, reserved: []string{"delay", "$DELAY.ACK"}})
		if err != nil {
			if !errors.Is(err, ErrBadRequest) {
				t.Fatalf("error %v does not wrap ErrBadRequest", err)
			}
			return
		}
		if m.FireAtNs < now.UnixNano() {
			t.Fatalf("fire time %d before now %d", m.FireAtNs, now.UnixNano())
		}
		for _, hd := range m.Headers {
			if isControl(hd.Name) {
				t.Fatalf("control header %q stored", hd.Name)
			}
		}
	})
}

// FuzzParseAck checks that ack parsing never panics and that errors are
// bad requests.
func FuzzParseAck(f *testing.F) {
	for _, s := range []string{"", "+ACK", "-NAK", "-NAK 5s", `-NAK {"delay": 1000}`, "+WPI", "+TERM why", "garbage", "-NAK {", "-NAK -5s"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, p []byte) {
		a, err := parseAck(p)
		if err != nil && !errors.Is(err, ErrBadRequest) {
			t.Fatalf("error %v does not wrap ErrBadRequest", err)
		}
		if err == nil && a.Delay < 0 {
			t.Fatalf("negative delay %v", a.Delay)
		}
	})
}
