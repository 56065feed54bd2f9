package raftstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

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

// TestRaftLogger_VoteToDeadPeer_WarnedOnce checks what a candidate logs
// of a peer it cannot reach during an election, which Raft reports at
// ERROR: a warning that names the peer, once, as for a heartbeat to it;
// the election goes on with the others' votes. A node stopped while a
// vote request to it was still out logged an ERROR, which
// TestRaftLogger_DeadPeer_WarnedOnceThenBounded caught in CI.
func TestRaftLogger_VoteToDeadPeer_WarnedOnce(t *testing.T) {
	var c captured
	l := newRaftLogger(slog.New(&captureHandler{c: &c, next: slog.NewTextHandler(io.Discard, nil)}))
	target := struct{ ID, Address string }{"log0", "127.0.0.1:34853"}
	for range 3 {
		l.Error("failed to make requestVote RPC", "target", target, "error", errors.New("EOF"), "term", 2)
	}
	if errs := c.matching(slog.LevelError, ""); len(errs) > 0 {
		t.Fatalf("logged %q at ERROR, want a warning", errs[0].msg)
	}
	warned := c.matching(slog.LevelWarn, "127.0.0.1:34853")
	if len(warned) != 1 {
		t.Fatalf("warned %d times about the peer, want once", len(warned))
	}
}

// captured is what a test's slog handler recorded: each record's level,
// message and attributes as text.
type captured struct {
	mu      sync.Mutex
	records []capturedRecord
}

type capturedRecord struct {
	level slog.Level
	msg   string
	attrs string
}

// captureHandler records into c and passes each record on to next.
type captureHandler struct {
	c     *captured
	next  slog.Handler
	attrs string
}

func (h *captureHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.next.Enabled(ctx, l)
}

func (h *captureHandler) Handle(ctx context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(h.attrs)
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	h.c.mu.Lock()
	h.c.records = append(h.c.records, capturedRecord{r.Level, r.Message, b.String()})
	h.c.mu.Unlock()
	return h.next.Handle(ctx, r)
}

func (h *captureHandler) WithAttrs(as []slog.Attr) slog.Handler {
	var b strings.Builder
	b.WriteString(h.attrs)
	for _, a := range as {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
	}
	return &captureHandler{c: h.c, next: h.next.WithAttrs(as), attrs: b.String()}
}

func (h *captureHandler) WithGroup(name string) slog.Handler {
	return &captureHandler{c: h.c, next: h.next.WithGroup(name), attrs: h.attrs}
}

// matching returns the records at level or above whose message or
// attributes contain s.
func (c *captured) matching(level slog.Level, s string) []capturedRecord {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []capturedRecord
	for _, r := range c.records {
		if r.level >= level && (strings.Contains(r.msg, s) || strings.Contains(r.attrs, s)) {
			out = append(out, r)
		}
	}
	return out
}

// TestRaftLogger_DeadPeer_WarnedOnceThenBounded runs a cluster of three,
// stops one node, and watches the others' logs for a few seconds, long
// enough for Raft to fail several heartbeats to it: the dead peer is a
// warning that names it, once, and not an ERROR per heartbeat; and a
// clean stop of the rest logs no ERROR about its own closed connections.
func TestRaftLogger_DeadPeer_WarnedOnceThenBounded(t *testing.T) {
	var c captured
	cl := &testCluster{t: t}
	var lns []net.Listener
	var peers []string
	for i := range 3 {
		n, ln := newTestNode(t, fmt.Sprintf("log%d", i), enginePebble)
		n.log = slog.New(&captureHandler{c: &c, next: n.log.Handler()})
		cl.nodes = append(cl.nodes, n)
		lns = append(lns, ln)
		peers = append(peers, n.addr)
	}
	cfg := testConfig()
	cfg.Peers = peers
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, len(cl.nodes))
	for i, n := range cl.nodes {
		wg.Go(func() { errs[i] = n.open(ctx, cfg, lns[i]) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	leader := cl.waitLeader()
	var dead *testNode
	for _, n := range cl.nodes {
		if n != leader {
			dead = n
			break
		}
	}
	before := len(c.matching(slog.LevelError, ""))
	dead.stop()
	waitFor(t, 10*time.Second, "a warning about the dead peer", func() bool {
		return len(c.matching(slog.LevelWarn, dead.addr)) > 0
	})
	// The observation window: the heartbeat backoff reaches its cap of
	// half the heartbeat timeout, so Raft fails to reach the dead peer
	// several times in it.
	window := 3 * cfg.HeartbeatTimeout
	time.Sleep(window)
	about := c.matching(slog.LevelWarn, dead.addr)
	if first := about[0]; !strings.Contains(first.msg+first.attrs, dead.addr) {
		t.Fatalf("first warning about the dead peer %q does not name it", first.msg+first.attrs)
	}
	perMsg := map[string]int{}
	for _, r := range about {
		perMsg[r.msg]++
		if perMsg[r.msg] > 1 {
			t.Errorf("%q about %s logged %d times in %v, want once", r.msg, dead.id, perMsg[r.msg], window)
		}
	}
	for _, n := range cl.running() {
		n.stop()
	}
	if errs := c.matching(slog.LevelError, ""); len(errs) > before {
		t.Fatalf("%d ERROR lines after a node stopped and the others stopped cleanly, want none: first %q %s",
			len(errs)-before, errs[before].msg, errs[before].attrs)
	}
}
