package server

import (
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/natsdelay/natsdelay/delaystore/raftstore"
)

// TestLogHandover_SaysWhatHappened checks the line a stopping leader
// logs for each outcome of its handover: "handed over" only when it led
// and a new leader is named, never with leader="" (a leader that had
// already lost its leadership logged that before); a warning when the
// others must elect one after --cluster-timeout.
func TestLogHandover_SaysWhatHappened(t *testing.T) {
	for _, c := range []struct {
		name  string
		h     raftstore.Handover
		err   error
		level string
		want  string
	}{
		{"handed over", raftstore.Handover{Led: true, Leader: "b"}, nil, "INFO", `msg="cluster leadership handed over" leader=b`},
		{"no winner heard", raftstore.Handover{Led: true}, nil, "WARN", "no new leader heard of"},
		{"lost before, leader known", raftstore.Handover{Leader: "c"}, nil, "INFO", `already lost before the stop: nothing to hand over" leader=c`},
		{"lost before, none known", raftstore.Handover{}, nil, "WARN", "already lost before the stop, and no leader known"},
		{"failed", raftstore.Handover{Led: true}, errors.New("no other voter"), "WARN", "could not hand the cluster leadership over"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var b strings.Builder
			logHandover(slog.New(slog.NewTextHandler(&b, nil)), c.h, c.err)
			out := b.String()
			if !strings.Contains(out, "level="+c.level) || !strings.Contains(out, c.want) || strings.Contains(out, `leader=""`) {
				t.Fatalf("logged %q; want level %s and %q, and never leader=\"\"", out, c.level, c.want)
			}
			if strings.Contains(out, "handed over") && (!c.h.Led || c.h.Leader == "") {
				t.Fatalf("logged %q for %+v: nothing was handed over", out, c.h)
			}
		})
	}
}
