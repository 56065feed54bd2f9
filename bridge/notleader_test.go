package bridge_test

import (
	"strings"
	"sync/atomic"
	"testing"

	"github.com/natsdelay/natsdelay/bridge"
	"github.com/natsdelay/natsdelay/delaystore"
)

// deposedStore refuses every commit, once deposed, as the replicated store
// of a node that lost its cluster's leadership does.
type deposedStore struct {
	delaystore.Store
	deposed atomic.Bool
}

func (s *deposedStore) NewBatch() delaystore.Batch {
	return &deposedBatch{Batch: s.Store.NewBatch(), s: s}
}

type deposedBatch struct {
	delaystore.Batch
	s *deposedStore
}

func (b *deposedBatch) Commit(sync delaystore.SyncMode) error {
	if b.s.deposed.Load() {
		return &delaystore.NotLeaderError{Leader: "nodeb"}
	}
	return b.Batch.Commit(sync)
}

// An ingest whose write is refused because this node is no longer the
// leader gets a 503 that says so and names the leader, not a storage
// fault: the service does not enter storage recovery, stays ready, and
// takes writes again once its store does (here: once it leads again).
func TestService_NotLeaderCommit_Is503NotLeader(t *testing.T) {
	st := &deposedStore{Store: newFailingStore(t)}
	reopened := atomic.Int64{}
	s, nc := startServiceOn(t, st, nil, bridge.WithReopen(func() (delaystore.Store, error) {
		reopened.Add(1)
		return st, nil
	}))
	if code, text := requestStatus(t, nc, "delay.r.x"); code != "" {
		t.Fatalf("while leading: %s %s", code, text)
	}
	st.deposed.Store(true)
	code, text := requestStatus(t, nc, "delay.r.x")
	if code != "503" || !strings.HasSuffix(text, ": not the leader: leader is nodeb") {
		t.Fatalf("commit refused for want of leadership: %q %q, want 503 \"...: not the leader: leader is nodeb\"", code, text)
	}
	if strings.Contains(text, "storage failing") {
		t.Fatalf("reply %q calls it a storage fault", text)
	}
	if err := s.Ready(); err != nil {
		t.Fatalf("Ready after a refused commit = %v, want nil: no storage fault", err)
	}
	st.deposed.Store(false)
	if code, text := requestStatus(t, nc, "delay.r.x"); code != "" {
		t.Fatalf("after leading again: %s %s", code, text)
	}
	if n := reopened.Load(); n != 0 {
		t.Fatalf("store reopened %d times: a refused commit is no storage fault", n)
	}
}
