package delaystore

// Store is the ordered key-value contract every storage engine implements.
//
// Keys are ordered lexicographically by their bytes over the whole keyspace
// (bytes.Compare). Keys are non-empty (bbolt cannot store an empty key);
// engines may also reject keys longer than they support (bbolt: 32 KiB).
// Both are rejected when added to a batch. Keys and values passed in are
// copied by the engine before the call returns, so callers may reuse them.
// An empty value is stored as such, distinct from a missing key. Deleting a
// key that does not exist succeeds.
//
// A Store is safe for concurrent use. Reads see a consistent snapshot and
// do not block writers (bbolt: while its file fits the initial memory map).
//
// A commit that fails on I/O fails the Store rather than risk showing a
// batch that was not made durable: that commit, and every later call but
// Close, returns an error wrapping ErrFailed and the cause. Close then
// releases the engine, without hanging, so that the same files can be
// opened again in the same process; the reopened store holds everything
// committed before the fault, and the failed batch whole or not at all. If
// only the fsync failed, the batch may be there, whole, so a caller that
// retries may store it twice; at-least-once allows that.
type Store interface {
	// Get returns a copy of the value stored under key, or ErrNotFound. The
	// copy belongs to the caller.
	Get(key []byte) ([]byte, error)

	// NewBatch starts an empty batch. A batch is not safe for concurrent use.
	NewBatch() Batch

	// NewIter returns an iterator over [opts.LowerBound, opts.UpperBound) that
	// reads one consistent snapshot, taken now: later commits are invisible
	// to it. The bounds are copied. The caller must Close it, promptly, since
	// an open iterator pins engine resources.
	NewIter(opts IterOptions) (Iterator, error)

	// Scan calls yield for each key in [opts.LowerBound, opts.UpperBound) in
	// order, on one consistent snapshot, until yield returns false. The key
	// and value slices are valid only inside that call of yield: copy them to
	// keep them. yield may call the Store, but not Close it: Close waits for
	// Scan. It returns the first error met while reading; stopping early is
	// not an error.
	Scan(opts IterOptions, yield func(key, value []byte) bool) error

	// Flush makes every write committed with NoSync durable. Engines that
	// always sync make it a no-op.
	Flush() error

	// Close makes every committed write durable and releases the engine. It
	// waits for calls in flight; calls made once it has begun return an
	// error wrapping ErrClosed. Iterators still open are closed and reported
	// in its error. A second Close returns nil. On a failed Store it
	// releases what it can and may return the fault again.
	Close() error
}

// IterOptions bounds an iteration. A nil bound means unbounded on that side.
// A range with LowerBound >= UpperBound is empty; so is any range with an
// empty, non-nil UpperBound, while an empty LowerBound bounds nothing.
type IterOptions struct {
	// LowerBound is the inclusive lower bound.
	LowerBound []byte
	// UpperBound is the exclusive upper bound.
	UpperBound []byte
}

// SyncMode says whether a commit waits for the write to reach stable storage.
type SyncMode bool

const (
	// Sync commits wait for fsync (or the engine's equivalent). Ingest uses it:
	// a message is acknowledged to its publisher only once it is durable.
	Sync SyncMode = true
	// NoSync commits return once the write is applied in memory and logged,
	// without waiting for fsync. Deletes and attempt counts use it: losing
	// them in a crash only causes a redelivery, which at-least-once allows.
	NoSync SyncMode = false
)

// Batch collects writes that are applied atomically: after Commit returns an
// error, none of them is visible; after it returns nil, all of them are, to
// every read that starts afterwards. Within a batch, the last operation on a
// key wins.
type Batch interface {
	// Set stores value under key. Both are copied.
	Set(key, value []byte) error
	// Delete removes key. Deleting a missing key succeeds at commit.
	Delete(key []byte) error
	// SingleDelete removes key, which the caller guarantees was set at
	// most once since the store began and has not been deleted since:
	// Pebble then drops the delete together with that one set, in the
	// memtable or the first compaction that meets both, instead of
	// carrying a tombstone down every level. On a key set twice it may
	// bring back the older value after a compaction, so a caller that is
	// not sure uses Delete. Engines without such an operation delete.
	SingleDelete(key []byte) error
	// Len is the number of operations added so far.
	Len() int
	// Commit applies every operation at once with the given sync mode. A
	// batch can be committed at most once, even if Commit fails; later calls
	// return ErrBatchCommitted. Committing an empty batch succeeds.
	Commit(sync SyncMode) error
	// Close releases the batch. It discards uncommitted writes and is safe to
	// call after Commit and more than once. After Close, Set, Delete and
	// Commit return ErrClosed.
	Close() error
}

// Iterator walks keys in order within its bounds. It is not safe for
// concurrent use. Key and Value are valid only until the next positioning
// call or Close.
type Iterator interface {
	// First moves to the first key and reports whether it is valid.
	First() bool
	// SeekGE moves to the first key >= key within the bounds and reports
	// whether it is valid. A key below the lower bound seeks to it.
	SeekGE(key []byte) bool
	// Next moves to the next key and reports whether it is valid. On an
	// iterator that is not valid it returns false.
	Next() bool
	// Valid reports whether the iterator is at a key.
	Valid() bool
	// Key is the current key.
	Key() []byte
	// Value is the current value.
	Value() []byte
	// Error is the first error the iterator met, if any. An iterator that
	// met an error is not valid from then on.
	Error() error
	// Close releases the iterator and returns its error, if any.
	Close() error
}

// BatchSizer is a Store that can start a batch with room for about size
// bytes of keys and values: a large batch whose size the caller can
// foresee then takes its room at once, where one grown as it is filled
// is copied at each doubling. Less room is no error, the batch grows past
// it; room not used is memory held until the batch is closed.
type BatchSizer interface {
	NewBatchSize(size int) Batch
}

// MemoryReleaser is a Store that keeps memory for writes beyond what it
// holds (such as Pebble's memtables) and can hand it back. A service calls
// ReleaseMemory when it has gone idle after a burst of writes; it must
// leave every committed write as it was, readable and as durable as
// before. It returns an error wrapping ErrClosed or ErrFailed as other
// calls do.
type MemoryReleaser interface {
	ReleaseMemory() error
}
