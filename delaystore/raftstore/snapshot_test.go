package raftstore

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// A brand-new node added with AddVoter, after the log was compacted, gets
// the leader's snapshot (one Restore) and converges to the leader's
// content; the log is truncated after snapshots, so it stays bounded.
func TestCluster_AddVoter_NewNodeGetsSnapshot(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.TrailingLogs = 10
	c := startCluster(t, 3, enginePebble, cfg)
	w := c.newWriter()
	w.schedule("a", 300, 10)
	c.appliedEverywhere()
	for _, n := range c.nodes {
		if err := n.node.snapshotNow(); err != nil {
			t.Fatalf("snapshot %s: %v", n.id, err)
		}
		// The log keeps only TrailingLogs entries behind the snapshot (and
		// the entries a new leader may have added since).
		first, err := n.node.logs.FirstIndex()
		if err != nil {
			t.Fatal(err)
		}
		st := n.node.Status()
		if first == 0 || st.LastLogIndex-first+1 > cfg.TrailingLogs+3 {
			t.Fatalf("%s: log holds %d..%d after a snapshot at %d, want at most %d entries", n.id, first, st.LastLogIndex, st.LastSnapshotIndex, cfg.TrailingLogs)
		}
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
	// It joined the existing cluster rather than bootstrapping its own: it
	// has that cluster's name and no configuration until it is added.
	if st := n.node.Status(); st.Cluster != c.nodes[0].node.Status().Cluster || len(st.Peers) != 0 {
		t.Fatalf("joining node: cluster %q with peers %v, want cluster %q and no peers", st.Cluster, st.Peers, c.nodes[0].node.Status().Cluster)
	}
	// AddVoter checks who answers at the address.
	c.membership(ctx, func(l *testNode) error {
		err := l.node.AddVoter(ctx, "someone-else", n.addr)
		if errors.Is(err, ErrClusterMismatch) {
			return nil
		}
		if err == nil {
			t.Fatal("AddVoter with the wrong id succeeded")
		}
		return err
	})
	// A follower refuses membership changes (one that took over since is
	// no follower).
	leader := c.waitLeader()
	for _, m := range c.running() {
		if m == leader {
			continue
		}
		if err := m.node.AddVoter(ctx, n.id, n.addr); err != nil && !errors.Is(err, ErrNotLeader) {
			t.Fatalf("AddVoter on follower %s: %v, want ErrNotLeader", m.id, err)
		} else if err == nil && m.node.Status().Term == leader.node.Status().Term {
			t.Fatalf("follower %s added a voter in the term %s leads", m.id, leader.id)
		}
	}
	c.membership(ctx, func(l *testNode) error { return l.node.AddVoter(ctx, n.id, n.addr) })
	c.nodes = append(c.nodes, n)
	w.schedule("b", 10, 10)
	leader = c.appliedEverywhere()
	sameContent(t, "new node against "+c.nodes[0].id, n.local, c.nodes[0].local)
	if got := n.node.fsm.restores.Load(); got != 1 {
		t.Fatalf("new node restored %d snapshots, want 1", got)
	}
	if got := len(leader.node.Status().Peers); got != 4 {
		t.Fatalf("configuration has %d servers, want 4", got)
	}

	// And it can be removed again; the others go on.
	c.membership(ctx, func(l *testNode) error { return l.node.RemoveServer(ctx, n.id) })
	// A removed node hears from no leader any more.
	c.nodes = c.nodes[:len(c.nodes)-1]
	if got := len(c.waitLeader().node.Status().Peers); got != 3 {
		t.Fatalf("configuration has %d servers after remove, want 3", got)
	}
	w.schedule("c", 10, 10)
}

// membership runs a membership change on the leader, again on the next
// one if it is refused with ErrNotLeader (adding or removing a server
// twice changes nothing the second time).
func (c *testCluster) membership(ctx context.Context, change func(leader *testNode) error) {
	c.t.Helper()
	for {
		leader := c.waitLeader()
		err := change(leader)
		if err == nil {
			return
		}
		if !errors.Is(err, ErrNotLeader) {
			c.t.Fatalf("membership change on %s: %v", leader.id, err)
		}
		c.t.Logf("membership change: %s lost leadership (%v); retrying", leader.id, err)
		if ctx.Err() != nil {
			c.t.Fatal(ctx.Err())
		}
	}
}

// Under constant writes with automatic snapshots, the log stays bounded.
func TestCluster_Snapshots_KeepLogBounded(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.SnapshotInterval = 100 * time.Millisecond
	cfg.SnapshotThreshold = 50
	cfg.TrailingLogs = 20
	c := startCluster(t, 3, enginePebble, cfg)
	bound := cfg.TrailingLogs + cfg.SnapshotThreshold
	k := 0
	for range 3 {
		// 50 entries, one per commit, on whichever node leads: frequent
		// snapshots on a loaded machine may cost a heartbeat or two.
		for range 50 {
			k++
			for {
				leader := c.waitLeader()
				err := commitPairs(leader.node.Store(), fmt.Sprintf("k%06d", k), "v")
				if err == nil {
					break
				}
				if !errors.Is(err, ErrNotLeader) {
					t.Fatal(err)
				}
			}
		}
		// Wait for the snapshot that compacts the log.
		waitFor(t, 20*time.Second, "a snapshot to compact the log", func() bool {
			leader := c.waitLeader()
			first, err := leader.node.logs.FirstIndex()
			if err != nil {
				t.Fatal(err)
			}
			return leader.node.Status().LastLogIndex-first+1 <= bound+50
		})
	}
	if c.waitLeader().node.Status().LastSnapshotIndex == 0 {
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
