package delaystore

import (
	"sync"

	"github.com/natsdelay/natsdelay/keys"
)

// msgCache keeps the encoded values of the messages this Repository wrote
// last, by key, so that reading back what it has just written does not go
// to the store: a recurring occurrence is written by one plan, read by the
// next plan, by the dispatcher's pass and by the delete after its ACK,
// and each of those reads was a point read of the store and most of the
// cost of an occurrence. Only messages read back by key soon are kept
// (occurrences due within cacheHorizon, and messages with a client id:
// see readBack); a plain message is not, as copying each would cost more
// than it saves, nor an occurrence due far ahead, which the cache would
// only hold in the heap until it turned over.
//
// A value in it is the one the store holds, which holds because a
// Repository is its store's only writer while it is open, and because:
//
//   - every write of a message key (set or delete) removes the key from
//     the cache at once, before the batch commits (see changed), so a
//     batch that may or may not have committed leaves nothing to serve
//     and the next read goes to the store;
//   - the values a batch writes are kept only once it has committed (see
//     committed), with wmu still held, so before the write returns;
//   - readers never add to it: a reader that misses reads the store and
//     keeps what it read to itself.
//
// Values are encoded bytes, never shared messages: each read decodes its
// own, so a caller that changes the message it got cannot change the
// cache. The cache is bounded by entries and bytes (see maxCachedMessages):
// it keeps two generations, and when the newer fills up the older is
// dropped, so what stays is what was written last.
type msgCache struct {
	// written are the values of the batch under way, nil for a key the
	// batch deletes or that is not to be kept. wmu must be held.
	written map[keys.Key][]byte

	mu struct {
		sync.Mutex
		// cur is filled until it holds half the bound, then becomes
		// prev; a lookup tries cur, then prev.
		cur, prev map[keys.Key][]byte
		curBytes  int
	}
}

const (
	// maxCachedMessages bounds the messages the cache keeps, in the two
	// generations together.
	maxCachedMessages = 1 << 16
	// maxCachedMessageBytes bounds the encoded bytes the cache keeps, in
	// the two generations together.
	maxCachedMessageBytes = 32 << 20
	// maxCachedValue is the largest encoded message the cache keeps: one
	// huge message must not push out hundreds of small ones.
	maxCachedValue = 64 << 10
)

func (c *msgCache) init() {
	c.written = make(map[keys.Key][]byte)
	c.mu.cur = make(map[keys.Key][]byte)
}

// lookup returns the encoded message under k if the cache has it. The
// bytes are never modified; the caller must not modify them either.
func (c *msgCache) lookup(k *keys.Key) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if v, ok := c.mu.cur[*k]; ok {
		return v, true
	}
	v, ok := c.mu.prev[*k]
	return v, ok
}

// changed records that the batch under way writes v under k (nil for a
// delete), and drops k's cached value now: from here until the batch has
// committed, reads of k go to the store. With keep, v is kept once the
// batch commits; v may be scratch space, it is copied. wmu must be held.
func (c *msgCache) changed(k *keys.Key, v []byte, keep bool) {
	c.mu.Lock()
	if old, ok := c.mu.cur[*k]; ok {
		c.mu.curBytes -= len(old)
		delete(c.mu.cur, *k)
	}
	delete(c.mu.prev, *k)
	c.mu.Unlock()
	if !keep || v == nil || len(v) > maxCachedValue {
		// NB: an earlier write of k in the same batch may have asked to
		// keep its value; the last write wins.
		delete(c.written, *k)
		return
	}
	c.written[*k] = append(make([]byte, 0, len(v)), v...)
}

// committed keeps the values of the batch that just committed. wmu must
// be held.
func (c *msgCache) committed() {
	if len(c.written) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, v := range c.written {
		if len(c.mu.cur) >= maxCachedMessages/2 || c.mu.curBytes+len(v) > maxCachedMessageBytes/2 {
			c.mu.prev, c.mu.cur, c.mu.curBytes = c.mu.cur, make(map[keys.Key][]byte, len(c.mu.cur)), 0
		}
		c.mu.cur[k] = v
		c.mu.curBytes += len(v)
	}
	c.resetWritten()
}

// forgetUncommitted drops the values of a batch that did not commit (or
// may not have): changed has already dropped their keys from the cache.
// wmu must be held.
func (c *msgCache) forgetUncommitted() {
	c.resetWritten()
}

// maxKeptWritten bounds the keys of one batch whose room written keeps
// between batches: a map keeps its buckets when cleared.
const maxKeptWritten = 1 << 14

func (c *msgCache) resetWritten() {
	if len(c.written) > maxKeptWritten {
		c.written = make(map[keys.Key][]byte)
		return
	}
	clear(c.written)
}

// release drops every cached value. The values of a batch under way are
// kept once it commits.
func (c *msgCache) release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mu.cur, c.mu.prev, c.mu.curBytes = make(map[keys.Key][]byte), nil, 0
}

// ReleaseMemory drops the messages kept from recent writes (see
// msgCache), for a service gone idle after a burst: later reads of them
// go to the store. It does not wait for a write in progress.
func (r *Repository) ReleaseMemory() {
	r.msgs.release()
}
