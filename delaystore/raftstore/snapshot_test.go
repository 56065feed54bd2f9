package raftstore

import (
	"context"
	"testing"
	"time"
)

// A brand-new node added with AddVoter, after the log was compacted, gets
// the leader's snapshot (one Restore) and converges to the leader's
// content; the log is truncated after snapshots, so it stays bounded.
func TestCluster_AddVoter_NewNodeGetsSnapshot(t *testing.T) {
	cfg := testConfig()
	cfg.TrailingLogs = 10
	c := startCluster(t, 3, enginePebble, cfg)
	leader := c.waitLeader()
	r := openRepo(t, leader.node.Store())
	defer r.Close()
	scheduleN(t, r, "a", 300, 10)
	c.waitApplied(leader.node.Status().AppliedIndex)
	for _, n := range c.nodes {
		if err := n.node.snapshotNow(); err != nil {
			t.Fatalf("snapshot %s: %v", n.id, err)
		}
	}
	// The log keeps only TrailingLogs entries behind the snapshot.
	first, err := leader.node.logs.FirstIndex()
	if err != nil {
		t.Fatal(err)
	}
	st := leader.node.Status()
	if first == 0 || st.LastLogIndex-first+1 > cfg.TrailingLogs+1 {
		t.Fatalf("log holds %d..%d after a snapshot at %d, want at most %d entries", first, st.LastLogIndex, st.LastSnapshotIndex, cfg.TrailingLogs)
	}

	// A brand-new node joins: it waits for the cluster, then is added.
	n, ln := newTestNode(t, "node3", enginePebble)
	peers := append(c.peers(), n.addr)
	jcfg := cfg
	jcfg.Peers = peers
	jcfg.Join = true
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := n.open(ctx, jcfg, ln); err != nil {
		t.Fatal(err)
	}
	c.nodes = append(c.nodes, n)
	if err := leader.node.AddVoter(ctx, n.id, n.addr); err != nil {
		t.Fatal(err)
	}
	scheduleN(t, r, "b", 10, 10)
	c.waitApplied(leader.node.Status().AppliedIndex)
	sameContent(t, "new node against the leader", n.local, leader.local)
	if got := n.node.fsm.restores.Load(); got != 1 {
		t.Fatalf("new node restored %d snapshots, want 1", got)
	}
	if got := len(leader.node.Status().Peers); got != 4 {
		t.Fatalf("configuration has %d servers, want 4", got)
	}

	// And it can be removed again; the others go on.
	if err := leader.node.RemoveServer(ctx, n.id); err != nil {
		t.Fatal(err)
	}
	if got := len(leader.node.Status().Peers); got != 3 {
		t.Fatalf("configuration has %d servers after remove, want 3", got)
	}
	scheduleN(t, r, "c", 10, 10)
}

// Under constant writes with automatic snapshots, the log stays bounded.
func TestCluster_Snapshots_KeepLogBounded(t *testing.T) {
	cfg := testConfig()
	cfg.SnapshotInterval = 50 * time.Millisecond
	cfg.SnapshotThreshold = 50
	cfg.TrailingLogs = 20
	c := startCluster(t, 3, enginePebble, cfg)
	leader := c.waitLeader()
	r := openRepo(t, leader.node.Store())
	defer r.Close()
	bound := cfg.TrailingLogs + cfg.SnapshotThreshold
	for range 10 {
		scheduleN(t, r, "a", 100, 2)
		// Wait for the snapshot that compacts the log, and check the bound
		// holds once it did.
		waitFor(t, 20*time.Second, "a snapshot to compact the log", func() bool {
			first, err := leader.node.logs.FirstIndex()
			if err != nil {
				t.Fatal(err)
			}
			last := leader.node.Status().LastLogIndex
			return last-first+1 <= bound+50
		})
	}
	if leader.node.Status().LastSnapshotIndex == 0 {
		t.Fatal("no snapshot was taken")
	}
}

// peers lists the addresses of the cluster's nodes.
func (c *testCluster) peers() []string {
	var out []string
	for _, n := range c.nodes {
		out = append(out, n.addr)
	}
	return out
}
