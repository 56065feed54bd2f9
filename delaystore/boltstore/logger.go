package boltstore

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
)

// logger adapts a *slog.Logger to bbolt's Logger, which otherwise discards
// everything.
//
// bbolt logs at Info only when it opens a file: the path, the mode and a
// dump of its Options. That is detail for whoever debugs the engine, and
// the service says where its data is itself, so Info goes to Debug.
//
// Use it as a pointer. bbolt prints its Options with %p for Logger,
// which a struct value turns into %!p(boltstore.logger=...).
type logger struct {
	log *slog.Logger
}

var _ bolt.Logger = (*logger)(nil)

func (l logger) Debug(v ...any)                 { l.output(slog.LevelDebug, fmt.Sprint, v) }
func (l logger) Debugf(format string, v ...any) { l.outputf(slog.LevelDebug, format, v) }
func (l logger) Info(v ...any)                  { l.output(slog.LevelDebug, fmt.Sprint, v) }
func (l logger) Infof(format string, v ...any)  { l.outputf(slog.LevelDebug, format, v) }
func (l logger) Warning(v ...any)               { l.output(slog.LevelWarn, fmt.Sprint, v) }
func (l logger) Warningf(format string, v ...any) {
	l.outputf(slog.LevelWarn, format, v)
}
func (l logger) Error(v ...any)                 { l.output(slog.LevelError, fmt.Sprint, v) }
func (l logger) Errorf(format string, v ...any) { l.outputf(slog.LevelError, format, v) }

// Fatal logs at Error and panics. NB: bbolt's own logger exits, and callers
// rely on Fatal never returning; a panic keeps that promise and also shows
// where it happened.
func (l logger) Fatal(v ...any) { l.die(fmt.Sprint(v...)) }

// Fatalf is Fatal with a format.
func (l logger) Fatalf(format string, v ...any) { l.die(sprintf(format, v)) }

// Panic logs at Error and panics.
func (l logger) Panic(v ...any) { l.die(fmt.Sprint(v...)) }

// Panicf is Panic with a format.
func (l logger) Panicf(format string, v ...any) { l.die(sprintf(format, v)) }

func (l logger) die(msg string) {
	l.record(slog.LevelError, "fatal: "+msg)
	panic("boltstore: bbolt fatal error: " + msg)
}

func (l logger) output(level slog.Level, sprint func(...any) string, v []any) {
	if l.log.Enabled(context.Background(), level) {
		l.record(level, sprint(v...))
	}
}

// outputf checks the level before formatting: bbolt logs every Put at
// Debug.
func (l logger) outputf(level slog.Level, format string, v []any) {
	if l.log.Enabled(context.Background(), level) {
		l.record(level, sprintf(format, v))
	}
}

// sprintf formats like fmt.Sprintf but also understands %w, which bbolt
// uses in its log formats.
func sprintf(format string, v []any) string { return fmt.Errorf(format, v...).Error() }

// record logs msg with bbolt's calling function as its source.
func (l logger) record(level slog.Level, msg string) {
	var pcs [1]uintptr
	// runtime.Callers, record, output or die, and the Logger method.
	runtime.Callers(4, pcs[:])
	r := slog.NewRecord(time.Now(), level, strings.TrimSuffix(msg, "\n"), pcs[0])
	_ = l.log.Handler().Handle(context.Background(), r)
}
