package raftstore

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"
)

// A follower restarted behind a cluster with 1,000,000 messages pending
// catches up from the log, without a snapshot restore, and a brand-new
// node catches up from a snapshot; both end equal to the leader. It logs
// the catch-up rate and the snapshot install time. Only under
// NATSDELAY_SOAK=1 (make soak): it takes minutes.
func TestSoak_MillionPending_FollowerCatchesUp(t *testing.T) {
	if os.Getenv("NATSDELAY_SOAK") == "" {
		t.Skip("NATSDELAY_SOAK=1 runs it")
	}
	const pending = 1_000_000
	cfg := testConfig()
	cfg.HeartbeatTimeout = time.Second
	cfg.ElectionTimeout = time.Second
	cfg.LeaderLeaseTimeout = 500 * time.Millisecond
	// Enough for the ~200 entries written after the fill's snapshot; far
	// fewer than the fill's ~1000, so that a new node needs a snapshot.
	cfg.TrailingLogs = 300
	c := startCluster(t, 3, engineCrashable, cfg)
	w := c.newWriter()
	w.schedule("fill", pending, 1024)
	leader := c.appliedEverywhere()
	for _, n := range c.nodes {
		if err := n.node.snapshotNow(); err != nil {
			t.Fatal(err)
		}
	}

	var follower *testNode
	for _, n := range c.nodes {
		if n != leader {
			follower = n
			break
		}
	}
	// The follower applies these to its memtable only, and loses them.
	const unflushed, behind = 100_000, 100_000
	w.schedule("unflushed", unflushed, 1024)
	c.appliedEverywhere()
	before := len(dump(t, follower.local))
	follower.crash()
	if after := len(dump(t, follower.local)); after >= before {
		t.Fatalf("the crash lost nothing (%d keys before, %d after)", before, after)
	}
	w.schedule("while-down", behind, 1024)
	target := c.waitLeader().node.fsm.applied.Load()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	follower.reopen(ctx)
	c.waitApplied(target)
	took := time.Since(start)
	t.Logf("follower replayed %d messages lost with its memtable and caught up %d written while it was down in %v (%.0f messages/s)",
		unflushed, behind, took, float64(unflushed+behind)/took.Seconds())
	if got := follower.node.fsm.restores.Load(); got != 0 {
		t.Fatalf("follower restored %d snapshots, want 0", got)
	}
	leader = c.appliedEverywhere()
	sameContent(t, "follower against the leader", follower.local, leader.local)

	if err := leader.node.snapshotNow(); err != nil {
		t.Fatal(err)
	}
	n, ln := newTestNode(t, "fresh", enginePebble)
	jcfg := cfg
	jcfg.Peers = append(c.peers(), n.addr)
	jcfg.Join = true
	if err := n.open(ctx, jcfg, ln); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	// Under this load an election may happen; add on whoever leads.
	for {
		leader = c.waitLeader()
		err := leader.node.AddVoter(ctx, n.id, n.addr)
		if err == nil {
			break
		}
		if !errors.Is(err, ErrNotLeader) {
			t.Fatal(err)
		}
	}
	c.nodes = append(c.nodes, n)
	leader = c.appliedEverywhere()
	t.Logf("new node installed a snapshot of %d pending and caught up in %v", pending+unflushed+behind, time.Since(start))
	if got := n.node.fsm.restores.Load(); got != 1 {
		t.Fatalf("new node restored %d snapshots, want 1", got)
	}
	sameContent(t, "new node against the leader", n.local, leader.local)
}
