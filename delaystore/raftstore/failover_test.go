package raftstore

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"
)

// Nothing committed is lost when the leader crashes, and no event ID is
// used twice: each round crashes the leader (its local store loses what it
// had not flushed, as pebble without a WAL does), a new leader's Repository
// sees every message committed so far and numbers new ones above them, and
// the crashed node comes back and catches up from the log. Three rounds;
// 50 under NATSDELAY_SOAK=1.
func TestCluster_LeaderCrash_NothingLostNoIDReused(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, engineCrashable, testConfig())
	seen := make(map[uint64]bool)
	total := 0
	rounds := 3
	if os.Getenv("NATSDELAY_SOAK") != "" {
		rounds = 50
	}
	for round := range rounds {
		leader := c.waitLeader()
		r := openRepo(t, leader.node.Store())
		if got := r.Pending(); got != uint64(total) {
			t.Fatalf("round %d: leader %s sees %d pending, want %d", round, leader.id, got, total)
		}
		if got := r.LastID(); got != uint64(total) {
			t.Fatalf("round %d: leader %s last id %d, want %d", round, leader.id, got, total)
		}
		ids := scheduleN(t, r, "orders.reminder", 100, 16)
		for _, id := range ids {
			if seen[id] {
				t.Fatalf("round %d: event id %d used twice", round, id)
			}
			seen[id] = true
		}
		total += len(ids)
		r.Close()

		before := len(dump(t, leader.local))
		leader.crash()
		if after := len(dump(t, leader.local)); after >= before {
			t.Fatalf("round %d: the crash lost nothing (%d keys before, %d after): the test would check nothing", round, before, after)
		}
		c.waitLeader()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		leader.reopen(ctx)
		cancel()
	}
	leader := c.waitLeader()
	r := openRepo(t, leader.node.Store())
	defer r.Close()
	if got := r.Pending(); got != uint64(total) {
		t.Fatalf("after %d crashes: %d pending, want %d", rounds, got, total)
	}
	// One more write, so every node has applied everything before it.
	scheduleN(t, r, "orders.reminder", 1, 1)
	c.waitApplied(leader.node.fsm.applied.Load())
	for _, n := range c.nodes {
		if n != leader {
			sameContent(t, n.id+" against the leader", n.local, leader.local)
		}
	}
	ids := slices.Sorted(func(yield func(uint64) bool) {
		for id := range seen {
			if !yield(id) {
				return
			}
		}
	})
	if ids[len(ids)-1] != uint64(total) || len(ids) != total {
		t.Fatalf("ids not 1..%d: %d ids, highest %d", total, len(ids), ids[len(ids)-1])
	}
}

// A follower that crashes and restarts catches up from the log, without a
// snapshot restore: its local store, which lost its unflushed writes, ends
// equal to the leader's.
func TestCluster_FollowerRestart_CatchesUpFromLog(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, engineCrashable, testConfig())
	leader := c.waitLeader()
	r := openRepo(t, leader.node.Store())
	defer r.Close()
	scheduleN(t, r, "a", 200, 32)
	// A snapshot flushes every local store up to it; the entries after it
	// stay in the memtables only, and the log.
	for _, n := range c.nodes {
		c.waitApplied(leader.node.fsm.applied.Load())
		if err := n.node.snapshotNow(); err != nil {
			t.Fatalf("snapshot %s: %v", n.id, err)
		}
	}
	scheduleN(t, r, "b", 200, 32)
	c.waitApplied(leader.node.fsm.applied.Load())

	var follower *testNode
	for _, n := range c.nodes {
		if n != leader {
			follower = n
			break
		}
	}
	before := len(dump(t, follower.local))
	follower.crash()
	if after := len(dump(t, follower.local)); after >= before || after == 0 {
		t.Fatalf("crash kept %d keys of %d: want the flushed ones only", after, before)
	}
	scheduleN(t, r, "c", 100, 32) // while it is down
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	follower.reopen(ctx)
	c.waitApplied(leader.node.fsm.applied.Load())
	sameContent(t, "restarted follower against the leader", follower.local, leader.local)
	if got := follower.node.fsm.restores.Load(); got != 0 {
		t.Fatalf("restarted follower restored %d snapshots, want 0", got)
	}
	if got := r.Pending(); got != 500 {
		t.Fatalf("pending %d, want 500", got)
	}
}
