package pebblestore

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"natsdelay/delaystore"
)

// Store is a delaystore.Store on Pebble. It is safe for concurrent use.
type Store struct {
	db  *pebble.DB
	log *slog.Logger
	// inMemory and noWAL decide what makes a NoSync write durable: nothing,
	// a memtable flush, or (the usual case) a WAL sync.
	inMemory bool
	noWAL    bool

	// gate is held shared by every call that uses db and exclusively by
	// Close, so Close waits for the calls in flight and later calls get
	// ErrClosed instead of Pebble's panic on a closed DB. NB: it is held
	// across Pebble I/O on purpose: only Close ever waits for it.
	//
	// Lock order: gate, then mu.
	gate   sync.RWMutex
	closed bool // guarded by gate

	mu struct {
		sync.Mutex
		// iters are the open iterators, which Close closes if their
		// owners did not.
		iters map[*iterator]struct{}
	}
}

var _ delaystore.Store = (*Store)(nil)

// Open opens or creates the store that cfg describes. It returns an error
// wrapping delaystore.ErrInvalidConfig if cfg is not valid, and Pebble's
// error if the database cannot be opened, for instance because another
// process holds it. The caller must Close the Store.
func Open(cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	log := cfg.Logger.With("component", "pebblestore")

	fs := cfg.FS
	if cfg.InMemory {
		fs = vfs.NewMem()
	}
	opts := &pebble.Options{
		FS:           fs,
		CacheSize:    cfg.BlockCacheSize,
		MemTableSize: uint64(cfg.MemTableSize),
		// An in-memory store has nothing to recover after a crash, so a WAL
		// would only cost time.
		DisableWAL: cfg.InMemory || cfg.DisableWAL,
		// New stores start at the newest format: WAL sync chunks let replay
		// tell a torn tail from corruption, and there is no old data to
		// stay compatible with.
		FormatMajorVersion: pebble.FormatNewest,
		Logger:             logger{log: log},
		EventListener:      eventListener(log),
	}
	db, err := pebble.Open(cfg.Dir, opts)
	if err != nil {
		return nil, fmt.Errorf("pebblestore: open %q: %w", cfg.Dir, err)
	}
	s := &Store{db: db, log: log, inMemory: cfg.InMemory, noWAL: opts.DisableWAL}
	s.mu.iters = make(map[*iterator]struct{})
	log.Debug("opened", "dir", cfg.Dir, "in_memory", cfg.InMemory, "wal", !opts.DisableWAL)
	return s, nil
}

// Get returns a copy of the value stored under key, or an error wrapping
// delaystore.ErrNotFound. It does not block writers.
func (s *Store) Get(key []byte) ([]byte, error) {
	s.gate.RLock()
	defer s.gate.RUnlock()
	if err := s.usable(); err != nil {
		return nil, fmt.Errorf("pebblestore: get: %w", err)
	}
	v, closer, err := s.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, delaystore.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("pebblestore: get: %w", err)
	}
	// NB: v belongs to Pebble until closer is closed. Appending to a
	// non-nil empty slice keeps an empty value distinct from nil.
	out := append([]byte{}, v...)
	if err := closer.Close(); err != nil {
		return nil, fmt.Errorf("pebblestore: get: release value: %w", err)
	}
	return out, nil
}

// NewBatch starts an empty batch. On a closed store every method of the
// batch but Close returns an error wrapping delaystore.ErrClosed.
func (s *Store) NewBatch() delaystore.Batch {
	s.gate.RLock()
	defer s.gate.RUnlock()
	if s.closed {
		return &batch{s: s, closed: true}
	}
	return &batch{s: s, b: s.db.NewBatch()}
}

// NewIter returns an iterator over [opts.LowerBound, opts.UpperBound) on a
// point-in-time view of the store. The bounds are copied. The caller must
// Close it, and should do so promptly: an open iterator pins the memtables
// and files it reads.
func (s *Store) NewIter(opts delaystore.IterOptions) (delaystore.Iterator, error) {
	s.gate.RLock()
	defer s.gate.RUnlock()
	if err := s.usable(); err != nil {
		return nil, fmt.Errorf("pebblestore: new iterator: %w", err)
	}
	lo, hi := lowerBound(opts.LowerBound), cloneBound(opts.UpperBound)
	it := &iterator{s: s}
	if emptyRange(lo, hi) {
		// Pebble wants lower <= upper; an empty range needs no iterator.
		return it, nil
	}
	pit, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return nil, fmt.Errorf("pebblestore: new iterator: %w", err)
	}
	it.it = pit
	s.mu.Lock()
	s.mu.iters[it] = struct{}{}
	s.mu.Unlock()
	return it, nil
}

// Scan calls yield for each key in [opts.LowerBound, opts.UpperBound) in
// order, on a point-in-time view, until yield returns false. The slices
// passed to yield are valid only during that call. yield may use the Store,
// including to commit. Scan returns the first error met while reading.
func (s *Store) Scan(opts delaystore.IterOptions, yield func(key, value []byte) bool) error {
	di, err := s.NewIter(opts)
	if err != nil {
		return fmt.Errorf("pebblestore: scan: %w", err)
	}
	it := di.(*iterator)
	for ok := it.First(); ok; ok = it.Next() {
		v := it.Value()
		if it.err != nil || !yield(it.Key(), v) {
			break
		}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("pebblestore: scan: %w", err)
	}
	return nil
}

// Flush makes every write committed with NoSync durable by syncing the WAL,
// or, when the WAL is disabled, by flushing the memtable. NB: Pebble reports
// a failed memtable flush only to the logger, as a background error. In
// memory Flush does nothing. It blocks until done.
func (s *Store) Flush() error {
	s.gate.RLock()
	defer s.gate.RUnlock()
	if err := s.usable(); err != nil {
		return fmt.Errorf("pebblestore: flush: %w", err)
	}
	var err error
	switch {
	case s.inMemory:
		return nil
	case s.noWAL:
		err = s.db.Flush()
	default:
		// An empty LogData record is the cheapest write that waits for a
		// WAL sync, which covers every earlier NoSync commit.
		err = s.db.LogData(nil, pebble.Sync)
	}
	if err != nil {
		return fmt.Errorf("pebblestore: flush: %w", err)
	}
	return nil
}

// Close makes every committed write durable and releases the database. It
// waits for calls in flight. Iterators still open are closed and reported in
// the error. A second Close returns nil.
func (s *Store) Close() error {
	s.gate.Lock()
	defer s.gate.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true

	s.mu.Lock()
	leaked := s.mu.iters
	s.mu.iters = nil
	s.mu.Unlock()

	var errs []error
	for it := range leaked {
		it.abandon()
	}
	if n := len(leaked); n > 0 {
		errs = append(errs, fmt.Errorf("pebblestore: close: %d iterators still open", n))
	}
	if s.noWAL && !s.inMemory {
		// Without a WAL, the memtable holds the only copy of recent writes.
		if err := s.db.Flush(); err != nil {
			errs = append(errs, fmt.Errorf("pebblestore: close: flush memtable: %w", err))
		}
	}
	if err := s.db.Close(); err != nil {
		errs = append(errs, fmt.Errorf("pebblestore: close: %w", err))
	}
	s.log.Debug("closed")
	return errors.Join(errs...)
}

// commit applies b with the given sync mode.
func (s *Store) commit(b *pebble.Batch, mode delaystore.SyncMode) error {
	s.gate.RLock()
	defer s.gate.RUnlock()
	n := b.Count()
	if err := s.usable(); err != nil {
		return fmt.Errorf("pebblestore: commit batch of %d: %w", n, err)
	}
	opts := pebble.NoSync
	if mode == delaystore.Sync && !s.noWAL {
		// NB: without a WAL there is nothing to sync (Pebble refuses a
		// synced write then); durability is what DisableWAL gave up.
		opts = pebble.Sync
	}
	// NB: Pebble does not return a WAL write or sync error here: it calls
	// Fatalf, which panics (see logger). The errors it does return come
	// before anything is applied.
	if err := s.db.Apply(b, opts); err != nil {
		return fmt.Errorf("pebblestore: commit batch of %d: %w", n, err)
	}
	return nil
}

// usable returns nil if the store can be used. gate must be held.
func (s *Store) usable() error {
	if s.closed {
		return delaystore.ErrClosed
	}
	return nil
}

// forget removes a closed iterator from the set Close would close.
func (s *Store) forget(it *iterator) {
	s.mu.Lock()
	delete(s.mu.iters, it)
	s.mu.Unlock()
}
