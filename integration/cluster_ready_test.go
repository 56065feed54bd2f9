package integration_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/natsdelay/natsdelay/bridge"
	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/delaystore/raftstore"
)

// heldStore is a node's local store whose commits wait while it is held,
// as on a disk that stalls or is full.
type heldStore struct {
	delaystore.Store
	mu      sync.Mutex
	release chan struct{} // nil while commits go through
}

func (s *heldStore) hold() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.release == nil {
		s.release = make(chan struct{})
	}
}

func (s *heldStore) let() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.release != nil {
		close(s.release)
		s.release = nil
	}
}

func (s *heldStore) NewBatch() delaystore.Batch {
	return &heldBatch{Batch: s.Store.NewBatch(), s: s}
}

type heldBatch struct {
	delaystore.Batch
	s *heldStore
}

func (b *heldBatch) Commit(sync delaystore.SyncMode) error {
	b.s.mu.Lock()
	release := b.s.release
	b.s.mu.Unlock()
	if release != nil {
		<-release
	}
	return b.Batch.Commit(sync)
}

// TestCluster_InProcess_FollowerBehind_NotReady checks that readiness
// tells the truth on a follower: ready while it keeps up, 503 with the
// reason once its store stops taking the entries the leader commits (an
// entry waits longer than MaxLag), with the node's status (what
// natsdelay_cluster_behind reads) saying so too, while the leader goes on serving with the other
// follower; and ready again once it has caught up.
func TestCluster_InProcess_FollowerBehind_NotReady(t *testing.T) {
	srv := startServer(t)
	held := make([]*heldStore, 3)
	nodes := startInProcessCluster(t, srv, 3, func(i int, rc *raftstore.Config, local *delaystore.Store) {
		held[i] = &heldStore{Store: *local}
		*local = held[i]
		rc.MaxLag = 500 * time.Millisecond
	})
	for _, h := range held {
		// NB: registered after the cluster's cleanup, so it runs first: a
		// node whose store holds a commit cannot shut down.
		t.Cleanup(h.let)
	}
	leader := serving(t, nodes)
	var follower *inProcessNode
	var fi int
	for i, n := range nodes {
		if n != leader {
			follower, fi = n, i
		}
	}
	checkFor(t, wait, 10*time.Millisecond, func() error { return follower.svc.Ready() })

	held[fi].hold()
	var err error
	for i := 0; err == nil; i++ {
		scheduleInCluster(t, leader.nc, newMsg("ready.behind", "x", "Delay", "1h"))
		err = follower.svc.Ready()
		if i == 5000 {
			t.Fatalf("%s with its store held, after %d messages: Ready = nil, want 503 behind the leader", follower.id, i)
		}
	}
	if !strings.Contains(err.Error(), "cluster node behind the leader: entry ") || !strings.Contains(err.Error(), "unavailable") {
		t.Fatalf("%s with its store held: Ready = %v, want a 503 that says it is behind the leader", follower.id, err)
	}
	if st := bridge.RaftCluster(follower.node).Status(); st.Behind == "" || st.LagSeconds <= 0.5 || st.LagEntries == 0 {
		t.Fatalf("%s status %+v: want behind, with its lag", follower.id, st)
	}
	t.Logf("%s: %v", follower.id, err)
	if err := leader.svc.Ready(); err != nil {
		t.Fatalf("leader %s: Ready = %v while one follower is behind", leader.id, err)
	}

	held[fi].let()
	checkFor(t, wait, 10*time.Millisecond, func() error { return follower.svc.Ready() })
}
