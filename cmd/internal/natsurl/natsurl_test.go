package natsurl

import (
	"strings"
	"testing"
)

// TestCheck checks that a NATS URL is taken as nats.Connect takes it, and
// that one it would not take is refused saying what is wrong.
func TestCheck(t *testing.T) {
	for _, ok := range []string{"nats://127.0.0.1:4222", "127.0.0.1:4222", "tls://nats.example:4443", "ws://h", "wss://h:443", "nats://user:pass@h:4222"} {
		if err := Check(ok); err != nil {
			t.Errorf("Check(%q) = %v, want nil", ok, err)
		}
	}
	for bad, want := range map[string]string{
		"http://h:4222":   `scheme "http"`,
		"nats://:4222":    "no host",
		"nats://h:99999":  `port "99999"`,
		"nats://h:x":      "not a URL",
		"nats://h\x00:42": "not a URL",
	} {
		if err := Check(bad); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Check(%q) = %v, want an error saying %q", bad, err, want)
		}
	}
}
