package pebblestore

import (
	"errors"
	"fmt"

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
	// unusable is why the store could not make the batch: it was closed or
	// failed.
	unusable error
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
	return b.s.commit(b.b, sync)
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
