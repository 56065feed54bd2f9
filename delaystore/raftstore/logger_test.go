package raftstore

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
)

// TestRaftLogger_FormatsValues checks that the values Raft hands its
// logger formatted by hclog.Fmt (a list of servers, say) are logged
// formatted, not as the verb and its arguments.
func TestRaftLogger_FormatsValues(t *testing.T) {
	var b strings.Builder
	l := newRaftLogger(slog.New(slog.NewTextHandler(&b, nil)))
	l.Info("initial configuration", "index", 1, "servers", hclog.Fmt("%+v", []struct{ ID string }{{"a"}, {"b"}}))
	out := b.String()
	if !strings.Contains(out, `servers="[{ID:a} {ID:b}]"`) || strings.Contains(out, "%+v") {
		t.Fatalf("logged %q, want servers formatted", out)
	}
}
