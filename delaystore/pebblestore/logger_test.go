package pebblestore

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/delaystore/internal/gate"
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

// Fatalf never returns, as Pebble requires: it logs, then panics with a
// *fatalError that the Store can tell apart from any other panic.
func TestLogger_Fatalf_Panics(t *testing.T) {
	var buf bytes.Buffer
	l := testLogger(&buf)
	defer func() {
		r := recover()
		if r == nil {
			t.Fatal("Fatalf returned")
		}
		fe, ok := r.(*fatalError)
		if !ok {
			t.Fatalf("panic %#v, want a *fatalError", r)
		}
		if !strings.Contains(buf.String(), "fatal: WAL gone") || fe.Error() != "WAL gone" {
			t.Fatalf("panic %q, log %q; want both to carry the message", fe, buf.String())
		}
		if fe.commitFailed() {
			t.Fatalf("%q counts as a failed commit", fe)
		}
	}()
	l.Fatalf("WAL %s", "gone")
}

// The store turns only Pebble's fatal commit error into ErrFailed; any
// other panic, a fatal error of another kind included, goes on.
func TestStore_Guard_RecoversOnlyFailedCommits(t *testing.T) {
	var buf bytes.Buffer
	l := testLogger(&buf)
	s := &Store{log: l.log, gate: gate.New[*iterator](nil)}
	err := s.guard(func() error {
		l.Fatalf("pebble: fatal commit error: %v", errors.New("write 000002.log: input/output error"))
		return nil
	})
	if !errors.Is(err, delaystore.ErrFailed) || !strings.Contains(err.Error(), "input/output error") {
		t.Fatalf("guard of a failed commit = %v, want ErrFailed with the cause", err)
	}
	if got := s.enter(); !errors.Is(got, delaystore.ErrFailed) {
		t.Fatalf("a call after the failure = %v, want ErrFailed", got)
	}
	for _, p := range []func(){
		func() { panic("some bug") },
		func() { l.Fatalf("MANIFEST sync failed: %v", "disk gone") },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Error("guard swallowed a panic that was not a failed commit")
				}
			}()
			_ = s.guard(func() error { p(); return nil })
		}()
	}
}
