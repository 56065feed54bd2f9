package boltstore

import (
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/natsdelay/natsdelay/delaystore"
)

// errKeySize is returned by Set and Delete for a key bbolt cannot store.
var errKeySize = fmt.Errorf("key must be 1 to %d bytes", bolt.MaxKeySize)

// op is one buffered write: a delete when del is set.
type op struct {
	key, value []byte
	del        bool
}

// batch buffers writes until Commit applies them in one transaction. It is
// not safe for concurrent use.
type batch struct {
	s         *Store
	ops       []op
	committed bool
	closed    bool
}

// Set stores value under key. Both are copied.
func (b *batch) Set(key, value []byte) error {
	if err := b.writable(); err != nil {
		return fmt.Errorf("boltstore: batch set: %w", err)
	}
	if err := checkKey(key); err != nil {
		return fmt.Errorf("boltstore: batch set: %w", err)
	}
	if int64(len(value)) > bolt.MaxValueSize {
		return fmt.Errorf("boltstore: batch set: value of %d bytes: want at most %d", len(value), int64(bolt.MaxValueSize))
	}
	// One allocation for both; the key's capacity is capped so that
	// nothing can append into the value.
	buf := make([]byte, len(key)+len(value))
	n := copy(buf, key)
	copy(buf[n:], value)
	b.ops = append(b.ops, op{key: buf[:n:n], value: buf[n:]})
	return nil
}

// Delete removes key. The key is copied.
func (b *batch) Delete(key []byte) error {
	if err := b.writable(); err != nil {
		return fmt.Errorf("boltstore: batch delete: %w", err)
	}
	if err := checkKey(key); err != nil {
		return fmt.Errorf("boltstore: batch delete: %w", err)
	}
	b.ops = append(b.ops, op{key: append([]byte{}, key...), del: true})
	return nil
}

// SingleDelete is Delete: a B+tree removes the key in place, with no
// tombstone to save.
func (b *batch) SingleDelete(key []byte) error { return b.Delete(key) }

// Len is the number of operations added so far.
func (b *batch) Len() int { return len(b.ops) }

// Commit applies the batch in one bbolt transaction, which is always
// synced, whatever sync says. It may be called once, even if it fails.
func (b *batch) Commit(sync delaystore.SyncMode) error {
	if err := b.writable(); err != nil {
		return fmt.Errorf("boltstore: commit: %w", err)
	}
	b.committed = true
	return b.s.commit(b.ops)
}

// Close discards the batch if it was not committed.
func (b *batch) Close() error {
	b.closed = true
	b.ops = nil
	return nil
}

func (b *batch) writable() error {
	switch {
	case b.closed:
		return delaystore.ErrClosed
	case b.committed:
		return delaystore.ErrBatchCommitted
	}
	return nil
}

func checkKey(key []byte) error {
	if len(key) == 0 || len(key) > bolt.MaxKeySize {
		return fmt.Errorf("key of %d bytes: %w", len(key), errKeySize)
	}
	return nil
}
