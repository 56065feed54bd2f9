package delaystore

// Store is the ordered key-value contract every storage engine implements.
//
// Keys are ordered lexicographically by their bytes over the whole keyspace
// (bytes.Compare). Keys and values passed in are copied by the engine before
// the call returns, so callers may reuse them. Deleting a key that does not
// exist succeeds.
//
// A Store is safe for concurrent use. Reads see a consistent snapshot and
// never block writers.
type Store interface {
	// Get returns a copy of the value stored under key, or ErrNotFound.
	Get(key []byte) ([]byte, error)

	// NewBatch starts an empty batch. A batch is not safe for concurrent use.
	NewBatch() Batch

	// NewIter returns an iterator over [opts.LowerBound, opts.UpperBound) that
	// reads one consistent snapshot. The caller must Close it.
	NewIter(opts IterOptions) (Iterator, error)

	// Scan calls yield for each key in [opts.LowerBound, opts.UpperBound) in
	// order, on one consistent snapshot, until yield returns false. The key
	// and value slices are valid only inside that call of yield: copy them to
	// keep them. It returns the first error met while reading.
	Scan(opts IterOptions, yield func(key, value []byte) bool) error

	// Flush makes every write committed with NoSync durable. Engines that
	// always sync make it a no-op.
	Flush() error

	// Close releases the engine. Using the Store after Close is an error; a
	// second Close returns nil.
	Close() error
}

// IterOptions bounds an iteration. A nil bound means unbounded on that side.
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
// error, none of them is visible; after it returns nil, all of them are.
type Batch interface {
	// Set stores value under key. Both are copied.
	Set(key, value []byte) error
	// Delete removes key. Deleting a missing key succeeds at commit.
	Delete(key []byte) error
	// Len is the number of operations added so far.
	Len() int
	// Commit applies every operation at once with the given sync mode. A
	// batch can be committed at most once.
	Commit(sync SyncMode) error
	// Close releases the batch. It discards uncommitted writes and is safe to
	// call after Commit.
	Close() error
}

// Iterator walks keys in order within its bounds. It is not safe for
// concurrent use. Key and Value are valid only until the next positioning
// call or Close.
type Iterator interface {
	// First moves to the first key and reports whether it is valid.
	First() bool
	// SeekGE moves to the first key >= key and reports whether it is valid.
	SeekGE(key []byte) bool
	// Next moves to the next key and reports whether it is valid.
	Next() bool
	// Valid reports whether the iterator is at a key.
	Valid() bool
	// Key is the current key.
	Key() []byte
	// Value is the current value.
	Value() []byte
	// Error is the first error the iterator met, if any.
	Error() error
	// Close releases the iterator and returns its error, if any.
	Close() error
}
