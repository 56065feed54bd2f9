package raftstore

import (
	"errors"
	"sync"
	"testing"
	"time"
)

// An isolated leader stops taking writes (Commit fails with ErrNotLeader
// once its lease runs out, it does not hang), the others elect a new leader
// that commits, and once the partition heals the old leader follows the
// new one and converges, with nothing committed lost.
func TestCluster_PartitionedLeader_StepsDownAndRejoins(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, enginePebble, testConfig())
	old := c.waitLeader()
	r := openRepo(t, old.node.Store())
	scheduleN(t, r, "before", 50, 10)

	var mu sync.Mutex
	var seen []bool
	lost := make(chan struct{})
	cancel := old.node.WatchLeadership(func(leader bool) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, leader)
		if !leader {
			close(lost)
		}
	})
	defer cancel()

	old.node.mux.isolate(true)
	// Writes on the isolated leader fail, at the latest once it steps down.
	// Writes on the isolated leader fail once it steps down, within its
	// lease: no quorum can store them.
	if err := commitPairs(old.node.Store(), "isolated", "x"); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("commit on isolated leader: %v, want ErrNotLeader", err)
	}
	select {
	case <-lost:
	case <-time.After(10 * time.Second):
		t.Fatal("the isolated leader was not told it lost leadership")
	}
	r.Close()

	// The others elect a new leader, which commits.
	var others testCluster
	others.t = t
	for _, n := range c.nodes {
		if n != old {
			others.nodes = append(others.nodes, n)
		}
	}
	leader := others.waitLeader()
	r2 := openRepo(t, leader.node.Store())
	defer r2.Close()
	if got := r2.Pending(); got != 50 {
		t.Fatalf("new leader sees %d pending, want 50", got)
	}
	scheduleN(t, r2, "during", 50, 10)

	old.node.mux.isolate(false)
	scheduleN(t, r2, "after", 10, 10)
	c.waitApplied(leader.node.fsm.applied.Load())
	if l := c.waitLeader(); l != leader {
		t.Fatalf("leader after healing is %s, want %s", l.id, leader.id)
	}
	sameContent(t, "old leader against the new", old.local, leader.local)
	mu.Lock()
	defer mu.Unlock()
	if len(seen) < 2 || !seen[0] || seen[1] {
		t.Fatalf("old leader's watch saw %v, want true then false", seen)
	}
}
