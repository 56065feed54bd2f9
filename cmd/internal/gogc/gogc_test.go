package gogc

import (
	"log/slog"
	"runtime/debug"
	"strings"
	"testing"
)

// TestPercent_EnvironmentWins checks that the collector target is
// natsdelay's default only when the operator has not set GOGC: an
// operator's GOGC, including off, is never overridden.
func TestPercent_EnvironmentWins(t *testing.T) {
	if pct, set := Percent(""); !set || pct != DefaultPercent {
		t.Errorf("Percent(\"\") = %d, %v; want %d, true", pct, set, DefaultPercent)
	}
	for _, env := range []string{"100", "50", "off"} {
		if _, set := Percent(env); set {
			t.Errorf("Percent(%q) sets the target; want the environment's left alone", env)
		}
	}
}

// TestApply_LogSaysWhere checks the start-up line about the collector
// target: the default is not said to come from GOGC, which is not set
// then, and an operator's GOGC is reported as the environment's.
func TestApply_LogSaysWhere(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	for env, want := range map[string]string{
		"":    `gogc=200 source="natsdelay's default; the GOGC environment variable overrides it"`,
		"150": `msg="garbage collector target from the environment" gogc=150`,
	} {
		var b strings.Builder
		Apply(slog.New(slog.NewTextHandler(&b, nil)), env)
		if !strings.Contains(b.String(), want) {
			t.Errorf("GOGC %q: logged %q, want %q", env, b.String(), want)
		}
	}
}
