package pebblestore

import (
	"context"

	"github.com/cockroachdb/pebble/v2"

	"github.com/natsdelay/natsdelay/delaystore"
)

// FlushAndCompact flushes the memtable and compacts every key down, so that
// what a compaction does to a key's history shows in reads.
func FlushAndCompact(s *Store) error {
	if err := s.db.Flush(); err != nil {
		return err
	}
	return s.db.Compact(context.Background(), []byte{0}, []byte{0xff, 0xff, 0xff, 0xff}, false)
}

// Flush flushes the memtable to an sstable in L0, without compacting.
func Flush(s *Store) error { return s.db.Flush() }

// Metrics is the engine's metrics.
func Metrics(s *Store) *pebble.Metrics { return s.db.Metrics() }

// BatchBuffer is the first byte of the buffer b writes into: two batches
// with the same one share their buffer.
func BatchBuffer(b delaystore.Batch) *byte { return &b.(*batch).b.Repr()[0] }
