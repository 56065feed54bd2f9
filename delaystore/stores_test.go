package delaystore_test

import (
	"bytes"
	"errors"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/delaystore/boltstore"
	"github.com/natsdelay/natsdelay/delaystore/pebblestore"
)

// newStore opens an in-memory Pebble store that is closed when tb ends.
func newStore(tb testing.TB) *pebblestore.Store {
	tb.Helper()
	s, err := pebblestore.Open(pebblestore.Config{InMemory: true, Logger: testLogger(tb)})
	if err != nil {
		tb.Fatalf("pebblestore.Open: %v", err)
	}
	tb.Cleanup(func() {
		if err := s.Close(); err != nil {
			tb.Errorf("Close: %v", err)
		}
	})
	return s
}

// openDisk opens a Pebble store in dir on fs (nil for the operating
// system's), closed when tb ends if the test has not closed it.
func openDisk(tb testing.TB, dir string, fs vfs.FS) *pebblestore.Store {
	tb.Helper()
	s, err := pebblestore.Open(pebblestore.Config{Dir: dir, FS: fs, Logger: testLogger(tb)})
	if err != nil {
		tb.Fatalf("pebblestore.Open(%q): %v", dir, err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

// openBolt opens a bbolt store in dir, closed when tb ends if the test has
// not closed it.
func openBolt(tb testing.TB, dir string) *boltstore.Store {
	tb.Helper()
	s, err := boltstore.Open(boltstore.Config{Path: filepath.Join(dir, "bolt.db"), Logger: testLogger(tb)})
	if err != nil {
		tb.Fatalf("boltstore.Open(%q): %v", dir, err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

// engine opens one storage engine for tests and benchmarks that run on all
// of them.
type engine struct {
	name string
	// open opens the engine's store in dir, or reopens it there when it is
	// durable. The store is closed when tb ends.
	open    func(tb testing.TB, dir string) delaystore.Store
	durable bool
}

var engines = []engine{
	{"pebble-disk", func(tb testing.TB, dir string) delaystore.Store { return openDisk(tb, dir, nil) }, true},
	{"pebble-mem", func(tb testing.TB, _ string) delaystore.Store { return newStore(tb) }, false},
	{"bolt", func(tb testing.TB, dir string) delaystore.Store { return openBolt(tb, dir) }, true},
}

// forEachEngine runs test once per engine, or per durable engine.
func forEachEngine(t *testing.T, durableOnly bool, test func(t *testing.T, e engine)) {
	for _, e := range engines {
		if durableOnly && !e.durable {
			continue
		}
		t.Run(e.name, func(t *testing.T) { test(t, e) })
	}
}

func testLogger(tb testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tb.Output(), nil))
}

// failStore wraps a Store so that commits fail while fail is set, as a full
// disk or a failed fsync would.
type failStore struct {
	delaystore.Store
	fail atomic.Bool
}

var errInjected = errors.New("injected commit failure")

func (s *failStore) NewBatch() delaystore.Batch { return &failBatch{Batch: s.Store.NewBatch(), s: s} }

type failBatch struct {
	delaystore.Batch
	s *failStore
}

func (b *failBatch) Commit(sync delaystore.SyncMode) error {
	if b.s.fail.Load() {
		return errInjected
	}
	return b.Batch.Commit(sync)
}

// countStore wraps a Store and counts every key its scans yield, to prove
// what a read touched.
type countStore struct {
	delaystore.Store
	yielded atomic.Int64
}

func (s *countStore) Scan(opts delaystore.IterOptions, yield func(k, v []byte) bool) error {
	return s.Store.Scan(opts, func(k, v []byte) bool {
		s.yielded.Add(1)
		return yield(k, v)
	})
}

// scribbleStore wraps a Store and overwrites the slices it yields once yield
// returns, as an engine reusing its buffers may; whatever a caller kept
// without copying is then garbage.
type scribbleStore struct{ delaystore.Store }

func (s scribbleStore) Scan(opts delaystore.IterOptions, yield func(k, v []byte) bool) error {
	return s.Store.Scan(opts, func(k, v []byte) bool {
		k, v = bytes.Clone(k), bytes.Clone(v)
		ok := yield(k, v)
		for i := range k {
			k[i] = 0xee
		}
		for i := range v {
			v[i] = 0xee
		}
		return ok
	})
}
