package raftstore

import (
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// The followers' answers prove leadership from a quorum only: with five
// voters, two followers besides this node; answers of a non-voter, of
// this node itself or of an earlier term count for nothing; the proof is
// the latest time from which a quorum is known to have answered.
func TestFollowerAnswers_ProofNeedsAQuorumOfVoters(t *testing.T) {
	voters := []raft.ServerID{"a", "b", "c", "d", "e"}
	var a followerAnswers
	if _, ok := a.note(1, "b", 100, "a", voters); ok {
		t.Fatal("one follower of five voters proves a quorum")
	}
	if _, ok := a.note(1, "x", 300, "a", voters); ok {
		t.Fatal("a non-voter's answer counts toward the quorum")
	}
	if _, ok := a.note(1, "a", 300, "a", voters); ok {
		t.Fatal("this node's own answer counts toward the quorum")
	}
	proof, ok := a.note(1, "c", 200, "a", voters)
	if !ok || proof != 100 {
		t.Fatalf("b at 100 and c at 200: proof %d, %v, want 100, true", proof, ok)
	}
	if proof, ok = a.note(1, "d", 400, "a", voters); !ok || proof != 200 {
		t.Fatalf("b 100, c 200, d 400: proof %d, %v, want 200, true", proof, ok)
	}
	if proof, ok = a.note(1, "b", 50, "a", voters); !ok || proof != 200 {
		t.Fatalf("an older answer moved the proof: %d, %v, want 200, true", proof, ok)
	}
	if _, ok = a.note(2, "b", 500, "a", voters); ok {
		t.Fatal("answers of the term before count in the next")
	}
	if _, ok = a.note(2, "c", 500, "z", voters); ok {
		t.Fatal("a node that is not a voter proves its leadership")
	}
	three := []raft.ServerID{"a", "b", "c"}
	var b followerAnswers
	if proof, ok = b.note(1, "c", 700, "a", three); !ok || proof != 700 {
		t.Fatalf("three voters, one follower at 700: proof %d, %v, want 700, true", proof, ok)
	}
	if _, ok = b.note(1, "b", 900, "b", []raft.ServerID{"b"}); ok {
		t.Fatal("a single voter proves its leadership from answers")
	}
}

// A leader whose commits cannot finish (its local store stalls, so
// neither a commit nor the barrier that renews an idle lease completes)
// keeps its lease while its followers answer its heartbeats: a slow
// commit path does not fence a leader that the others still follow.
func TestCluster_LeaderWithStalledCommits_KeepsLeaseFromHeartbeats(t *testing.T) {
	t.Parallel()
	c, stores := startHoldingCluster(t, testConfig())
	leader := c.waitLeader()
	waitFor(t, 10*time.Second, "the leader's lease", leader.node.HoldsLease)
	stalled := stores[leader]

	stalled.hold()
	commitErr := make(chan error, 1)
	go func() { commitErr <- commitPairs(leader.node.Store(), "stalled", "1") }()
	first := leader.node.lease.until.Load()
	waitFor(t, 10*time.Second, "the lease renewed while commits stall", func() bool {
		return leader.node.lease.until.Load() > first+4*int64(leader.node.lease.length)
	})
	if !leader.node.HoldsLease() {
		t.Fatal("the leader lost its lease while its followers answer")
	}
	select {
	case err := <-commitErr:
		t.Fatalf("the commit finished while the leader's store stalled: %v", err)
	default:
	}
	stalled.let()
	if err := <-commitErr; err != nil && !errors.Is(err, ErrNotLeader) {
		t.Fatalf("commit after the stall: %v", err)
	}
}
