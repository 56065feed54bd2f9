package delaystore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/natsdelay/natsdelay/keys"
)

// groupedBatch is a Batch that hands the writes of messages (event keys)
// to the store's batch as they come and holds every other write until
// Commit, in one run for each kind of key (the due index, the subject
// counts, ...; see kindOf), so that the store receives the batch as the
// messages, then each kind in the order its first write came, each run
// in the order written.
//
// Why: Pebble inserts a batch into its memtable's skiplist in the order of
// its writes, and searches for each key from where the one before went in
// when the key lies just after it; otherwise from the top of the list. A
// batch's messages of one subject are neighbours in the keyspace, and so
// are its due entries of one millisecond, while a message and its own due
// entry are far apart: written message, entry, message, entry, every
// insert searched from the top (performance.md, "A batch in runs").
//
// Which run a write goes to is a function of its key alone, so the writes
// of any one key keep their order and the batch commits exactly what it
// did written as it came. Nothing reads a batch before it commits.
type groupedBatch struct {
	Batch
	runs *heldRuns
	// done is set by Commit and Close: later writes go to the store's
	// batch, which refuses them. It is set from the start when
	// groupWrites is off.
	done bool
	// released is false once Commit failed to add the held writes: the
	// store's batch, short of them, must never commit.
	released bool
}

// heldRuns are the writes a groupedBatch holds, a run for each kind of key
// in the order each kind was first written. The repository keeps one and
// reuses its buffers from batch to batch.
type heldRuns struct {
	kinds []string
	// runs[i] holds the writes of kinds[i], each as its op, then the key
	// and the value each as uvarint(len) and bytes.
	runs [][]byte
	n    int
}

const (
	heldSet byte = iota
	heldDelete
	heldSingleDelete
)

// grouped returns b as a groupedBatch holding its writes in runs, which
// it empties first. wmu must be held, as runs is the repository's scratch.
func grouped(b Batch, runs *heldRuns) *groupedBatch {
	runs.reset()
	return &groupedBatch{Batch: b, runs: runs, released: true, done: !groupWrites}
}

// groupWrites is off only in the benchmark that measures what it saves.
var groupWrites = true

func (g *groupedBatch) Set(key, value []byte) error {
	if len(key) == keys.Len || g.done {
		return g.Batch.Set(key, value)
	}
	g.runs.hold(heldSet, key, value)
	return nil
}

func (g *groupedBatch) Delete(key []byte) error {
	if len(key) == keys.Len || g.done {
		return g.Batch.Delete(key)
	}
	g.runs.hold(heldDelete, key, nil)
	return nil
}

func (g *groupedBatch) SingleDelete(key []byte) error {
	if len(key) == keys.Len || g.done {
		return g.Batch.SingleDelete(key)
	}
	g.runs.hold(heldSingleDelete, key, nil)
	return nil
}

// Len counts the writes held back too.
func (g *groupedBatch) Len() int { return g.Batch.Len() + g.runs.n }

// Commit adds the writes held back after the others, then commits.
func (g *groupedBatch) Commit(sync SyncMode) error {
	if !g.released {
		return ErrBatchCommitted
	}
	if !g.done && g.runs.n > 0 {
		if err := g.runs.release(g.Batch); err != nil {
			g.done, g.released = true, false
			return err
		}
	}
	g.done = true
	return g.Batch.Commit(sync)
}

// Close drops what it holds.
func (g *groupedBatch) Close() error {
	if !g.done {
		g.runs.reset()
	}
	g.done = true
	return g.Batch.Close()
}

// kindOf is the kind of a key that is not an event key: its first three
// segments ("metadata/event-repo/due-at/"), or the whole key if it has
// fewer ("metadata/event-repo/pending").
func kindOf(key []byte) []byte {
	end := 0
	for range 3 {
		i := bytes.IndexByte(key[end:], '/')
		if i < 0 {
			return key
		}
		end += i + 1
	}
	return key[:end]
}

func (h *heldRuns) reset() {
	for i := range h.runs {
		h.runs[i] = h.runs[i][:0]
	}
	h.kinds, h.runs, h.n = h.kinds[:0], h.runs[:0], 0
}

func (h *heldRuns) hold(op byte, key, value []byte) {
	kind := kindOf(key)
	i := 0
	for i < len(h.kinds) && h.kinds[i] != string(kind) {
		i++
	}
	if i == len(h.kinds) {
		h.kinds = append(h.kinds, string(kind))
		if len(h.runs) < cap(h.runs) {
			h.runs = h.runs[:i+1] // its buffer, emptied by reset
		} else {
			h.runs = append(h.runs, nil)
		}
	}
	r := append(h.runs[i], op)
	r = binary.AppendUvarint(r, uint64(len(key)))
	r = append(r, key...)
	r = binary.AppendUvarint(r, uint64(len(value)))
	h.runs[i] = append(r, value...)
	h.n++
}

// release adds the writes held to b, run by run, and empties them.
func (h *heldRuns) release(b Batch) error {
	for _, r := range h.runs {
		for len(r) > 0 {
			op := r[0]
			key, rest, ok := heldBytes(r[1:])
			if !ok {
				return errors.New("delaystore: grouped batch: malformed held write")
			}
			value, rest, ok := heldBytes(rest)
			if !ok {
				return errors.New("delaystore: grouped batch: malformed held write")
			}
			r = rest
			var err error
			switch op {
			case heldSet:
				err = b.Set(key, value)
			case heldDelete:
				err = b.Delete(key)
			default:
				err = b.SingleDelete(key)
			}
			if err != nil {
				return fmt.Errorf("delaystore: grouped batch: %w", err)
			}
		}
	}
	h.reset()
	return nil
}

func heldBytes(b []byte) (v, rest []byte, ok bool) {
	n, w := binary.Uvarint(b)
	if w <= 0 || uint64(len(b)-w) < n {
		return nil, nil, false
	}
	return b[w : w+int(n)], b[w+int(n):], true
}

// trim drops buffers that a huge batch grew, as trimScratch does.
func (h *heldRuns) trim(max int) {
	size := 0
	for _, r := range h.runs[:cap(h.runs)] {
		size += cap(r)
	}
	if size > max {
		*h = heldRuns{}
	}
}
