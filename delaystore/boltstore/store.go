package boltstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"syscall"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/delaystore/internal/gate"
)

// bucket is the one bucket that holds every key.
var bucket = []byte("delaystore")

// Store is a delaystore.Store on bbolt. It is safe for concurrent use.
type Store struct {
	db  *bolt.DB
	log *slog.Logger

	// gate counts the calls that use db and holds the closed and failed
	// states. Close closes the iterators it still tracks: bbolt's Close
	// would otherwise wait for their transactions forever.
	gate *gate.Gate[*iterator]
}

var _ delaystore.Store = (*Store)(nil)

// Open opens or creates the database file that cfg describes. It returns an
// error wrapping delaystore.ErrInvalidConfig if cfg is not valid, one
// wrapping bbolt's errors.ErrTimeout if the file stays locked for
// cfg.Timeout, and bbolt's error if the file cannot be opened. The caller
// must Close the Store.
func Open(cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	log := cfg.Logger.With("component", "boltstore")
	if err := checkFree(cfg.Path, cfg.MinFree); err != nil {
		return nil, err
	}
	opts := &bolt.Options{
		Timeout:         cfg.Timeout,
		InitialMmapSize: int(cfg.InitialMmapSize),
		NoFreelistSync:  cfg.NoFreelistSync,
		// Deletes of delivered messages fragment the free list, where the
		// array free list slows down and the map one does not (etcd uses it
		// for the same reason).
		FreelistType: bolt.FreelistMapType,
		OpenFile:     cfg.OpenFile,
	}
	if cfg.Logger.Enabled(context.Background(), slog.LevelError) {
		// bbolt does extra work per Put for any logger but its own
		// discard logger, so pass one only when something will be logged.
		opts.Logger = &logger{log: log}
	}
	db, err := bolt.Open(cfg.Path, 0o600, opts)
	if errors.Is(err, berrors.ErrTimeout) {
		return nil, fmt.Errorf("boltstore: open %q: locked by another process or Store; gave up within %s: %w", cfg.Path, cfg.Timeout, err)
	}
	if err != nil {
		return nil, fmt.Errorf("boltstore: open %q: %w", cfg.Path, err)
	}
	if err := createBucket(db); err != nil {
		return nil, errors.Join(fmt.Errorf("boltstore: open %q: create bucket: %w", cfg.Path, err), db.Close())
	}
	s := &Store{db: db, log: log, gate: gate.New[*iterator](nil)}
	log.Debug("opened", "path", cfg.Path)
	return s, nil
}

// createBucket creates the store's bucket if the file has none yet. A
// file that has it is only read: every bbolt commit rewrites a meta page
// (and the free list), even one that changes nothing, and an open that
// goes on to refuse the store (a later version's) must leave its bytes as
// they were.
func createBucket(db *bolt.DB) error {
	exists := false
	_ = db.View(func(tx *bolt.Tx) error {
		exists = tx.Bucket(bucket) != nil
		return nil
	})
	if exists {
		return nil
	}
	return db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(bucket)
		return err
	})
}

// checkFree fails, wrapping delaystore.ErrFailed and ENOSPC, when the disk
// that holds path has less than minFree bytes free. A negative minFree, or
// a system that cannot tell, skips the check.
func checkFree(path string, minFree int64) error {
	if minFree < 0 {
		return nil
	}
	dir := filepath.Dir(path)
	free, ok := availBytes(dir)
	if !ok || free >= uint64(minFree) {
		return nil
	}
	return fmt.Errorf("boltstore: open %q: %w: disk full: %d bytes free in %s, want %d: %w",
		path, delaystore.ErrFailed, free, dir, minFree, syscall.ENOSPC)
}

// Get returns a copy of the value stored under key, or
// delaystore.ErrNotFound. It runs in its own read-only transaction and does
// not block writers.
func (s *Store) Get(key []byte) ([]byte, error) {
	if err := s.enter(); err != nil {
		return nil, fmt.Errorf("boltstore: get: %w", err)
	}
	defer s.exit()
	var out []byte
	err := s.db.View(func(tx *bolt.Tx) error {
		// A cursor, not Bucket.Get, which cannot tell a missing key
		// from an empty value.
		k, v := tx.Bucket(bucket).Cursor().Seek(key)
		if k != nil && bytes.Equal(k, key) {
			// v lives in the memory map only until the transaction ends.
			out = append([]byte{}, v...)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("boltstore: get: %w", err)
	}
	if out == nil {
		return nil, delaystore.ErrNotFound
	}
	return out, nil
}

// NewBatch starts an empty batch, buffered in memory until Commit.
func (s *Store) NewBatch() delaystore.Batch {
	return &batch{s: s}
}

// NewIter returns an iterator over [opts.LowerBound, opts.UpperBound) that
// holds a read-only transaction, and so one consistent state, until Close.
// The bounds are copied. The caller must Close it, promptly: see the
// package doc.
func (s *Store) NewIter(opts delaystore.IterOptions) (delaystore.Iterator, error) {
	it, err := s.gate.Iter(func() (*iterator, bool, error) {
		it, err := s.newIter(opts)
		return it, err == nil && it.tx != nil, err
	})
	if err != nil {
		return nil, fmt.Errorf("boltstore: new iterator: %w", err)
	}
	return it, nil
}

// Scan calls yield for each key in [opts.LowerBound, opts.UpperBound) in
// order, inside one read-only transaction, until yield returns false. The
// slices passed to yield point into the memory map and are valid only
// during that call. yield may use the Store, but must not Close it (Close
// waits for Scan), and should not commit much: see the package doc.
func (s *Store) Scan(opts delaystore.IterOptions, yield func(key, value []byte) bool) error {
	err := s.gate.Call(func() error {
		it, err := s.newIter(opts)
		if err != nil {
			return err
		}
		for ok := it.First(); ok && yield(it.key, it.value); ok = it.Next() {
		}
		return it.Close()
	})
	if err != nil {
		return fmt.Errorf("boltstore: scan: %w", err)
	}
	return nil
}

// Flush does nothing: every commit is already synced.
func (s *Store) Flush() error {
	if err := s.enter(); err != nil {
		return fmt.Errorf("boltstore: flush: %w", err)
	}
	s.exit()
	return nil
}

// Close releases the file. Calls made once it has begun get ErrClosed; it
// waits for those already in flight, Scans included. Iterators still open
// are closed and reported in the error. A second Close returns nil.
func (s *Store) Close() error {
	leaked, _, ok := s.gate.Close()
	if !ok {
		return nil
	}

	var errs []error
	for it := range leaked {
		it.abandon()
	}
	if n := len(leaked); n > 0 {
		errs = append(errs, fmt.Errorf("boltstore: close: %d iterators still open", n))
	}
	if err := s.db.Close(); err != nil {
		errs = append(errs, fmt.Errorf("boltstore: close: %w", err))
	}
	s.log.Debug("closed")
	return errors.Join(errs...)
}

// commit applies ops in one read-write transaction. bbolt syncs every
// commit, so there is no sync mode to pass on.
func (s *Store) commit(ops []op) error {
	if err := s.enter(); err != nil {
		return fmt.Errorf("boltstore: commit batch of %d: %w", len(ops), err)
	}
	defer s.exit()
	if len(ops) == 0 {
		// An empty transaction would still write and sync a meta page.
		return nil
	}
	var applyErr error
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucket)
		for _, o := range ops {
			if o.del {
				applyErr = b.Delete(o.key)
			} else {
				applyErr = b.Put(o.key, o.value)
			}
			if applyErr != nil {
				return applyErr
			}
		}
		return nil
	})
	switch {
	case err == nil:
		return nil
	case applyErr != nil:
		// Rolled back before anything was written.
		return fmt.Errorf("boltstore: commit batch of %d: %w", len(ops), err)
	default:
		return fmt.Errorf("boltstore: commit batch of %d: %w", len(ops), s.fail(err))
	}
}

// newIter opens an iterator that Close does not know about. The caller
// must be counted in calls.
func (s *Store) newIter(opts delaystore.IterOptions) (*iterator, error) {
	it := &iterator{lo: cloneBound(opts.LowerBound), hi: cloneBound(opts.UpperBound)}
	if it.hi != nil && bytes.Compare(it.lo, it.hi) >= 0 {
		return it, nil // an empty range needs no transaction
	}
	tx, err := s.db.Begin(false)
	if err != nil {
		return nil, err
	}
	it.s, it.tx, it.c = s, tx, tx.Bucket(bucket).Cursor()
	return it, nil
}

// enter counts a call that uses db, or returns why the Store cannot be
// used. Every successful enter must be matched by exit.
func (s *Store) enter() error { return s.gate.Enter() }

func (s *Store) exit() { s.gate.Exit() }

// fail records that a commit failed on I/O and returns the error every
// later call gets; see the package doc for why the Store stops.
func (s *Store) fail(cause error) error {
	err, first := s.gate.Fail(cause)
	if first {
		s.log.Error("commit failed; the store refuses further use until reopened", "err", cause)
	}
	return err
}

// forget removes a closed iterator from the set Close would close.
func (s *Store) forget(it *iterator) { s.gate.Forget(it) }

// cloneBound copies a bound, keeping nil (unbounded) distinct from empty.
func cloneBound(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte{}, b...)
}
