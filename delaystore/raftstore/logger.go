package raftstore

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/hashicorp/go-hclog"
)

// newRaftLogger adapts Raft's hclog logging to log: hclog formats nothing
// (its own output is discarded) and hands each entry, with its key-value
// pairs, to a sink that logs it with slog at the matching level.
func newRaftLogger(log *slog.Logger) hclog.Logger {
	level := hclog.Info
	if log.Enabled(context.Background(), slog.LevelDebug) {
		level = hclog.Debug
	}
	l := hclog.NewInterceptLogger(&hclog.LoggerOptions{
		Name:   "raft",
		Level:  level,
		Output: io.Discard,
	})
	l.RegisterSink(&slogSink{log: log, level: level})
	return l
}

type slogSink struct {
	log   *slog.Logger
	level hclog.Level
}

func (s *slogSink) Accept(name string, level hclog.Level, msg string, args ...any) {
	if level < s.level {
		return
	}
	var l slog.Level
	switch {
	case level <= hclog.Debug:
		l = slog.LevelDebug
	case level == hclog.Info:
		l = slog.LevelInfo
	case level == hclog.Warn:
		l = slog.LevelWarn
	default:
		l = slog.LevelError
	}
	s.log.Log(context.Background(), l, msg, append(formatArgs(args), "logger", name)...)
}

// formatArgs formats the values given as hclog.Fmt, a verb and its
// arguments, which hclog's own output formats and slog would print as a
// list. args is changed in place.
func formatArgs(args []any) []any {
	for i, a := range args {
		if f, ok := a.(hclog.Format); ok && len(f) > 0 {
			if verb, ok := f[0].(string); ok {
				args[i] = fmt.Sprintf(verb, f[1:]...)
			}
		}
	}
	return args
}
