package raftstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/natsdelay/natsdelay/delaystore"
)

// holdingStore is a local store whose commits wait while it holds them,
// as a store on a stalled disk does.
type holdingStore struct {
	delaystore.Store
	mu      sync.Mutex
	release chan struct{} // nil while commits go through; closed to let them go
}

func (s *holdingStore) hold() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.release == nil {
		s.release = make(chan struct{})
	}
}

func (s *holdingStore) let() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.release != nil {
		close(s.release)
		s.release = nil
	}
}

func (s *holdingStore) NewBatch() delaystore.Batch {
	return &holdingBatch{Batch: s.Store.NewBatch(), s: s}
}

type holdingBatch struct {
	delaystore.Batch
	s *holdingStore
}

func (b *holdingBatch) Commit(sync delaystore.SyncMode) error {
	b.s.mu.Lock()
	release := b.s.release
	b.s.mu.Unlock()
	if release != nil {
		<-release
	}
	return b.Batch.Commit(sync)
}

// startHoldingCluster starts three nodes with cfg whose local stores can
// hold their commits; every store lets go before the nodes close.
func startHoldingCluster(t *testing.T, cfg Config) (*testCluster, map[*testNode]*holdingStore) {
	t.Helper()
	c := &testCluster{t: t}
	stores := map[*testNode]*holdingStore{}
	var lns []net.Listener
	var peers []string
	for i := range 3 {
		n, ln := newTestNode(t, fmt.Sprintf("node%d", i), enginePebble)
		hs := &holdingStore{Store: n.local}
		n.local = hs
		stores[n] = hs
		// NB: after newTestNode's cleanup, so it runs first: a node whose
		// FSM waits on its store cannot shut down.
		t.Cleanup(hs.let)
		c.nodes, lns, peers = append(c.nodes, n), append(lns, ln), append(peers, n.addr)
	}
	cfg.Peers = peers
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	errs := make([]error, len(c.nodes))
	var wg sync.WaitGroup
	for i, n := range c.nodes {
		wg.Go(func() { errs[i] = n.open(ctx, cfg, lns[i]) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	c.waitLeader()
	return c, stores
}

// TestNode_FollowerStoreHeld_BehindUntilCaughtUp checks that a follower
// whose local store stops taking writes says so: its Status.Lag names
// it behind the leader once an entry the leader committed waited there
// longer than MaxLag, with its lag in entries, while the others go on;
// once its store takes writes again it catches up and is no longer
// behind. Before it, and on an idle cluster, no node is behind.
func TestNode_FollowerStoreHeld_BehindUntilCaughtUp(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.MaxLag = 300 * time.Millisecond
	c, stores := startHoldingCluster(t, cfg)
	leader := c.commitOnLeader("a", "1")
	c.appliedEverywhere()
	var follower *testNode
	for _, n := range c.nodes {
		if n != leader {
			follower = n
		}
	}
	for _, n := range c.nodes {
		waitFor(t, 10*time.Second, n.id+" to have no lag on a cluster that applied everything", func() bool {
			g := n.node.Status().Lag
			return g.Behind == "" && g.Entries == 0
		})
	}

	stores[follower].hold()
	var st Status
	for i := 0; ; i++ {
		c.commitOnLeader(fmt.Sprintf("k%d", i), "v")
		// NB: on a loaded machine a heartbeat can come late enough that
		// the follower first says it has no contact from a leader, which
		// is true as well; go on until it names its lag in entries.
		if st = follower.node.Status(); strings.Contains(st.Lag.Behind, "behind the leader") {
			break
		}
		if i == 5000 {
			t.Fatalf("%s with its store held, after %d commits: lag %+v, want behind", follower.id, i, st.Lag)
		}
	}
	if !strings.Contains(st.Lag.Behind, "behind the leader") || st.Lag.Entries == 0 || st.Lag.Age <= cfg.MaxLag {
		t.Fatalf("%s with its store held: lag %+v, want behind the leader by some entries, for over %v", follower.id, st.Lag, cfg.MaxLag)
	}
	t.Logf("%s: %s", follower.id, st.Lag.Behind)

	stores[follower].let()
	waitFor(t, 20*time.Second, follower.id+" to catch up", func() bool {
		g := follower.node.Status().Lag
		return g.Behind == "" && g.Entries == 0
	})
	c.appliedEverywhere()
}
