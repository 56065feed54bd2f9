package pebblestore

import (
	"errors"
	"fmt"
	"sync"

	"github.com/cockroachdb/pebble/v2"

	"github.com/natsdelay/natsdelay/delaystore"
)

// errEmptyKey is returned by Set and Delete for an empty key, which the
// contract rejects for every engine because bbolt cannot store one.
var errEmptyKey = errors.New("empty key")

// batch is a delaystore.Batch over a Pebble batch, which copies what it is
// given. It is not safe for concurrent use.
type batch struct {
	s         *Store
	b         *pebble.Batch // nil if the store was unusable when it was made
	committed bool
	closed    bool
	// commitErr is the error of Commit; a batch whose commit failed is
	// not reused.
	commitErr error
	// unusable is why the store could not make the batch: it was closed or
	// failed.
	unusable error
	// kept is the list a committed batch goes back to on Close; nil for
	// one too large to keep.
	kept *spareBatches
}

// Set stores value under key. Both are copied.
func (b *batch) Set(key, value []byte) error {
	if err := b.writable(); err != nil {
		return fmt.Errorf("pebblestore: batch set: %w", err)
	}
	if len(key) == 0 {
		return fmt.Errorf("pebblestore: batch set: %w", errEmptyKey)
	}
	if err := b.b.Set(key, value, nil); err != nil {
		return fmt.Errorf("pebblestore: batch set: %w", err)
	}
	return nil
}

// Delete removes key. The key is copied.
func (b *batch) Delete(key []byte) error {
	if err := b.writable(); err != nil {
		return fmt.Errorf("pebblestore: batch delete: %w", err)
	}
	if len(key) == 0 {
		return fmt.Errorf("pebblestore: batch delete: %w", errEmptyKey)
	}
	if err := b.b.Delete(key, nil); err != nil {
		return fmt.Errorf("pebblestore: batch delete: %w", err)
	}
	return nil
}

// SingleDelete removes key, set at most once (see delaystore.Batch). The
// key is copied.
func (b *batch) SingleDelete(key []byte) error {
	if err := b.writable(); err != nil {
		return fmt.Errorf("pebblestore: batch single delete: %w", err)
	}
	if len(key) == 0 {
		return fmt.Errorf("pebblestore: batch single delete: %w", errEmptyKey)
	}
	if err := b.b.SingleDelete(key, nil); err != nil {
		return fmt.Errorf("pebblestore: batch single delete: %w", err)
	}
	return nil
}

// Len is the number of operations added so far.
func (b *batch) Len() int {
	if b.b == nil {
		return 0
	}
	return int(b.b.Count())
}

// Commit applies the batch atomically. It may be called once, even if it
// fails; a failed commit fails the whole Store (see the package doc).
func (b *batch) Commit(sync delaystore.SyncMode) error {
	if err := b.writable(); err != nil {
		return fmt.Errorf("pebblestore: commit: %w", err)
	}
	b.committed = true
	b.commitErr = b.s.commit(b.b, sync)
	return b.commitErr
}

// Close releases the batch, discarding it if it was not committed.
func (b *batch) Close() error {
	if b.closed {
		return nil
	}
	b.closed = true
	if b.b == nil {
		return nil
	}
	pb := b.b
	b.b = nil
	if b.commitErr == nil && b.kept != nil && b.kept.put(pb) {
		return nil
	}
	if err := pb.Close(); err != nil {
		return fmt.Errorf("pebblestore: batch close: %w", err)
	}
	return nil
}

func (b *batch) writable() error {
	switch {
	case b.closed:
		return delaystore.ErrClosed
	case b.committed:
		return delaystore.ErrBatchCommitted
	case b.unusable != nil:
		return b.unusable
	}
	return nil
}

// maxSpareBatches is how many reset batches a Store keeps for NewBatch:
// one for each writer that commits often, ingest's group commit and the
// deleter.
const maxSpareBatches = 2

// spareBatchBytes bounds the buffer a kept batch keeps: a group commit
// of 4,096 messages of 256 bytes takes 2.4 MiB, over Pebble's default of
// 1 MiB. The spares thus hold at most 8 MiB, which ReleaseMemory lets go.
const spareBatchBytes = 4 << 20

// sizedBatchBytes bounds the buffer of the one batch a Store keeps for
// NewBatchSize: the planner's batch of 4,096 occurrences of 256 bytes
// takes about 5.4 MiB. Made afresh, it was a tenth of what the recurring
// bench allocated, three times a second, and the collections that it
// brought on fell as often as not on a burst of deliveries. A larger
// batch is made for its commit alone, as before.
const sizedBatchBytes = 8 << 20

// spareBatches are Pebble batches kept for reuse with their buffers.
// Pebble's Close pools a batch too, but in a sync.Pool shared by every
// batch and emptied by garbage collections, so ingest's group commit of
// hundreds of messages mostly grew a new buffer, doubling it from 1 KiB
// and copying as it went: 10% of the bytes the end-to-end bench
// allocated, and Batch.grow 1.6% of the serve process's CPU. Reset keeps
// a buffer of up to the batch's retained size and drops a larger one,
// and a batch that Pebble wrapped as a flushable batch has its buffer
// taken by then.
type spareBatches struct {
	max   int // batches kept at most
	mu    sync.Mutex
	spare []*pebble.Batch
}

// take returns a kept batch, or nil if none is.
func (sb *spareBatches) take() *pebble.Batch {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	n := len(sb.spare)
	if n == 0 {
		return nil
	}
	pb := sb.spare[n-1]
	sb.spare[n-1] = nil
	sb.spare = sb.spare[:n-1]
	return pb
}

// put resets pb and keeps it, and reports whether it did: not when
// maxSpareBatches are kept already.
func (sb *spareBatches) put(pb *pebble.Batch) bool {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if len(sb.spare) >= sb.max {
		return false
	}
	pb.Reset()
	sb.spare = append(sb.spare, pb)
	return true
}

// drop lets every kept batch go, with its buffer.
func (sb *spareBatches) drop() {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	for i, pb := range sb.spare {
		_ = pb.Close() // a reset batch has nothing to report
		sb.spare[i] = nil
	}
	sb.spare = sb.spare[:0]
}
