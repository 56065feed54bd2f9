package pebblestore

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/delaystore/internal/gate"
)

// Store is a delaystore.Store on Pebble. It is safe for concurrent use.
type Store struct {
	db  *pebble.DB
	fs  *lockFS
	res *reserve // nil in memory
	log *slog.Logger
	// inMemory and noWAL decide what makes a NoSync write durable: nothing,
	// a memtable flush, or (the usual case) a WAL sync.
	inMemory bool
	noWAL    bool

	// gate counts the calls that use db and holds the closed and failed
	// states: calls made after Close begins get ErrClosed rather than
	// Pebble's panic on a closed DB, and calls after a failed commit get
	// the fault.
	gate *gate.Gate[*iterator]

	// spare holds batches committed and reset, for NewBatch to reuse;
	// sized, one for NewBatchSize.
	spare, sized spareBatches
}

var _ delaystore.Store = (*Store)(nil)

// Open opens or creates the store that cfg describes. It returns an error
// wrapping delaystore.ErrInvalidConfig if cfg is not valid, and Pebble's
// error if the database cannot be opened, for instance because another
// process holds it, or one wrapping delaystore.ErrFailed if Pebble met a
// fatal error while opening, such as a full disk. The caller must Close the
// Store.
func Open(cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	log := cfg.Logger.With("component", "pebblestore")

	base := cfg.FS
	switch {
	case cfg.InMemory:
		base = vfs.NewMem()
	case base == nil:
		base = privateFS{vfs.Default}
	}
	var res *reserve
	if !cfg.InMemory {
		res = &reserve{fs: base, dir: cfg.Dir, path: base.PathJoin(cfg.Dir, reserveName), size: cfg.DiskFullReserve, log: log}
		if err := res.ensure(); err != nil {
			return nil, fmt.Errorf("pebblestore: open %q: %w", cfg.Dir, err)
		}
		base = vfs.OnDiskFull(base, res.release)
	}
	fs := &lockFS{FS: base}
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
	db, err := openDB(cfg.Dir, opts)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("pebblestore: open %q: %w", cfg.Dir, err), fs.release())
	}
	s := &Store{db: db, fs: fs, res: res, log: log, inMemory: cfg.InMemory, noWAL: opts.DisableWAL, spare: spareBatches{max: maxSpareBatches}, sized: spareBatches{max: 1}}
	s.gate = gate.New[*iterator](s.checkReserve)
	log.Debug("opened", "dir", cfg.Dir, "in_memory", cfg.InMemory, "wal", !opts.DisableWAL)
	return s, nil
}

// openDB opens Pebble, turning a fatal error met on the way (a MANIFEST
// that cannot be written to a full disk) into an error wrapping
// delaystore.ErrFailed, so that a service retrying the open is not
// stopped by it. The half-opened database is abandoned; the caller
// releases its directory lock.
func openDB(dir string, opts *pebble.Options) (db *pebble.DB, err error) {
	defer func() {
		if r := recover(); r != nil {
			fe, ok := r.(*fatalError)
			if !ok {
				panic(r)
			}
			db, err = nil, fmt.Errorf("%w: %w", delaystore.ErrFailed, fe)
		}
	}()
	return pebble.Open(dir, opts)
}

// Get returns a copy of the value stored under key, or
// delaystore.ErrNotFound. It does not block writers.
func (s *Store) Get(key []byte) ([]byte, error) {
	if err := s.enter(); err != nil {
		return nil, fmt.Errorf("pebblestore: get: %w", err)
	}
	defer s.exit()
	v, closer, err := s.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, delaystore.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("pebblestore: get: %w", err)
	}
	// v belongs to Pebble until closer is closed. Appending to a
	// non-nil empty slice keeps an empty value distinct from nil.
	out := append([]byte{}, v...)
	if err := closer.Close(); err != nil {
		return nil, fmt.Errorf("pebblestore: get: release value: %w", err)
	}
	return out, nil
}

// NewBatch starts an empty batch. On a closed or failed store every method
// of the batch but Len and Close returns an error wrapping
// delaystore.ErrClosed or delaystore.ErrFailed.
func (s *Store) NewBatch() delaystore.Batch {
	if err := s.enter(); err != nil {
		return &batch{s: s, unusable: err}
	}
	defer s.exit()
	if pb := s.spare.take(); pb != nil {
		return &batch{s: s, b: pb, kept: &s.spare}
	}
	return &batch{s: s, b: s.db.NewBatch(pebble.WithMaxRetainedSizeBytes(spareBatchBytes)), kept: &s.spare}
}

// NewBatchSize is NewBatch with room for size bytes of keys and values
// (see delaystore.BatchSizer).
func (s *Store) NewBatchSize(size int) delaystore.Batch {
	if err := s.enter(); err != nil {
		return &batch{s: s, unusable: err}
	}
	defer s.exit()
	if size > sizedBatchBytes {
		return &batch{s: s, b: s.db.NewBatchWithSize(size)}
	}
	// NB: the batch kept may be smaller than size, and then grows as
	// any does; the planner's batches are alike from one to the next.
	if pb := s.sized.take(); pb != nil {
		return &batch{s: s, b: pb, kept: &s.sized}
	}
	return &batch{s: s, b: s.db.NewBatchWithSize(size, pebble.WithMaxRetainedSizeBytes(sizedBatchBytes)), kept: &s.sized}
}

var _ delaystore.BatchSizer = (*Store)(nil)

// NewIter returns an iterator over [opts.LowerBound, opts.UpperBound) on a
// point-in-time view of the store. The bounds are copied. The caller must
// Close it, and should do so promptly: an open iterator pins the memtables
// and files it reads.
func (s *Store) NewIter(opts delaystore.IterOptions) (delaystore.Iterator, error) {
	it, err := s.gate.Iter(func() (*iterator, bool, error) {
		it, err := s.newIter(opts)
		return it, err == nil && it.it != nil, err
	})
	if err != nil {
		return nil, fmt.Errorf("pebblestore: new iterator: %w", err)
	}
	return it, nil
}

// Scan calls yield for each key in [opts.LowerBound, opts.UpperBound) in
// order, on a point-in-time view, until yield returns false. The slices
// passed to yield are valid only during that call. yield may use the Store,
// including to commit, but must not Close it: Close waits for Scan. Scan
// returns the first error met while reading.
func (s *Store) Scan(opts delaystore.IterOptions, yield func(key, value []byte) bool) error {
	err := s.gate.Call(func() error {
		it, err := s.newIter(opts)
		if err != nil {
			return err
		}
		for ok := it.First(); ok; ok = it.Next() {
			v := it.Value()
			if it.err != nil || !yield(it.Key(), v) {
				break
			}
		}
		return it.Close()
	})
	if err != nil {
		return fmt.Errorf("pebblestore: scan: %w", err)
	}
	return nil
}

// Flush makes every write committed with NoSync durable by syncing the WAL,
// or, when the WAL is disabled, by flushing the memtable. Pebble reports
// a failed memtable flush only to the logger, as a background error. A
// failed WAL sync fails the Store, as a failed commit does (see the package
// doc). In memory Flush does nothing. It blocks until done.
func (s *Store) Flush() error {
	if err := s.enter(); err != nil {
		return fmt.Errorf("pebblestore: flush: %w", err)
	}
	defer s.exit()
	var err error
	switch {
	case s.inMemory:
		return nil
	case s.noWAL:
		err = s.db.Flush()
	default:
		// An empty LogData record is the cheapest write that waits for a
		// WAL sync, which covers every earlier NoSync commit.
		err = s.guard(func() error { return s.db.LogData(nil, pebble.Sync) })
	}
	if err != nil {
		return fmt.Errorf("pebblestore: flush: %w", err)
	}
	return nil
}

// Close makes every committed write durable and releases the database.
// Calls made once it has begun get ErrClosed; it waits for those already in
// flight, Scans included. Iterators still open are closed and reported in
// the error. A second Close returns nil.
//
// On a failed Store, Close releases what Pebble lets go of and always the
// directory lock, so that the directory can be opened again in this
// process; its error then includes the fault.
func (s *Store) Close() error {
	leaked, failed, ok := s.gate.Close()
	if !ok {
		return nil
	}

	if failed != nil {
		return s.closeFailed(leaked, failed)
	}

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

// closeFailed is Close for a Store whose commit failed. Pebble's commit
// pipeline is broken by then (the failed batch may still sit in its queue),
// but Close does not commit: it closes the WAL writer, which reports the
// fault again, and releases the files. Should it panic, the panic is
// reported as an error and the directory lock is released here instead.
func (s *Store) closeFailed(leaked map[*iterator]struct{}, failed error) (err error) {
	errs := []error{fmt.Errorf("pebblestore: close: %w", failed)}
	defer func() {
		if r := recover(); r != nil {
			errs = append(errs, fmt.Errorf("pebblestore: close: pebble panicked: %v", r))
		}
		errs = append(errs, s.fs.release())
		s.log.Debug("closed after a failure")
		err = errors.Join(errs...)
	}()
	for it := range leaked {
		it.abandon()
	}
	if err := s.db.Close(); err != nil {
		errs = append(errs, fmt.Errorf("pebblestore: close: %w", err))
	}
	return nil
}

// guard runs f, a Pebble write, and turns the panic of a failed commit into
// an error wrapping delaystore.ErrFailed, failing the Store. Any other panic
// goes on. The caller must be counted in calls.
//
// Pebble gives up on a commit whose WAL write or sync failed by calling
// Fatalf on the committing goroutine, after the batch may have been applied
// to the memtable; our logger's Fatalf panics (see logger.Fatalf). The
// commit pipeline may then be stuck, so from here on no call reaches
// Pebble but Close.
func (s *Store) guard(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			fe, ok := r.(*fatalError)
			if !ok || !fe.commitFailed() {
				panic(r)
			}
			err = s.fail(fe)
		}
	}()
	return f()
}

// fail records that a write failed and returns the error every later call
// gets.
func (s *Store) fail(cause error) error {
	err, first := s.gate.Fail(cause)
	if first {
		s.log.Error("write failed; the store refuses further use until reopened", "err", cause)
	}
	return err
}

// commit applies b with the given sync mode.
func (s *Store) commit(b *pebble.Batch, mode delaystore.SyncMode) error {
	n := b.Count()
	if err := s.enter(); err != nil {
		return fmt.Errorf("pebblestore: commit batch of %d: %w", n, err)
	}
	defer s.exit()
	opts := pebble.NoSync
	if mode == delaystore.Sync && !s.noWAL {
		// Without a WAL there is nothing to sync (Pebble refuses a
		// synced write then); durability is what DisableWAL gave up.
		opts = pebble.Sync
	}
	// Pebble does not return a WAL write or sync error here: it calls
	// Fatalf, which guard turns into ErrFailed. The errors it does return
	// come before anything is applied.
	if err := s.guard(func() error { return s.db.Apply(b, opts) }); err != nil {
		return fmt.Errorf("pebblestore: commit batch of %d: %w", n, err)
	}
	return nil
}

// newIter opens an iterator that Close does not know about. The caller
// must be counted in calls.
func (s *Store) newIter(opts delaystore.IterOptions) (*iterator, error) {
	lo, hi := lowerBound(opts.LowerBound), cloneBound(opts.UpperBound)
	it := &iterator{s: s}
	if emptyRange(lo, hi) {
		// Pebble wants lower <= upper; an empty range needs no iterator.
		return it, nil
	}
	pit, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return nil, err
	}
	it.it = pit
	return it, nil
}

// enter counts a call that uses db, or returns ErrClosed once Close has
// begun, or the failure once a write failed. Every successful enter must be
// matched by exit.
func (s *Store) enter() error { return s.gate.Enter() }

func (s *Store) exit() { s.gate.Exit() }

// checkReserve fails the Store once the disk reserve was given up: the disk
// filled, and a write may have been lost on the way.
func (s *Store) checkReserve() error {
	if s.res != nil && s.res.released.Load() {
		return errDiskFull
	}
	return nil
}

// forget removes a closed iterator from the set Close would close.
func (s *Store) forget(it *iterator) { s.gate.Forget(it) }
