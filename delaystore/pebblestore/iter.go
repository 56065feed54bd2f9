package pebblestore

import (
	"bytes"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/natsdelay/natsdelay/delaystore"
)

// iterator is a delaystore.Iterator over a Pebble iterator. It is not safe
// for concurrent use.
type iterator struct {
	s  *Store
	it *pebble.Iterator // nil for an empty range and once closed
	// err is the first error met. Pebble clears its own error on every
	// seek, so it is kept here, and it stops the iterator for good.
	err    error
	closed bool
}

// First moves to the first key in bounds.
func (i *iterator) First() bool {
	if i.it == nil || i.err != nil {
		return false
	}
	return i.settle(i.it.First())
}

// SeekGE moves to the first key in bounds that is >= key. A key below the
// lower bound seeks to the lower bound.
func (i *iterator) SeekGE(key []byte) bool {
	if i.it == nil || i.err != nil {
		return false
	}
	if len(key) == 0 {
		// Every key is >= the empty key. NB: Pebble's invariant checks,
		// on in race builds, index key[0] of any non-nil seek key.
		return i.settle(i.it.First())
	}
	return i.settle(i.it.SeekGE(key))
}

// Next moves to the next key. It returns false if the iterator is not valid.
func (i *iterator) Next() bool {
	if !i.Valid() {
		return false
	}
	return i.settle(i.it.Next())
}

// Valid reports whether the iterator is at a key.
func (i *iterator) Valid() bool {
	return i.it != nil && i.err == nil && i.it.Valid()
}

// Key is the current key, or nil. It is valid until the next move or Close.
func (i *iterator) Key() []byte {
	if !i.Valid() {
		return nil
	}
	return i.it.Key()
}

// Value is the current value, or nil. It is valid until the next move or
// Close. If reading it fails, it returns nil and Error reports why.
func (i *iterator) Value() []byte {
	if !i.Valid() {
		return nil
	}
	v, err := i.it.ValueAndErr()
	if err != nil {
		i.err = fmt.Errorf("pebblestore: iterator value: %w", err)
		return nil
	}
	return v
}

// Error is the first error the iterator met.
func (i *iterator) Error() error { return i.err }

// Close releases the iterator and returns its first error, if any.
func (i *iterator) Close() error {
	if i.closed {
		return nil
	}
	i.closed = true
	if i.it == nil {
		return i.err
	}
	err := i.it.Close()
	i.it = nil
	i.s.forget(i)
	if i.err != nil {
		return i.err
	}
	if err != nil {
		return fmt.Errorf("pebblestore: iterator close: %w", err)
	}
	return nil
}

// abandon closes an iterator its owner left open when the Store closed.
func (i *iterator) abandon() {
	if i.it != nil {
		_ = i.it.Close()
		i.it = nil
	}
	if i.err == nil {
		i.err = fmt.Errorf("pebblestore: iterator: %w", delaystore.ErrClosed)
	}
}

// settle records the iterator's error when a move leaves it invalid.
func (i *iterator) settle(valid bool) bool {
	if valid {
		return true
	}
	if err := i.it.Error(); err != nil && i.err == nil {
		i.err = fmt.Errorf("pebblestore: iterator: %w", err)
	}
	return false
}

// lowerBound copies a lower bound. An empty one bounds nothing, since every
// key is >= it, and becomes nil. NB: Pebble's invariant checks, on in race
// builds, index key[0] of a non-nil seek key, and First seeks to the lower
// bound.
func lowerBound(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return append([]byte{}, b...)
}

// cloneBound copies a bound, keeping nil (unbounded) distinct from empty.
func cloneBound(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte{}, b...)
}

// emptyRange reports whether [lo, hi) holds no key. A nil lo is the
// smallest key.
func emptyRange(lo, hi []byte) bool {
	return hi != nil && bytes.Compare(lo, hi) >= 0
}
