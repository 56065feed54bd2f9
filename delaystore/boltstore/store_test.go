package boltstore_test

import (
	"bytes"
	"errors"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	berrors "go.etcd.io/bbolt/errors"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/delaystore/boltstore"
	"github.com/natsdelay/natsdelay/delaystore/storetest"
)

// open opens a store with cfg, logging to the test, and closes it at cleanup.
func open(tb testing.TB, cfg boltstore.Config) *boltstore.Store {
	tb.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(tb.Output(), nil))
	}
	s, err := boltstore.Open(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	return s
}

func openTemp(tb testing.TB) delaystore.Store {
	return open(tb, boltstore.Config{Path: filepath.Join(tb.TempDir(), "test.bolt")})
}

func TestStore_Contract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) delaystore.Store { return openTemp(t) })
}

func TestStore_Reopen(t *testing.T) {
	storetest.RunReopen(t, func(t *testing.T, dir string) delaystore.Store {
		return open(t, boltstore.Config{Path: filepath.Join(dir, "test.bolt")})
	})
	t.Run("no_freelist_sync", func(t *testing.T) {
		storetest.RunReopen(t, func(t *testing.T, dir string) delaystore.Store {
			return open(t, boltstore.Config{Path: filepath.Join(dir, "test.bolt"), NoFreelistSync: true})
		})
	})
}

// A file another Store holds is an error after Timeout, not a hang.
func TestOpen_Locked_TimesOut(t *testing.T) {
	path := filepath.Join(t.TempDir(), "test.bolt")
	open(t, boltstore.Config{Path: path})
	start := time.Now()
	s, err := boltstore.Open(boltstore.Config{Path: path, Timeout: 100 * time.Millisecond})
	if err == nil {
		s.Close()
		t.Fatal("second Open of a locked file succeeded")
	}
	if !errors.Is(err, berrors.ErrTimeout) || !strings.Contains(err.Error(), "locked") {
		t.Fatalf("Open = %v, want a lock timeout", err)
	}
	t.Logf("gave up after %s: %v", time.Since(start).Round(time.Millisecond), err)
}

// Keys bbolt cannot store are rejected when added, so a commit never fails
// on them.
func TestBatch_Set_KeyTooLong(t *testing.T) {
	s := openTemp(t)
	b := s.NewBatch()
	defer b.Close()
	if err := b.Set(make([]byte, 32769), nil); err == nil {
		t.Fatal("Set with a 32769-byte key succeeded")
	}
	if err := b.Set(make([]byte, 32768), nil); err != nil {
		t.Fatalf("Set with a 32768-byte key: %v", err)
	}
	if err := b.Commit(delaystore.Sync); err != nil {
		t.Fatal(err)
	}
}

func TestOpen_InvalidConfig(t *testing.T) {
	_, err := boltstore.Open(boltstore.Config{})
	if !errors.Is(err, delaystore.ErrInvalidConfig) {
		t.Fatalf("Open(Config{}) = %v, want ErrInvalidConfig", err)
	}
}

// TestOpen_DiskTooFull checks that Open refuses a disk with less than
// MinFree bytes free, with an error that a service reopening a failed
// store takes for the same fault (ErrFailed, ENOSPC), and creates no file;
// and that -1 skips the check.
func TestOpen_DiskTooFull(t *testing.T) {
	path := filepath.Join(t.TempDir(), "full.bolt")
	_, err := boltstore.Open(boltstore.Config{Path: path, MinFree: math.MaxInt64})
	if !errors.Is(err, delaystore.ErrFailed) || !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("Open on a disk with less than MinFree free = %v, want disk full wrapping ErrFailed and ENOSPC", err)
	}
	if _, statErr := os.Stat(path); !errors.Is(statErr, os.ErrNotExist) {
		t.Fatalf("Open refused the disk but left %s behind: %v", path, statErr)
	}
	open(t, boltstore.Config{Path: path, MinFree: -1})
}

func TestConfig_Validate(t *testing.T) {
	cases := []struct {
		name string
		cfg  boltstore.Config
		want []string // substrings of the error; none means valid
	}{
		{"path only", boltstore.Config{Path: "x.bolt"}, nil},
		{"defaults", func() boltstore.Config { c := boltstore.DefaultConfig(); c.Path = "x"; return c }(), nil},
		{"no path", boltstore.Config{}, []string{`Path ("")`}},
		{"negative timeout", boltstore.Config{Path: "x", Timeout: -time.Second}, []string{"Timeout (-1s)"}},
		{"min free off", boltstore.Config{Path: "x", MinFree: -1}, nil},
		{"every bad field at once", boltstore.Config{Timeout: -1, InitialMmapSize: -1, MinFree: -2},
			[]string{`Path ("")`, "Timeout (-1ns)", "InitialMmapSize (-1)", "MinFree (-2)"}},
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
	b.Run("engine=bolt", func(b *testing.B) {
		storetest.BenchRawCommit(b, func(tb testing.TB) delaystore.Store {
			// Quiet: bbolt logs every Put at Debug when it has a logger.
			return open(tb, boltstore.Config{
				Path:   filepath.Join(tb.TempDir(), "bench.bolt"),
				Logger: slog.New(slog.DiscardHandler),
			})
		}, delaystore.Sync)
	})
}

// TestStore_Open_LogsQuietly checks what opening a store logs: nothing at
// Info, and at Debug bbolt's options with every field printable, the
// logger included.
func TestStore_Open_LogsQuietly(t *testing.T) {
	for _, level := range []slog.Level{slog.LevelInfo, slog.LevelDebug} {
		t.Run(level.String(), func(t *testing.T) {
			var buf bytes.Buffer
			log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: level}))
			open(t, boltstore.Config{Path: filepath.Join(t.TempDir(), "test.bolt"), Logger: log})
			out := buf.String()
			if level == slog.LevelInfo && out != "" {
				t.Errorf("open logged at Info:\n%s", out)
			}
			if level == slog.LevelDebug && (!strings.Contains(out, "with options") || !strings.Contains(out, "Logger: 0x")) {
				t.Errorf("open at Debug did not log the options with the logger as a pointer:\n%s", out)
			}
			if strings.Contains(out, "%!") {
				t.Errorf("open logged a bad format verb:\n%s", out)
			}
		})
	}
}
