package pebblestore

import (
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/natsdelay/natsdelay/delaystore"
)

// releaseRotations is how many memtables ReleaseMemory rotates out: the
// one being written and the one Pebble keeps to reuse, and a third whose
// release frees the second (see ReleaseMemory).
const releaseRotations = 3

// ReleaseMemory hands the memory of Pebble's memtables back to the
// operating system, for a service that has gone idle after a burst of
// writes. It implements delaystore.MemoryReleaser. Nothing committed is
// lost or changed: it flushes the memtables to sstables, as Pebble does
// itself whenever one fills.
//
// Why so: Pebble allocates a memtable's arena outside the Go heap and
// never shrinks it. When a memtable has been flushed, Pebble keeps its
// arena to reuse for the next one, so a store that was written through
// two memtables holds two arenas of MemTableSize, every page of both
// touched and resident, for the life of the process. A plain flush does
// not change that: the next memtable takes the kept arena and the flushed
// one is kept in its place. An arena is freed only when a memtable is
// released while another one is already kept. So ReleaseMemory rotates
// three times, each time holding the memtables of the moment with an
// iterator so none is released (and reused) yet: the new memtables are
// fresh arenas, whose pages are not resident until written, and releasing
// the three held ones in order frees the two old arenas and keeps the
// third, barely touched. It costs three WAL rotations and one flush of
// what the memtable holds, a few milliseconds on an idle store.
//
// On a store in memory it does nothing: its sstables live in memory too.
func (s *Store) ReleaseMemory() (err error) {
	if s.inMemory {
		return nil
	}
	if err := s.enter(); err != nil {
		return fmt.Errorf("pebblestore: release memory: %w", err)
	}
	defer s.exit()
	s.spare.drop() // their buffers are a burst's too
	s.sized.drop()
	pins := make([]*pebble.Iterator, 0, releaseRotations)
	defer func() {
		// In the order taken, so the oldest memtable is released
		// first and each later release frees the one kept before it.
		for _, it := range pins {
			err = errors.Join(err, it.Close())
		}
		if err != nil {
			err = fmt.Errorf("pebblestore: release memory: %w", err)
		}
	}()
	for range releaseRotations {
		it, err := s.db.NewIter(nil)
		if err != nil {
			return err
		}
		pins = append(pins, it)
		if err := s.guard(s.db.Flush); err != nil {
			return err
		}
	}
	return nil
}

var _ delaystore.MemoryReleaser = (*Store)(nil)
