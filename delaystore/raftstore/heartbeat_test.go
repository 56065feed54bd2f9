package raftstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"natsdelay/delaystore"
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

// stallingStore holds every commit while stalled, as a local store on a
// disk that stopped answering does.
type stallingStore struct {
	delaystore.Store
	mu   sync.Mutex
	gate chan struct{} // nil while commits pass
}

func (s *stallingStore) stall() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gate == nil {
		s.gate = make(chan struct{})
	}
}

func (s *stallingStore) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gate != nil {
		close(s.gate)
		s.gate = nil
	}
}

func (s *stallingStore) NewBatch() delaystore.Batch {
	return &stallingBatch{Batch: s.Store.NewBatch(), s: s}
}

type stallingBatch struct {
	delaystore.Batch
	s *stallingStore
}

func (b *stallingBatch) Commit(sync delaystore.SyncMode) error {
	b.s.mu.Lock()
	gate := b.s.gate
	b.s.mu.Unlock()
	if gate != nil {
		<-gate
	}
	return b.Batch.Commit(sync)
}

// A leader whose commits cannot finish (its local store stalls, so
// neither a commit nor the barrier that renews an idle lease completes)
// keeps its lease while its followers answer its heartbeats: a slow
// commit path does not fence a leader that the others still follow.
func TestCluster_LeaderWithStalledCommits_KeepsLeaseFromHeartbeats(t *testing.T) {
	t.Parallel()
	var nodes []*testNode
	var lns []net.Listener
	var peers []string
	var stalling []*stallingStore
	for i := range 3 {
		n, ln := newTestNode(t, fmt.Sprintf("node%d", i), enginePebble)
		s := &stallingStore{Store: n.local}
		n.local = s
		// Runs before the node's own cleanup closes it: Close waits for
		// the apply that the stall holds.
		t.Cleanup(s.release)
		stalling = append(stalling, s)
		nodes, lns, peers = append(nodes, n), append(lns, ln), append(peers, n.addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := errors.Join(openAll(ctx, nodes, lns, [][]string{peers, peers, peers}, nil)...); err != nil {
		t.Fatal(err)
	}
	c := &testCluster{t: t, nodes: nodes}
	leader := c.waitLeader()
	waitFor(t, 10*time.Second, "the leader's lease", leader.node.HoldsLease)
	var stalled *stallingStore
	for i, n := range nodes {
		if n == leader {
			stalled = stalling[i]
		}
	}

	stalled.stall()
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
	stalled.release()
	if err := <-commitErr; err != nil && !errors.Is(err, ErrNotLeader) {
		t.Fatalf("commit after the stall: %v", err)
	}
}
