package pebblestore

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

func testLogger(buf *bytes.Buffer) logger {
	return logger{log: slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{AddSource: true, Level: slog.LevelDebug}))}
}

// Pebble's printf-style logs reach slog, informational ones at Debug, %w
// included, with the caller of the adapter as their source.
func TestLogger_Infof_LogsAtDebugWithCallerSource(t *testing.T) {
	var buf bytes.Buffer
	l := testLogger(&buf)
	l.Infof("replayed %d keys: %w\n", 3, errors.New("eof"))
	l.Errorf("disk %s", "slow")
	out := buf.String()
	for _, want := range []string{
		`level=DEBUG`, `msg="replayed 3 keys: eof"`, `level=ERROR`, `msg="disk slow"`, "logger_test.go",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("log output lacks %q:\n%s", want, out)
		}
	}
}

// Fatalf never returns, as Pebble requires: it logs, then panics.
func TestLogger_Fatalf_Panics(t *testing.T) {
	var buf bytes.Buffer
	l := testLogger(&buf)
	defer func() {
		r := recover()
		if r == nil {
			t.Fatal("Fatalf returned")
		}
		if !strings.Contains(buf.String(), "fatal: WAL gone") || !strings.Contains(r.(string), "WAL gone") {
			t.Fatalf("panic %q, log %q; want both to carry the message", r, buf.String())
		}
	}()
	l.Fatalf("WAL %s", "gone")
}
