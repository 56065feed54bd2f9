package boltstore

import (
	"bytes"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/natsdelay/natsdelay/delaystore"
)

// iterator is a delaystore.Iterator over a bbolt cursor in a read-only
// transaction. bbolt cursors know no bounds, so it enforces [lo, hi). It is
// not safe for concurrent use.
type iterator struct {
	s      *Store
	tx     *bolt.Tx // nil for an empty range and once closed
	c      *bolt.Cursor
	lo, hi []byte
	// key and value are the current pair, nil when not valid. They point
	// into the memory map, valid while tx is open.
	key, value []byte
	err        error
	closed     bool
}

// First moves to the first key in bounds.
func (i *iterator) First() bool {
	if i.tx == nil {
		return i.clear()
	}
	if i.lo != nil {
		return i.settle(i.c.Seek(i.lo))
	}
	return i.settle(i.c.First())
}

// SeekGE moves to the first key in bounds that is >= key. A key below the
// lower bound seeks to the lower bound.
func (i *iterator) SeekGE(key []byte) bool {
	if i.tx == nil {
		return i.clear()
	}
	if i.lo != nil && bytes.Compare(key, i.lo) < 0 {
		key = i.lo
	}
	return i.settle(i.c.Seek(key))
}

// Next moves to the next key. It returns false if the iterator is not valid.
func (i *iterator) Next() bool {
	if !i.Valid() {
		return false
	}
	return i.settle(i.c.Next())
}

// Valid reports whether the iterator is at a key.
func (i *iterator) Valid() bool { return i.key != nil }

// Key is the current key, or nil. It is valid until the next move or Close.
func (i *iterator) Key() []byte { return i.key }

// Value is the current value, or nil. It is valid until the next move or
// Close.
func (i *iterator) Value() []byte { return i.value }

// Error is the first error the iterator met.
func (i *iterator) Error() error { return i.err }

// Close ends the read transaction and returns the iterator's error, if any.
func (i *iterator) Close() error {
	if i.closed {
		return nil
	}
	i.closed = true
	i.clear()
	if i.tx == nil {
		return i.err
	}
	err := i.tx.Rollback()
	i.tx, i.c = nil, nil
	i.s.forget(i)
	if i.err != nil {
		return i.err
	}
	if err != nil {
		return fmt.Errorf("boltstore: iterator close: %w", err)
	}
	return nil
}

// abandon ends the transaction of an iterator its owner left open when the
// Store closed.
func (i *iterator) abandon() {
	i.clear()
	if i.tx != nil {
		_ = i.tx.Rollback()
		i.tx, i.c = nil, nil
	}
	if i.err == nil {
		i.err = fmt.Errorf("boltstore: iterator: %w", delaystore.ErrClosed)
	}
}

// settle takes the pair a cursor moved to, unless it is past the upper
// bound or the end.
func (i *iterator) settle(k, v []byte) bool {
	if k == nil || (i.hi != nil && bytes.Compare(k, i.hi) >= 0) {
		return i.clear()
	}
	i.key, i.value = k, v
	return true
}

func (i *iterator) clear() bool {
	i.key, i.value = nil, nil
	return false
}
