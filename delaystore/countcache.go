package delaystore

import (
	"encoding/binary"
	"fmt"
)

// countCache keeps the counts writers read and write (a subject's pending
// and dead letters, a second's due messages), so that a batch over many
// subjects does not read each count back from the store: a burst of
// 10,000 recurring occurrences on 10,000 subjects read 10,000 counts per
// commit. A count in it is the one the last commit left in the store,
// which holds because a Repository is its store's only writer while it is
// open, and wmu serialises its writes. Every field needs wmu.
type countCache struct {
	known map[string]uint64
	// written are the counts the batch under way writes; they become
	// known only once it has committed (see Repository.committed), and a
	// batch that did not commit leaves them unknown again (see
	// Repository.resetScratch), since its commit may or may not have
	// reached the store.
	written map[string]uint64
}

// maxCachedCounts bounds the counts kept: past it the cache starts over,
// so memory follows the subjects in use, not every subject seen.
const maxCachedCounts = 1 << 16

func newCountCache() countCache {
	return countCache{known: make(map[string]uint64), written: make(map[string]uint64)}
}

// count returns the count under key, from the cache or else the store.
// wmu must be held.
func (r *Repository) count(key []byte) (uint64, error) {
	if n, ok := r.counts.known[string(key)]; ok {
		return n, nil
	}
	n, err := r.readCount(key)
	if err != nil {
		return 0, err
	}
	r.counts.keep(string(key), n)
	return n, nil
}

// writeCount adds to b the count n under key (a delete for 0), which
// becomes known once b commits. wmu must be held.
func (r *Repository) writeCount(b Batch, key []byte, n uint64) error {
	var err error
	if n == 0 {
		err = b.Delete(key)
	} else {
		err = b.Set(key, binary.BigEndian.AppendUint64(r.w.val[:0], n))
	}
	if err != nil {
		return fmt.Errorf("write count %q: %w", key, err)
	}
	r.counts.written[string(key)] = n
	return nil
}

func (c *countCache) keep(key string, n uint64) {
	if len(c.known) >= maxCachedCounts {
		c.known = make(map[string]uint64)
	}
	c.known[key] = n
}

// committed makes the counts the batch wrote known.
func (c *countCache) committed() {
	for k, n := range c.written {
		c.keep(k, n)
	}
	clear(c.written)
}

// forgetUncommitted drops the counts of a batch that did not commit.
func (c *countCache) forgetUncommitted() {
	for k := range c.written {
		delete(c.known, k)
	}
	clear(c.written)
}
