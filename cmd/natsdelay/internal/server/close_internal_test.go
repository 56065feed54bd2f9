package server

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

// TestServer_Close_ReportsEveryError checks that Close stops every part,
// in the reverse order of their start, even after one fails, and that no
// failure is lost: each is logged, and all are returned.
func TestServer_Close_ReportsEveryError(t *testing.T) {
	var logs bytes.Buffer
	s := &Server{log: slog.New(slog.NewTextHandler(&logs, nil))}
	errConn, errService := errors.New("connection refused to flush"), errors.New("store failed at close")
	var order []string
	stop := func(what string, err error) func() error {
		return func() error { order = append(order, what); return err }
	}
	s.push("NATS connection", stop("NATS connection", errConn))
	s.push("metrics server", stop("metrics server", nil))
	s.push("service", stop("service", errService))
	err := s.Close()
	if !errors.Is(err, errConn) || !errors.Is(err, errService) {
		t.Errorf("Close = %v, want both errors", err)
	}
	if got := strings.Join(order, ", "); got != "service, metrics server, NATS connection" {
		t.Errorf("stopped %s, want the reverse of the start", got)
	}
	for _, e := range []error{errConn, errService} {
		if !strings.Contains(logs.String(), e.Error()) {
			t.Errorf("log does not tell %q:\n%s", e, logs.String())
		}
	}
}
