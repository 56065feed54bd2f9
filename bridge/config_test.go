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
