package storetest

import (
	"fmt"
	"sync/atomic"

	"github.com/natsdelay/natsdelay/delaystore"
)

// FailingStore wraps a Store so that, once Break is called, every commit
// fails as a store's does after a write to disk failed: with an error
// wrapping delaystore.ErrFailed. Reads keep working.
type FailingStore struct {
	delaystore.Store
	broken atomic.Bool
}

// NewFailingStore wraps s; it commits normally until Break.
func NewFailingStore(s delaystore.Store) *FailingStore { return &FailingStore{Store: s} }

// Break makes every later commit fail.
func (s *FailingStore) Break() { s.broken.Store(true) }

// NewBatch returns a batch whose Commit fails once the store is broken.
func (s *FailingStore) NewBatch() delaystore.Batch {
	return &failingBatch{Batch: s.Store.NewBatch(), s: s}
}

type failingBatch struct {
	delaystore.Batch
	s *FailingStore
}

func (b *failingBatch) Commit(sync delaystore.SyncMode) error {
	if b.s.broken.Load() {
		return fmt.Errorf("storetest: commit: %w: injected", delaystore.ErrFailed)
	}
	return b.Batch.Commit(sync)
}
