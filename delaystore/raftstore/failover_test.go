package raftstore

import (
	"context"
	"errors"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/natsdelay/natsdelay/delaystore"
)

// Nothing committed is lost when the leader crashes, and no event ID is
// used twice: each round crashes the leader (its local store loses what it
// had not flushed, as pebble without a WAL does), a new leader's Repository
// sees every message committed so far and numbers new ones above them, and
// the crashed node comes back and catches up from the log. Three rounds;
// 50 under NATSDELAY_SOAK=1. A leader change of its own during a round (an
// election under load) is followed like a crash: the writer goes on at the
// new leader, whose IDs then jump above the lease the old leader's open
// Repository had taken (see
// TestCluster_LeaderChange_NewLeaderNumbersAboveLease); without one the IDs
// are 1..n, as each round's Repository is closed, its lease returned,
// before the crash.
func TestCluster_LeaderCrash_NothingLostNoIDReused(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, engineCrashable, testConfig())
	seen := make(map[uint64]bool)
	total := 0
	var highest uint64 // the highest ID handed out so far
	elections := 0     // leader changes in the middle of a round
	rounds := 3
	if os.Getenv("NATSDELAY_SOAK") != "" {
		rounds = 50
	}
	for round := range rounds {
		w := c.newWriter()
		if got := w.repo().Pending(); got != uint64(total) {
			t.Fatalf("round %d: leader %s sees %d pending, want %d", round, w.leader.id, got, total)
		}
		if got := w.repo().LastID(); got != highest {
			t.Fatalf("round %d: leader %s last id %d, want %d, the highest handed out", round, w.leader.id, got, highest)
		}
		ids := w.schedule("orders.reminder", 100, 16)
		for _, id := range ids {
			if seen[id] {
				t.Fatalf("round %d: event id %d used twice", round, id)
			}
			// Stronger than unique: each leader numbers above every
			// ID before it.
			if id <= highest {
				t.Fatalf("round %d: event id %d after %d", round, id, highest)
			}
			seen[id] = true
			highest = id
		}
		total += len(ids)
		elections += w.followed
		w.close()

		leader := w.leader
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
	w := c.newWriter()
	if got := w.repo().Pending(); got != uint64(total) {
		t.Fatalf("after %d crashes: %d pending, want %d", rounds, got, total)
	}
	// One more write, so every node has applied everything before it.
	w.schedule("orders.reminder", 1, 1)
	leader := c.appliedEverywhere()
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
	if len(ids) != total || ids[len(ids)-1] != highest {
		t.Fatalf("%d ids, highest %d; want %d, highest %d", len(ids), ids[len(ids)-1], total, highest)
	}
	if elections == 0 && highest != uint64(total) {
		t.Fatalf("ids not 1..%d with no leader change in a round: highest %d", total, highest)
	}
}

// A leader change while the leader's Repository is open (an election, a
// handover) leaves its lease of IDs taken, and the old leader cannot give
// it back: the new leader knows the highest ID committed and numbers above
// the lease, so IDs jump by up to 65,536 there and none is ever given
// again, also none the old leader reserved for a batch refused after it
// lost the leadership.
func TestCluster_LeaderChange_NewLeaderNumbersAboveLease(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, enginePebble, testConfig())
	w := c.newWriter()
	first := w.schedule("a", 16, 16)
	old := w.leader
	oldRepo := w.r
	w.r = nil // kept open, as a leader that loses its leadership has it
	t.Cleanup(func() { oldRepo.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for old.node.Status().Role == "leader" {
		if _, err := old.node.TransferLeadership(ctx); err != nil && !errors.Is(err, ErrNotLeader) {
			t.Fatalf("transfer on %s: %v", old.id, err)
		}
	}
	refused := make([]*delaystore.StoredMessage, 16)
	for i := range refused {
		refused[i] = &delaystore.StoredMessage{Subject: "refused", FireAtNs: time.Now().Add(time.Hour).UnixNano()}
	}
	if _, err := oldRepo.Schedule(refused, delaystore.Sync); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("schedule on the old leader: %v, want ErrNotLeader", err)
	}
	reserved := oldRepo.LastID() + uint64(len(refused)) // reserved before the refusal

	w.follow()
	if w.leader == old {
		t.Fatalf("%s leads again", old.id)
	}
	if got := w.repo().LastID(); got != first[len(first)-1] {
		t.Fatalf("new leader %s: last id %d, want %d, the last committed", w.leader.id, got, first[len(first)-1])
	}
	next := w.schedule("b", 16, 16)
	if next[0] <= reserved {
		t.Fatalf("new leader %s numbered from %d, not above the %d the old leader reserved", w.leader.id, next[0], reserved)
	}
	if w.repo().Pending() != 32 {
		t.Fatalf("pending %d, want 32", w.repo().Pending())
	}
}

// A follower that crashes and restarts catches up from the log, without a
// snapshot restore: its local store, which lost its unflushed writes, ends
// equal to the leader's.
func TestCluster_FollowerRestart_CatchesUpFromLog(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, engineCrashable, testConfig())
	w := c.newWriter()
	w.schedule("a", 200, 32)
	// A snapshot flushes every local store up to it; the entries after it
	// stay in the memtables only, and the log.
	c.appliedEverywhere()
	for _, n := range c.nodes {
		if err := n.node.snapshotNow(); err != nil {
			t.Fatalf("snapshot %s: %v", n.id, err)
		}
	}
	w.schedule("b", 200, 32)
	leader := c.appliedEverywhere()

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
	w.schedule("c", 100, 32) // while it is down
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	follower.reopen(ctx)
	leader = c.appliedEverywhere()
	sameContent(t, "restarted follower against the leader", follower.local, leader.local)
	if got := follower.node.fsm.restores.Load(); got != 0 {
		t.Fatalf("restarted follower restored %d snapshots, want 0", got)
	}
	if got := w.repo().Pending(); got != 500 {
		t.Fatalf("pending %d, want 500", got)
	}
}

// A leader that hands its leadership over before a planned stop names
// the node that took it, which then takes writes with everything
// committed before; a follower asked to hand over changes nothing and
// names the leader it knows.
func TestNode_TransferLeadership_AnotherNodeLeads(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, enginePebble, testConfig())
	w := c.newWriter()
	w.schedule("before", 50, 10)
	w.close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	old := c.waitLeader()
	for _, n := range c.nodes {
		if n == old {
			continue
		}
		got, err := n.node.TransferLeadership(ctx)
		if err != nil {
			t.Fatalf("transfer on follower %s: %v", n.id, err)
		}
		if known := n.node.Status().LeaderID; got != known && known != "" {
			t.Fatalf("follower %s named %q, knows %q", n.id, got, known)
		}
	}
	var next string
	for {
		// An election of its own may have moved the leadership meanwhile:
		// hand over from whichever node leads.
		var err error
		next, err = old.node.TransferLeadership(ctx)
		if err == nil && old.node.Status().Role != "leader" {
			break
		}
		if err != nil && !errors.Is(err, ErrNotLeader) {
			t.Fatalf("transfer on %s: %v", old.id, err)
		}
		old = c.waitLeader()
	}
	if next == "" || next == old.id {
		t.Fatalf("%s handed over to %q", old.id, next)
	}
	w2 := c.newWriter()
	if got := w2.repo().Pending(); got != 50 {
		t.Fatalf("after the transfer: %d pending, want 50", got)
	}
	w2.schedule("after", 10, 10)
}

// A follower restarted on its Dir into an idle cluster (no write after it
// comes back) learns the commit index and applies its log without waiting
// for a write: its Status reaches the leader's commit index and applied
// index. Until then its Status says where it stands (its log is whole:
// LastLogIndex is the leader's), not that it lost anything. Raft's
// heartbeats carry no commit index; the leader's replication sends it
// every CommitTimeout, after a backoff of up to about 10 s that grows
// while the follower is away (see Status).
func TestCluster_FollowerRestart_IdleCluster_StatusCatchesUp(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, enginePebble, testConfig())
	w := c.newWriter()
	w.schedule("a", 100, 10)
	w.close()
	leader := c.appliedEverywhere()
	var follower *testNode
	for _, n := range c.nodes {
		if n != leader {
			follower = n
			break
		}
	}
	follower.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	follower.reopen(ctx)
	var st, lst Status
	waitFor(t, 60*time.Second, "the restarted follower's status to catch up", func() bool {
		st, lst = follower.node.Status(), c.waitLeader().node.Status()
		return st.LastLogIndex >= lst.CommitIndex && st.CommitIndex >= lst.CommitIndex && st.AppliedIndex >= lst.CommitIndex
	})
	if st.LeaderID == "" {
		t.Fatalf("caught-up follower knows no leader: %+v", st)
	}
	// Raft's applied index counts entries handed to the FSM; the store has
	// them once the FSM applied them.
	leader = c.appliedEverywhere()
	if follower != leader {
		sameContent(t, "restarted follower against "+leader.id, follower.local, leader.local)
	}
	t.Logf("follower %s: commit %d applied %d; leader commit %d", follower.id, st.CommitIndex, st.AppliedIndex, lst.CommitIndex)
}

// TestNode_HandOver_TellsWhetherItLed checks what HandOver reports, for
// a stopping node to log the truth: a follower handed nothing over and
// names the leader it knows; a leader hands over to another node and
// names it; a leader that lost its leadership (its followers stopped)
// before the call handed nothing over and knows no leader, where
// TransferLeadership alone says "" and nil, as for a handover whose
// winner was not heard of.
func TestNode_HandOver_TellsWhetherItLed(t *testing.T) {
	c := startCluster(t, 3, enginePebble, testConfig())
	leader := c.waitLeader()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, n := range c.nodes {
		if n == leader {
			continue
		}
		if h, err := n.node.HandOver(ctx); err != nil || h.Led || h.Leader != leader.id {
			t.Fatalf("HandOver on follower %s: %+v, %v; want not led, leader %s", n.id, h, err, leader.id)
		}
	}
	h, err := leader.node.HandOver(ctx)
	if err != nil || !h.Led || h.Leader == "" || h.Leader == leader.id {
		t.Fatalf("HandOver on leader %s: %+v, %v; want led, and another node named", leader.id, h, err)
	}
	next := c.waitLeader()
	for _, n := range c.running() {
		if n != next {
			n.stop()
		}
	}
	waitFor(t, 20*time.Second, "the lone leader to step down", func() bool { return next.node.Status().Role != "leader" })
	if h, err := next.node.HandOver(ctx); err != nil || h.Led || h.Leader != "" {
		t.Fatalf("HandOver on %s, which lost its leadership: %+v, %v; want not led, no leader", next.id, h, err)
	}
}
