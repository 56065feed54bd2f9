package core

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// The reopen backoff defaults fill in around what is set, and bad values
// are reported with what arrived.
func TestConfig_ReopenBackoff_DefaultsAndValidation(t *testing.T) {
	cases := []struct {
		name             string
		backoff, maxWait time.Duration
		wantBackoff      time.Duration
		wantMax          time.Duration
		wantErr          string
	}{
		{name: "defaults", wantBackoff: 100 * time.Millisecond, wantMax: 5 * time.Second},
		{name: "max below the default start", maxWait: 10 * time.Millisecond, wantBackoff: 10 * time.Millisecond, wantMax: 10 * time.Millisecond},
		{name: "start above the default max", backoff: 10 * time.Second, wantBackoff: 10 * time.Second, wantMax: 10 * time.Second},
		{name: "both set", backoff: time.Millisecond, maxWait: time.Second, wantBackoff: time.Millisecond, wantMax: time.Second},
		{name: "negative", backoff: -time.Second, wantErr: "ReopenBackoff (-1s)"},
		{name: "start above max", backoff: 2 * time.Second, maxWait: time.Second, wantErr: "ReopenBackoff (2s) must not exceed ReopenMaxBackoff (1s)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := Config{ReopenBackoff: c.backoff, ReopenMaxBackoff: c.maxWait}
			err := cfg.Validate()
			if c.wantErr != "" {
				if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("Validate = %v, want ErrInvalidConfig mentioning %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Validate = %v", err)
			}
			d := cfg.withDefaults()
			if d.ReopenBackoff != c.wantBackoff || d.ReopenMaxBackoff != c.wantMax {
				t.Fatalf("defaults: backoff %v, max %v; want %v, %v", d.ReopenBackoff, d.ReopenMaxBackoff, c.wantBackoff, c.wantMax)
			}
		})
	}
}
