package pebblestore

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// logger adapts a *slog.Logger to Pebble's printf-style Logger, which
// otherwise writes to the standard log package.
type logger struct {
	log *slog.Logger
}

var _ pebble.Logger = logger{}

// Infof logs at Debug: Pebble's informational lines ("Found 0 WALs") are
// about its internals, not about the service an operator runs.
func (l logger) Infof(format string, args ...any) { l.output(slog.LevelDebug, format, args) }

// Errorf logs at Error.
func (l logger) Errorf(format string, args ...any) { l.output(slog.LevelError, format, args) }

// Fatalf logs at Error and panics with a *fatalError. NB: Pebble calls it
// for states it cannot continue from and relies on it never returning, as
// its default logger calls os.Exit. A panic keeps that promise, shows where
// it happened, and lets the Store recover the one fatal error it can: a
// failed commit (see Store.guard).
func (l logger) Fatalf(format string, args ...any) {
	msg := strings.TrimSuffix(sprintf(format, args), "\n")
	l.output(slog.LevelError, "fatal: %s", []any{msg})
	panic(&fatalError{msg: msg})
}

// fatalError is the value Fatalf panics with.
type fatalError struct {
	msg string
}

func (e *fatalError) Error() string { return e.msg }

// commitFailed reports whether Pebble gave up on a commit because its WAL
// write or sync failed: it has applied the batch in memory but could not
// log it, and nothing else is wrong with the database.
func (e *fatalError) commitFailed() bool {
	return strings.HasPrefix(e.msg, "pebble: fatal commit error")
}

// output logs one record with the caller of Infof, Errorf or Fatalf as its
// source, so that AddSource points into Pebble rather than here.
func (l logger) output(level slog.Level, format string, args []any) {
	ctx := context.Background()
	if !l.log.Enabled(ctx, level) {
		return
	}
	var pcs [1]uintptr
	runtime.Callers(3, pcs[:]) // runtime.Callers, output, and Infof or Errorf.
	msg := strings.TrimSuffix(sprintf(format, args), "\n")
	r := slog.NewRecord(time.Now(), level, msg, pcs[0])
	_ = l.log.Handler().Handle(ctx, r)
}

// sprintf formats like fmt.Sprintf but also understands %w.
func sprintf(format string, args []any) string { return fmt.Errorf(format, args...).Error() }

// eventListener logs the Pebble events an operator should see. Flushes and
// compactions are routine and left out.
func eventListener(log *slog.Logger) *pebble.EventListener {
	return &pebble.EventListener{
		BackgroundError: func(err error) {
			log.Error("background error", "err", err)
		},
		DataCorruption: func(info pebble.DataCorruptionInfo) {
			log.Error("data corruption", "path", info.Path, "err", info.Details)
		},
		DiskSlow: func(info pebble.DiskSlowInfo) {
			log.Warn("disk slow", "path", info.Path, "op", info.OpType.String(), "duration", info.Duration)
		},
		WriteStallBegin: func(info pebble.WriteStallBeginInfo) {
			log.Warn("write stall began", "reason", info.Reason)
		},
		WriteStallEnd: func() {
			log.Info("write stall ended")
		},
	}
}
