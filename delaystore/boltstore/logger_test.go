package boltstore

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

func testLogger(buf *bytes.Buffer, level slog.Level) logger {
	return logger{log: slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{AddSource: true, Level: level}))}
}

// bbolt's logs reach slog at their level, Info as Debug, %w included, with
// the caller of the adapter as their source; disabled levels are not
// formatted at all.
func TestLogger_Levels(t *testing.T) {
	var buf bytes.Buffer
	l := testLogger(&buf, slog.LevelInfo)
	l.Debugf("Putting key %q", "k")
	l.Infof("opened %s", "db")
	l.Warning("slow", " disk")
	l.Errorf("write failed: %w", errors.New("EIO"))
	out := buf.String()
	if strings.Contains(out, "Putting") {
		t.Errorf("Debug logged at Info level:\n%s", out)
	}
	if strings.Contains(out, "opened") {
		t.Errorf("bbolt's Info logged at Info level, want Debug:\n%s", out)
	}
	for msg, level := range map[string]string{
		`msg="slow disk"`: "level=WARN", `msg="write failed: EIO"`: "level=ERROR",
	} {
		if !hasLine(out, msg, level, "logger_test.go") {
			t.Errorf("log output lacks a line with %s at %s and this file as source:\n%s", msg, level, out)
		}
	}
}

// Fatal and Panic never return: they log, then panic.
func TestLogger_Fatal_Panics(t *testing.T) {
	for name, call := range map[string]func(logger){
		"Fatal":  func(l logger) { l.Fatal("meta ", "gone") },
		"Fatalf": func(l logger) { l.Fatalf("meta %s", "gone") },
		"Panic":  func(l logger) { l.Panic("meta gone") },
		"Panicf": func(l logger) { l.Panicf("meta %s", "gone") },
	} {
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			defer func() {
				r := recover()
				if r == nil {
					t.Fatal("returned")
				}
				if !strings.Contains(buf.String(), "fatal: meta gone") {
					t.Fatalf("log %q lacks the message", buf.String())
				}
			}()
			call(testLogger(&buf, slog.LevelInfo))
		})
	}
}

// hasLine reports whether one line of out contains every part.
func hasLine(out string, parts ...string) bool {
	for line := range strings.Lines(out) {
		found := true
		for _, p := range parts {
			found = found && strings.Contains(line, p)
		}
		if found {
			return true
		}
	}
	return false
}
