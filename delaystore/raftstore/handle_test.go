package raftstore

import (
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// A store handle, and a lease check, belong to the leadership they were
// opened in: once that leadership ends the handle's Commit commits
// nothing and the check fails, even after this node leads again. Whoever
// holds the handle computed its writes (absolute counts, deletes of
// messages it read as pending) from what it read then, and another
// leader may have changed those keys since. Here node L leads and writes
// k=1 through handle h; M takes the leadership over and writes k=2; L
// leads again. A commit through h must fail with ErrNotLeader and leave
// k=2 on every node; before, it overwrote k. (A service whose node lost
// and regained its leadership before it had stopped the work of the
// first one could write such stale counts: the likely cause of a 3-node
// cell's pending count ending 2,304 low after an election under CPU
// starvation, which no run has reproduced since.)
func TestStore_HandleOfAnEndedLeadership_CommitsNothing(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, enginePebble, testConfig())
	l := c.waitLeader()
	h := l.node.Store()
	defer h.Close()
	lease := l.node.LeaseCheck()
	if err := commitPairs(h, "k", "1"); err != nil {
		t.Fatalf("commit through the leader's handle: %v", err)
	}
	waitFor(t, 10*time.Second, "the first leadership's lease", lease)
	m := transferTo(t, c, l, nil)
	if err := commitPairs(m.node.Store(), "k", "2"); err != nil {
		t.Fatalf("commit on the next leader %s: %v", m.id, err)
	}
	transferTo(t, c, m, l)
	err := commitPairs(h, "k", "stale")
	if !errors.Is(err, ErrNotLeader) {
		t.Fatalf("commit through a handle of %s's ended leadership, now that it leads again: %v, want ErrNotLeader", l.id, err)
	}
	c.appliedEverywhere()
	for _, n := range c.running() {
		if v, err := n.local.Get([]byte("k")); err != nil || string(v) != "2" {
			t.Fatalf("%s holds k=%q (%v), want the next leader's 2", n.id, v, err)
		}
	}
	// A handle opened in the leadership under way commits, and its
	// lease check holds, where the first one's does not.
	if err := commitPairs(l.node.Store(), "k", "3"); err != nil {
		t.Fatalf("commit through a handle of the leadership under way: %v", err)
	}
	waitFor(t, 10*time.Second, "the lease of the leadership under way", l.node.LeaseCheck())
	if lease() {
		t.Fatalf("the lease check of %s's first leadership holds in its second", l.id)
	}
}

// transferTo hands the leadership of from over to to (any other node if
// to is nil), again if an election of the cluster's own gets in the way,
// and returns the node that leads ready.
func transferTo(t *testing.T, c *testCluster, from, to *testNode) *testNode {
	t.Helper()
	for range 20 {
		var f raft.Future
		if to == nil {
			f = from.node.raft.LeadershipTransfer()
		} else {
			f = from.node.raft.LeadershipTransferToServer(raft.ServerID(to.id), raft.ServerAddress(to.addr))
		}
		if err := f.Error(); err != nil {
			t.Logf("transfer from %s: %v", from.id, err)
		}
		next := c.waitLeader()
		if next != from && (to == nil || next == to) {
			return next
		}
		from = next
	}
	t.Fatalf("the leadership did not move to %v in 20 transfers", to)
	return nil
}
