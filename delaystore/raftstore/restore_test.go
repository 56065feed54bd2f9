package raftstore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/natsdelay/natsdelay/delaystore"
)

// commitBudget wraps a store so that the commits of whole restore chunks
// fail once budget of them is spent, as a disk that fails half way through
// a restore would. Smaller batches (the log entries a restarting node may
// replay first) commit normally.
type commitBudget struct {
	delaystore.Store
	budget atomic.Int64
}

func (s *commitBudget) NewBatch() delaystore.Batch {
	return &budgetBatch{Batch: s.Store.NewBatch(), s: s}
}

type budgetBatch struct {
	delaystore.Batch
	s *commitBudget
}

func (b *budgetBatch) Commit(sync delaystore.SyncMode) error {
	if b.Len() >= restoreChunkOps && b.s.budget.Add(-1) < 0 {
		return errors.New("injected commit failure")
	}
	return b.Batch.Commit(sync)
}

// A snapshot restore cut short (the local store failed half way) leaves a
// marker, so that the next start restores the snapshot again instead of
// trusting a store that is part old, part new; the node then converges.
func TestCluster_RestoreCutShort_RestoredAgainAtStart(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.TrailingLogs = 5
	c := startCluster(t, 3, enginePebble, cfg)
	w := c.newWriter()
	w.schedule("old", 100, 50)
	leader := c.appliedEverywhere()
	var lagging *testNode
	for _, n := range c.nodes {
		if n != leader {
			lagging = n
			break
		}
	}
	lagging.stop()

	// Enough keys for Restore to take several chunks, and a compacted log
	// that no longer reaches back to what the lagging node holds, on
	// either node that may lead.
	w.schedule("new", 3*restoreChunkOps, 500)
	for _, n := range c.running() {
		if err := n.node.snapshotNow(); err != nil {
			t.Fatalf("snapshot %s: %v", n.id, err)
		}
	}

	base := lagging.local
	broken := &commitBudget{Store: base}
	broken.budget.Store(1)
	lagging.local = broken
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	lagging.reopen(ctx)
	waitFor(t, 20*time.Second, "the restore to fail", func() bool { return lagging.node.Status().Err != "" })
	marker := filepath.Join(lagging.dir, restoreMarkerFile)
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("no restore marker after a failed restore: %v", err)
	}

	lagging.stop()
	lagging.local = base
	lagging.reopen(ctx)
	if got := lagging.node.fsm.restores.Load(); got != 1 {
		t.Fatalf("restores at start: %d, want 1", got)
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("restore marker still there: %v", err)
	}
	w.schedule("after", 10, 10)
	leader = c.appliedEverywhere()
	sameContent(t, "restored node against the leader", lagging.local, leader.local)
}
