package bridge

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/keys"
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
		if _, err := parseSchedule("a.b", h, nil, time.Now(), lim); !errors.Is(err, wire.ErrBadRequest) {
			t.Errorf("%s: error = %v, want wire.ErrBadRequest", name, err)
		}
	}
}

// FuzzParseSchedule checks that ingest parsing never panics, and that what
// it accepts is never due before it was accepted, keeps no control header,
// and can be delivered: its delivery's protocol line fits max_control_line.
func FuzzParseSchedule(f *testing.F) {
	f.Add("a.b", "Delay", "90s", []byte("x"))
	f.Add("a.b", "Delay-At", "2026-12-24T18:00:00Z", []byte{})
	f.Add("a..b", "Delay-TTL", "-1ms", []byte{})
	f.Add("a.*", "delay", "1e400", []byte{})
	f.Add("a.b", "Delay-At", "1798135200.5", []byte{})
	f.Add("a.b", "Delay-Max-Deliver", "0", []byte{})
	f.Add("a.b", "Delay-Every", "100ms", []byte{})
	f.Add("a.b", "Delay-Cron", "*/5 * * * *", []byte{})
	f.Add("a.b", "delay-cron", "@every 1s", []byte{})
	f.Add("a.b", "Delay-Until", "1", []byte{})
	f.Add("a.bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb", "Delay-Id", "x", []byte{})
	f.Fuzz(func(t *testing.T, subject, name, value string, data []byte) {
		now := time.Unix(1_800_000_000, 0)
		h := nats.Header{name: {value}}
		lim := scheduleLimits{maxPayload: 1 << 20, reserved: []string{"delay", "$DELAY.ACK"}, ackPrefix: "$DELAY.ACK", maxControlLine: 512, serverMaxPayload: 1 << 20, deadLetter: "dead"}
		m, err := parseSchedule(subject, h, data, now, lim)
		if err != nil {
			if !errors.Is(err, wire.ErrBadRequest) {
				t.Fatalf("error %v does not wrap wire.ErrBadRequest", err)
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
		d := deliveryMsg(lim.ackPrefix, keys.Key{}, m, math.MaxUint32)
		if err := checkLine(d, headerLen(d.Header), lim.maxControlLine); err != nil {
			t.Fatalf("accepted, but: %v", err)
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
		if err != nil && !errors.Is(err, wire.ErrBadRequest) {
			t.Fatalf("error %v does not wrap wire.ErrBadRequest", err)
		}
		if err == nil && a.Delay < 0 {
			t.Fatalf("negative delay %v", a.Delay)
		}
	})
}

// TestParseDuration_TooLarge checks that a duration written correctly but
// too large for a time.Duration is told apart from one written wrongly, so
// the 400 says what to change.
func TestParseDuration_TooLarge(t *testing.T) {
	for _, c := range []struct {
		v     string
		large bool
	}{
		{"2562048h", true},
		{"2562047h47m17s", true},
		{"9999999999999999999ns", true},
		{"1.5h99999999999m", true},
		{"99999999999999999999", true}, // integer milliseconds
		{"2562047h", false},
		{"90x", false},
		{"1e400", false},
		{"h", false},
		{".h", false},
		{"1..5h", false},
		{"--5s", false},
	} {
		_, err := parseDuration("Delay", c.v)
		if err == nil {
			if c.large {
				t.Errorf("%q: accepted, want too large", c.v)
			}
			continue
		}
		if got := strings.Contains(err.Error(), "too large: the maximum is"); got != c.large {
			t.Errorf("%q: %v; want too large = %v", c.v, err, c.large)
		}
	}
}
