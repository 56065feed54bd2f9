package pebblestore_test

import (
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/delaystore/pebblestore"
	"github.com/natsdelay/natsdelay/delaystore/storetest"
)

// open opens a store with cfg, logging to the test, and closes it at cleanup.
func open(tb testing.TB, cfg pebblestore.Config) *pebblestore.Store {
	tb.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(tb.Output(), nil))
	}
	s, err := pebblestore.Open(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := s.Close(); err != nil {
			tb.Errorf("cleanup Close: %v", err)
		}
	})
	return s
}

func openDisk(tb testing.TB) delaystore.Store {
	return open(tb, pebblestore.Config{Dir: filepath.Join(tb.TempDir(), "pebble")})
}

func openMemory(tb testing.TB) delaystore.Store {
	return open(tb, pebblestore.Config{InMemory: true})
}

func TestStore_Contract(t *testing.T) {
	t.Run("disk", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) delaystore.Store { return openDisk(t) })
	})
	t.Run("memory", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) delaystore.Store { return openMemory(t) })
	})
}

func TestStore_Reopen(t *testing.T) {
	t.Run("wal", func(t *testing.T) {
		storetest.RunReopen(t, func(t *testing.T, dir string) delaystore.Store {
			return open(t, pebblestore.Config{Dir: dir})
		})
	})
	// Without a WAL, Flush and Close must flush the memtable for writes to
	// survive.
	t.Run("no_wal", func(t *testing.T) {
		storetest.RunReopen(t, func(t *testing.T, dir string) delaystore.Store {
			return open(t, pebblestore.Config{Dir: dir, DisableWAL: true})
		})
	})
}

// A directory already open in this process cannot be opened twice.
func TestOpen_Locked(t *testing.T) {
	dir := t.TempDir()
	open(t, pebblestore.Config{Dir: dir})
	s, err := pebblestore.Open(pebblestore.Config{Dir: dir})
	if err == nil {
		s.Close()
		t.Fatal("second Open of the same directory succeeded")
	}
	t.Log(err)
}

func TestOpen_InvalidConfig(t *testing.T) {
	_, err := pebblestore.Open(pebblestore.Config{})
	if !errors.Is(err, delaystore.ErrInvalidConfig) {
		t.Fatalf("Open(Config{}) = %v, want ErrInvalidConfig", err)
	}
}

func TestConfig_Validate(t *testing.T) {
	cases := []struct {
		name string
		cfg  pebblestore.Config
		want []string // substrings of the error; none means valid
	}{
		{"disk", pebblestore.Config{Dir: "d"}, nil},
		{"memory", pebblestore.Config{InMemory: true}, nil},
		{"defaults", func() pebblestore.Config { c := pebblestore.DefaultConfig(); c.Dir = "d"; return c }(), nil},
		{"disk without WAL on an injected FS", pebblestore.Config{Dir: "d", DisableWAL: true, FS: vfs.NewMem()}, nil},
		{"no dir", pebblestore.Config{}, []string{`Dir ("")`}},
		{"memory with dir", pebblestore.Config{InMemory: true, Dir: "d"}, []string{`Dir ("d") must be empty`}},
		{"memory with FS", pebblestore.Config{InMemory: true, FS: vfs.NewMem()}, []string{"FS"}},
		{"negative cache", pebblestore.Config{Dir: "d", BlockCacheSize: -1}, []string{"BlockCacheSize (-1)"}},
		{"reserve too big", pebblestore.Config{Dir: "d", DiskFullReserve: 2 << 30}, []string{"DiskFullReserve (2147483648)"}},
		{"negative reserve", pebblestore.Config{Dir: "d", DiskFullReserve: -1}, []string{"DiskFullReserve (-1)"}},
		{"memtable too big", pebblestore.Config{Dir: "d", MemTableSize: 4 << 30}, []string{"MemTableSize (4294967296)"}},
		{"every bad field at once", pebblestore.Config{BlockCacheSize: -2, MemTableSize: -3},
			[]string{`Dir ("")`, "BlockCacheSize (-2)", "MemTableSize (-3)"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.cfg.Validate()
			if len(c.want) == 0 {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, delaystore.ErrInvalidConfig) {
				t.Fatalf("Validate = %v, want ErrInvalidConfig", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate = %q, want it to mention %q", err, w)
				}
			}
		})
	}
}

func BenchmarkRawCommit(b *testing.B) {
	// Quiet: a benchmark prints whatever its store logs.
	quiet := slog.New(slog.DiscardHandler)
	disk := func(tb testing.TB) delaystore.Store {
		return open(tb, pebblestore.Config{Dir: filepath.Join(tb.TempDir(), "pebble"), Logger: quiet})
	}
	memory := func(tb testing.TB) delaystore.Store {
		return open(tb, pebblestore.Config{InMemory: true, Logger: quiet})
	}
	b.Run("engine=pebble-disk", func(b *testing.B) {
		storetest.BenchRawCommit(b, disk, delaystore.Sync)
	})
	// NoSync on the same disk shows what the fsync costs.
	b.Run("engine=pebble-disk-nosync", func(b *testing.B) {
		storetest.BenchRawCommit(b, disk, delaystore.NoSync)
	})
	b.Run("engine=pebble-memory", func(b *testing.B) {
		storetest.BenchRawCommit(b, memory, delaystore.Sync)
	})
}

// TestStore_Batch_Reused checks the batches a Store keeps for reuse, by
// NewBatch and by NewBatchSize: a batch committed, or discarded, and
// closed leaves nothing in the next one, and a batch large enough that
// Pebble wraps it as a flushable batch (over half the memtable) keeps
// what it committed when its batch is reused for the writes after it.
func TestStore_Batch_Reused(t *testing.T) {
	for _, tc := range []struct {
		name  string
		batch func(*pebblestore.Store) delaystore.Batch
	}{
		{"NewBatch", func(s *pebblestore.Store) delaystore.Batch { return s.NewBatch() }},
		{"NewBatchSize", func(s *pebblestore.Store) delaystore.Batch { return s.NewBatchSize(64 << 10) }},
	} {
		t.Run(tc.name, func(t *testing.T) { checkBatchesReused(t, tc.batch) })
	}
}

func checkBatchesReused(t *testing.T, newBatch func(*pebblestore.Store) delaystore.Batch) {
	s := open(t, pebblestore.Config{Dir: filepath.Join(t.TempDir(), "pebble"), MemTableSize: 1 << 20})
	write := func(commit bool, kv ...[]byte) {
		t.Helper()
		b := newBatch(s)
		if n := b.Len(); n != 0 {
			t.Fatalf("a new batch holds %d operations", n)
		}
		for i := 0; i < len(kv); i += 2 {
			if err := b.Set(kv[i], kv[i+1]); err != nil {
				t.Fatal(err)
			}
		}
		if commit {
			if err := b.Commit(delaystore.Sync); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
	}
	large := []byte(strings.Repeat("L", 700<<10))
	write(true, []byte("a"), []byte("1"))
	write(false, []byte("discarded"), []byte("x"))
	write(true, []byte("large"), large)
	for i := range 8 {
		write(true, []byte{'k', byte(i)}, []byte(strings.Repeat("v", 300<<10)))
	}
	want := map[string][]byte{"a": []byte("1"), "large": large}
	for i := range 8 {
		want[string([]byte{'k', byte(i)})] = []byte(strings.Repeat("v", 300<<10))
	}
	for k, v := range want {
		got, err := s.Get([]byte(k))
		if err != nil || string(got) != string(v) {
			t.Errorf("%q: %d bytes, %v; want %d bytes", k, len(got), err, len(v))
		}
	}
	if _, err := s.Get([]byte("discarded")); !errors.Is(err, delaystore.ErrNotFound) {
		t.Errorf("a discarded batch's write: %v, want ErrNotFound", err)
	}
}

// TestStore_BatchSize_KeepsItsBuffer checks that a batch made by
// NewBatchSize, committed and closed, lends its buffer to the next one:
// the planner's batches of several MiB, made afresh three times a second,
// were a tenth of what a recurring workload allocated. A batch larger
// than the Store keeps is made for its commit alone.
func TestStore_BatchSize_KeepsItsBuffer(t *testing.T) {
	s := open(t, pebblestore.Config{Dir: filepath.Join(t.TempDir(), "pebble")})
	// NB: buf keeps the buffer of the batch it was read from alive, so a
	// buffer made afresh cannot be at the same address.
	commit := func(size int, key string) (buf *byte) {
		t.Helper()
		b := s.NewBatchSize(size)
		if err := b.Set([]byte(key), []byte("v")); err != nil {
			t.Fatal(err)
		}
		buf = pebblestore.BatchBuffer(b)
		if err := b.Commit(delaystore.Sync); err != nil {
			t.Fatal(err)
		}
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		return buf
	}
	first := commit(5<<20, "a")
	if again := commit(5<<20, "b"); again != first {
		t.Fatal("the second batch of 5 MiB did not reuse the first one's buffer")
	}
	if huge := commit(9<<20, "c"); huge == first {
		t.Fatal("a batch over the size kept took the kept buffer")
	}
	if again := commit(5<<20, "d"); again != first {
		t.Fatal("the batch kept was lost to a larger one")
	}
}
