// Package engine opens the storage engine a configuration names, so that
// the code that starts the service names no engine package itself.
//
// # Layout
//
// Each disk engine keeps its files in its own place under Config.Dir:
//
//	Dir/pebble/         the Pebble database directory
//	Dir/natsdelay.db    the bbolt database file
//
// Open refuses a Dir that holds the other engine's store, because opening
// it would start empty and leave the messages stored there undelivered.
package engine

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"natsdelay/delaystore"
	"natsdelay/delaystore/boltstore"
	"natsdelay/delaystore/pebblestore"
)

// Engine names accepted in Config.Engine.
const (
	// Pebble is the LSM engine on disk, and the default.
	Pebble = "pebble"
	// Bolt is the bbolt B+tree engine, in one file.
	Bolt = "bolt"
	// Memory is Pebble in memory: nothing survives Close. For tests and
	// trials.
	Memory = "memory"
)

// Names returns the accepted engine names, the default first.
func Names() []string { return []string{Pebble, Bolt, Memory} }

const (
	// PebbleDir is the directory under Config.Dir that holds a Pebble store.
	PebbleDir = "pebble"
	// BoltFile is the file under Config.Dir that holds a bbolt store.
	BoltFile = "natsdelay.db"
)

// Config configures Open. A zero field means the default shown by
// DefaultConfig. Fields for an engine other than the one chosen are
// ignored.
type Config struct {
	// Engine is one of Pebble (the default), Bolt or Memory.
	Engine string

	// Dir is the data directory, created if needed. Required for the disk
	// engines; ignored by Memory. See the package doc for the layout. Both
	// disk engines create their directories mode 0700 and files mode 0600,
	// private to the user the service runs as.
	Dir string

	// PebbleBlockCacheSize is Pebble's block cache in bytes. Default
	// pebblestore.DefaultBlockCacheSize (16 MiB).
	PebbleBlockCacheSize int64
	// PebbleMemTableSize is Pebble's memtable size in bytes, below 4 GiB.
	// Default pebblestore.DefaultMemTableSize (32 MiB).
	PebbleMemTableSize int64
	// PebbleDisableWAL turns Pebble's WAL off, so that only Flush and Close
	// make writes durable; see pebblestore.Config.DisableWAL.
	PebbleDisableWAL bool
	// PebbleDiskFullReserve is the file Pebble's store keeps to survive a
	// full disk, in bytes. Default pebblestore.DefaultDiskFullReserve
	// (8 MiB); see pebblestore.Config.DiskFullReserve.
	PebbleDiskFullReserve int64

	// BoltTimeout bounds the wait for bbolt's file lock. Default
	// boltstore.DefaultTimeout (1s).
	BoltTimeout time.Duration
	// BoltInitialMmapSize is bbolt's first memory map in bytes. Default
	// boltstore.DefaultInitialMmapSize (1 GiB).
	BoltInitialMmapSize int64
	// BoltNoFreelistSync skips syncing bbolt's free list on commit; see
	// boltstore.Config.NoFreelistSync.
	BoltNoFreelistSync bool
	// BoltMinFree is the free space bbolt's store wants on its disk at
	// Open. Default boltstore.DefaultMinFree (16 MiB); see
	// boltstore.Config.MinFree.
	BoltMinFree int64

	// Logger receives the engine's logs. Nil discards them.
	Logger *slog.Logger
}

// DefaultConfig returns the defaults that Open uses for zero fields. Dir is
// left empty: it has no sensible default.
func DefaultConfig() Config {
	p, b := pebblestore.DefaultConfig(), boltstore.DefaultConfig()
	return Config{
		Engine:                Pebble,
		PebbleBlockCacheSize:  p.BlockCacheSize,
		PebbleMemTableSize:    p.MemTableSize,
		PebbleDiskFullReserve: p.DiskFullReserve,
		BoltTimeout:           b.Timeout,
		BoltInitialMmapSize:   b.InitialMmapSize,
		BoltMinFree:           b.MinFree,
	}
}

// Validate reports every invalid field at once, in an error that wraps
// delaystore.ErrInvalidConfig. It checks the tuning fields of the chosen
// engine only.
func (c Config) Validate() error {
	var problems []string
	bad := func(format string, args ...any) {
		problems = append(problems, fmt.Sprintf(format, args...))
	}
	name := c.engine()
	switch name {
	case Pebble, Bolt:
		if c.Dir == "" {
			bad(`Dir ("") must name a data directory for engine %q`, name)
		}
	case Memory:
	default:
		bad("Engine (%q) must be one of %s", c.Engine, strings.Join(Names(), ", "))
	}
	if name == Pebble {
		if c.PebbleBlockCacheSize < 0 {
			bad("PebbleBlockCacheSize (%d) must be >= 0", c.PebbleBlockCacheSize)
		}
		if c.PebbleMemTableSize < 0 || c.PebbleMemTableSize >= 4<<30 {
			bad("PebbleMemTableSize (%d) must be >= 0 and < 4 GiB", c.PebbleMemTableSize)
		}
		if c.PebbleDiskFullReserve < 0 {
			bad("PebbleDiskFullReserve (%d) must be >= 0", c.PebbleDiskFullReserve)
		}
	}
	if name == Bolt {
		if c.BoltTimeout < 0 {
			bad("BoltTimeout (%s) must be >= 0", c.BoltTimeout)
		}
		if c.BoltInitialMmapSize < 0 {
			bad("BoltInitialMmapSize (%d) must be >= 0", c.BoltInitialMmapSize)
		}
		if c.BoltMinFree < -1 {
			bad("BoltMinFree (%d) must be >= 0, or -1 to skip the check", c.BoltMinFree)
		}
	}
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("engine: %w: %s", delaystore.ErrInvalidConfig, strings.Join(problems, "; "))
}

// engine is the chosen engine's name, with the default applied.
func (c Config) engine() string {
	if c.Engine == "" {
		return Pebble
	}
	return c.Engine
}

// Open opens the engine cfg names. It returns an error wrapping
// delaystore.ErrInvalidConfig for a bad cfg, or when Dir holds the other
// disk engine's store, and the engine's error if it cannot open. On error
// the Store is nil. The caller must Close the Store.
func Open(cfg Config) (delaystore.Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	name := cfg.engine()
	if name != Memory {
		if err := checkDir(name, cfg.Dir); err != nil {
			return nil, err
		}
	}
	switch name {
	case Pebble, Memory:
		pc := pebblestore.Config{
			BlockCacheSize:  cfg.PebbleBlockCacheSize,
			MemTableSize:    cfg.PebbleMemTableSize,
			DisableWAL:      cfg.PebbleDisableWAL,
			DiskFullReserve: cfg.PebbleDiskFullReserve,
			Logger:          cfg.Logger,
		}
		if name == Memory {
			pc.InMemory = true
		} else {
			pc.Dir = filepath.Join(cfg.Dir, PebbleDir)
		}
		s, err := pebblestore.Open(pc)
		if err != nil {
			return nil, fmt.Errorf("engine: %s: %w", name, err)
		}
		return s, nil
	default:
		// bbolt creates its file, not the directory it is in.
		if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
			return nil, fmt.Errorf("engine: bolt: %w", err)
		}
		s, err := boltstore.Open(boltstore.Config{
			Path:            filepath.Join(cfg.Dir, BoltFile),
			Timeout:         cfg.BoltTimeout,
			InitialMmapSize: cfg.BoltInitialMmapSize,
			NoFreelistSync:  cfg.BoltNoFreelistSync,
			MinFree:         cfg.BoltMinFree,
			Logger:          cfg.Logger,
		})
		if err != nil {
			return nil, fmt.Errorf("engine: bolt: %w", err)
		}
		return s, nil
	}
}

// checkDir refuses a Dir that already holds a store of a disk engine other
// than name.
func checkDir(name, dir string) error {
	var found []string
	for other, path := range map[string]string{Pebble: PebbleDir, Bolt: BoltFile} {
		if other == name {
			continue
		}
		_, err := os.Stat(filepath.Join(dir, path))
		switch {
		case err == nil:
			found = append(found, fmt.Sprintf("a %s store (%s)", other, path))
		case !errors.Is(err, fs.ErrNotExist):
			return fmt.Errorf("engine: %s: check %s: %w", name, dir, err)
		}
	}
	if len(found) == 0 {
		return nil
	}
	slices.Sort(found)
	return fmt.Errorf("engine: %w: Engine (%q): Dir (%q) already holds %s; opening %s there would start empty and strand its messages",
		delaystore.ErrInvalidConfig, name, dir, strings.Join(found, " and "), name)
}
