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
// new one and converges, with nothing committed lost. Which node leads
// after the partition heals is left to the election.
func TestCluster_PartitionedLeader_StepsDownAndRejoins(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, enginePebble, testConfig())
	w := c.newWriter()
	w.schedule("before", 50, 10)
	w.close()
	old := c.waitLeader()

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

	// The others elect a new leader, which commits.
	others := &testCluster{t: t}
	for _, n := range c.nodes {
		if n != old {
			others.nodes = append(others.nodes, n)
		}
	}
	w2 := others.newWriter()
	if got := w2.repo().Pending(); got != 50 {
		t.Fatalf("new leader sees %d pending, want 50", got)
	}
	w2.schedule("during", 50, 10)
	w2.close()

	old.node.mux.isolate(false)
	w3 := c.newWriter()
	w3.schedule("after", 10, 10)
	if got := w3.repo().Pending(); got != 110 {
		t.Fatalf("after healing: %d pending, want 110", got)
	}
	leader := c.appliedEverywhere()
	for _, n := range c.nodes {
		if n != leader {
			sameContent(t, n.id+" against the leader "+leader.id, n.local, leader.local)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) < 2 || !seen[0] || seen[1] {
		t.Fatalf("old leader's watch saw %v, want true then false", seen)
	}
}
