package bridge_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/natsdelay/natsdelay/bridge"
)

// TestConfig_PrefixesTooLongForTheControlLine checks that an ack prefix
// or a dead-letter subject so long that no delivery or dead letter could
// fit the server's control line is refused when the service is
// configured, once, instead of turning every ingest into a 400; and that
// ones that fit are accepted.
func TestConfig_PrefixesTooLongForTheControlLine(t *testing.T) {
	cfg := func(ack, dead string) bridge.Config {
		var c bridge.Config
		c.AckPrefix, c.Delivery.DeadLetterSubject = ack, dead
		return c
	}
	for _, c := range []struct {
		name string
		cfg  bridge.Config
		want string
	}{
		{"ack prefix", cfg(strings.Repeat("a", 4060), ""), "AckPrefix is 4060 bytes"},
		{"dead letter", cfg("", strings.Repeat("d", 4085)), "DeadLetterSubject is 4085 bytes"},
		{"both fit", cfg("acks", strings.Repeat("d", 4000)), ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.cfg.Validate()
			if c.want == "" {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, bridge.ErrInvalidConfig) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "over MaxControlLine 4096") {
				t.Fatalf("Validate = %v, want ErrInvalidConfig saying %q ... over MaxControlLine 4096", err, c.want)
			}
		})
	}
}

// TestConfig_JSSchedulePrefixInsideIngestPrefix checks that a schedule
// prefix inside the ingest prefix, or around it, is refused: both
// endpoints would take the same publishes. Beside it, it is accepted.
func TestConfig_JSSchedulePrefixInsideIngestPrefix(t *testing.T) {
	for _, c := range []struct {
		ingest, js string
		bad        bool
	}{
		{"delay", "delay.js", true},
		{"in.delay", "in", true},
		{"delay", "delay", true},
		{"delay", "delayjs", false},
		{"delay", "$DELAY.JS", false},
	} {
		var cfg bridge.Config
		cfg.IngestPrefix, cfg.JSSchedulePrefix = c.ingest, c.js
		err := cfg.Validate()
		if got := err != nil && strings.Contains(err.Error(), "JSSchedulePrefix"); got != c.bad {
			t.Errorf("ingest %q, schedules %q: Validate = %v, want refused %v", c.ingest, c.js, err, c.bad)
		}
	}
}
