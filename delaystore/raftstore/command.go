package raftstore

import (
	"encoding/binary"
	"fmt"

	"github.com/natsdelay/natsdelay/delaystore"
)

// One Raft log entry carries one committed batch, encoded once on the
// leader and decoded by every node's FSM:
//
//	+---------+------------------+----------------------------------------+
//	| version | count, 4 bytes BE | count operations                      |
//	+---------+------------------+----------------------------------------+
//
//	operation: kind byte (opSet or opDelete), key length uvarint, key,
//	           and for opSet: value length uvarint, value
//
// Operations are absolute writes (a value, or a removal), never increments:
// applying an entry twice leaves the store as applying it once, which the
// restart argument in the package doc relies on.
const (
	commandVersion byte = 1

	opSet    byte = 1
	opDelete byte = 2
)

// MaxKeySize is the longest key a Batch accepts: the smallest limit of the
// engines (bbolt's 32 KiB), so that an entry the leader accepts applies on
// every node, whichever engine each one runs.
const MaxKeySize = 32 << 10

// command is an entry under construction. It is not safe for concurrent use.
type command struct {
	buf []byte
	n   int
}

// headerLen is the version byte and the count. The count has a fixed width
// so that it can be written in place once the batch is complete.
const headerLen = 5

func newCommand() command {
	return command{buf: append(make([]byte, 0, 256), commandVersion, 0, 0, 0, 0)}
}

func (c *command) set(key, value []byte) error {
	if err := checkKey(key); err != nil {
		return err
	}
	c.buf = append(c.buf, opSet)
	c.buf = binary.AppendUvarint(c.buf, uint64(len(key)))
	c.buf = append(c.buf, key...)
	c.buf = binary.AppendUvarint(c.buf, uint64(len(value)))
	c.buf = append(c.buf, value...)
	c.n++
	return nil
}

func (c *command) delete(key []byte) error {
	if err := checkKey(key); err != nil {
		return err
	}
	c.buf = append(c.buf, opDelete)
	c.buf = binary.AppendUvarint(c.buf, uint64(len(key)))
	c.buf = append(c.buf, key...)
	c.n++
	return nil
}

// bytes returns the encoded entry. It is the command's own buffer, not a
// copy.
func (c *command) bytes() []byte {
	binary.BigEndian.PutUint32(c.buf[1:headerLen], uint32(c.n))
	return c.buf
}

func checkKey(key []byte) error {
	if len(key) == 0 || len(key) > MaxKeySize {
		return fmt.Errorf("raftstore: key of %d bytes: must be 1 to %d bytes", len(key), MaxKeySize)
	}
	return nil
}

// applyCommand decodes entry into b, the batch of the local store. The
// slices it passes to b point into entry; b copies them.
func applyCommand(entry []byte, b delaystore.Batch) error {
	if len(entry) < headerLen || entry[0] != commandVersion {
		return fmt.Errorf("%w: version %v, want %d", errCorruptEntry, firstByte(entry), commandVersion)
	}
	n := binary.BigEndian.Uint32(entry[1:headerLen])
	r := reader{buf: entry[headerLen:]}
	for i := uint32(0); i < n && r.err == nil; i++ {
		kind := r.byte()
		key := r.bytes()
		switch kind {
		case opSet:
			value := r.bytes()
			if r.err == nil {
				r.err = b.Set(key, value)
			}
		case opDelete:
			if r.err == nil {
				r.err = b.Delete(key)
			}
		default:
			if r.err == nil {
				r.err = fmt.Errorf("%w: operation %d of kind %d", errCorruptEntry, i, kind)
			}
		}
	}
	if r.err == nil && len(r.buf) != 0 {
		r.err = fmt.Errorf("%w: %d bytes after %d operations", errCorruptEntry, len(r.buf), n)
	}
	return r.err
}

func firstByte(b []byte) any {
	if len(b) == 0 {
		return "none"
	}
	return b[0]
}

// reader decodes uvarints and length-prefixed byte strings, keeping the
// first error.
type reader struct {
	buf []byte
	err error
}

func (r *reader) byte() byte {
	if r.err != nil {
		return 0
	}
	if len(r.buf) == 0 {
		r.err = fmt.Errorf("%w: truncated", errCorruptEntry)
		return 0
	}
	b := r.buf[0]
	r.buf = r.buf[1:]
	return b
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.buf)
	if n <= 0 {
		r.err = fmt.Errorf("%w: bad length", errCorruptEntry)
		return 0
	}
	r.buf = r.buf[n:]
	return v
}

func (r *reader) bytes() []byte {
	n := r.uvarint()
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.buf)) {
		r.err = fmt.Errorf("%w: %d bytes announced, %d left", errCorruptEntry, n, len(r.buf))
		return nil
	}
	b := r.buf[:n:n]
	r.buf = r.buf[n:]
	return b
}
