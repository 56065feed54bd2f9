package raftstore

import (
	"context"
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
	cfg.TrailingLogs = 10_000
	c := startCluster(t, 3, engineCrashable, cfg)
	leader := c.waitLeader()
	r := openRepo(t, leader.node.Store())
	defer r.Close()
	scheduleN(t, r, "fill", pending, 1024)
	c.waitApplied(leader.node.fsm.applied.Load())
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
	follower.crash()
	const behind = 100_000
	scheduleN(t, r, "while-down", behind, 1024)
	target := leader.node.fsm.applied.Load()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	follower.reopen(ctx)
	c.waitApplied(target)
	took := time.Since(start)
	t.Logf("follower caught up %d messages (and its lost memtable) in %v", behind, took)
	if got := follower.node.fsm.restores.Load(); got != 0 {
		t.Fatalf("follower restored %d snapshots, want 0", got)
	}
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
	c.nodes = append(c.nodes, n)
	start = time.Now()
	if err := leader.node.AddVoter(ctx, n.id, n.addr); err != nil {
		t.Fatal(err)
	}
	c.waitApplied(leader.node.fsm.applied.Load())
	t.Logf("new node installed a snapshot of %d pending and caught up in %v", pending+behind, time.Since(start))
	if got := n.node.fsm.restores.Load(); got != 1 {
		t.Fatalf("new node restored %d snapshots, want 1", got)
	}
	sameContent(t, "new node against the leader", n.local, leader.local)
}
