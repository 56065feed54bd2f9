package pebblestore

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/natsdelay/natsdelay/delaystore"
)

const (
	// DefaultBlockCacheSize is the block cache used when
	// Config.BlockCacheSize is 0.
	DefaultBlockCacheSize = 16 << 20
	// DefaultMemTableSize is the memtable size used when Config.MemTableSize
	// is 0. Pebble keeps a flushed memtable's arena to reuse it, so two
	// of them stay resident under steady writes. At 64 MiB the service
	// measured about 195 MiB resident with a million messages pending, at
	// 32 MiB about 130 MiB, for some 7% less fill throughput. At 16 MiB a
	// burst of 100,000 recurring schedules grows the process by 32 MiB
	// less than at 32, with no cost to ingest or end-to-end throughput
	// that alternating runs could tell from their spread: a message due
	// soon meets its delete in either memtable, and one due later is
	// flushed from either.
	DefaultMemTableSize = 16 << 20
	// DefaultDiskFullReserve is the disk-full reserve used when
	// Config.DiskFullReserve is 0.
	DefaultDiskFullReserve = 8 << 20

	// maxDiskFullReserve bounds the reserve: it only has to hold the
	// writes under way when the disk fills.
	maxDiskFullReserve = 1 << 30

	// maxMemTableSize is Pebble's own limit on 64-bit platforms: memtable
	// offsets are 32-bit.
	maxMemTableSize = 1 << 32
)

// Config configures Open. A zero field means the default shown by
// DefaultConfig.
type Config struct {
	// Dir is the directory that holds the database. It is created if it does
	// not exist, mode 0700; the files in it are mode 0600. It is required
	// unless InMemory is set, and must then be empty.
	Dir string

	// InMemory keeps the whole store in memory, on Pebble's memory file
	// system with the WAL off. Nothing survives Close. Tests and the
	// "memory" engine use it.
	InMemory bool

	// DisableWAL turns Pebble's write-ahead log off on disk. Commits then
	// live only in the memtable until it is flushed, so Sync is no more
	// durable than NoSync: writes reach disk on Flush (which flushes the
	// memtable) and on Close. It is meant for when another log, such as a
	// Raft log, already makes writes durable.
	DisableWAL bool

	// BlockCacheSize is the size in bytes of the cache of uncompressed
	// sstable blocks. Default 16 MiB.
	BlockCacheSize int64

	// MemTableSize is the size in bytes of one memtable. Writes are buffered
	// in memtables until they are flushed to sstables, so it bounds how much
	// the WAL replays at startup. Default 16 MiB; it must be below 4 GiB.
	MemTableSize int64

	// DiskFullReserve is the size in bytes of a file the store keeps in
	// Dir and deletes when the disk fills, so that the writes under way
	// finish and the store fails (delaystore.ErrFailed) instead of the
	// process; Open recreates it, and refuses to open unless as much space
	// again is free besides. Default 8 MiB. Unused in memory.
	DiskFullReserve int64

	// Logger receives Pebble's logs and notable events (background errors,
	// write stalls, slow disks). Nil discards them.
	Logger *slog.Logger

	// FS is the file system Pebble uses on disk; nil means the operating
	// system's, with the modes Dir describes. Tests set it to inject faults
	// with Pebble's vfs/errorfs; the modes are then up to it. It must be
	// nil when InMemory is set.
	FS vfs.FS
}

// DefaultConfig returns the defaults that Open uses for zero fields. Dir is
// left empty: it has no sensible default.
func DefaultConfig() Config {
	return Config{
		BlockCacheSize:  DefaultBlockCacheSize,
		MemTableSize:    DefaultMemTableSize,
		DiskFullReserve: DefaultDiskFullReserve,
	}
}

// Validate reports every invalid field at once, in an error that wraps
// delaystore.ErrInvalidConfig. Zero fields are valid: they mean the default.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("pebblestore: %w: "+format, append([]any{delaystore.ErrInvalidConfig}, args...)...))
	}
	switch {
	case c.InMemory && c.Dir != "":
		bad("Dir (%q) must be empty when InMemory is set: nothing is written there", c.Dir)
	case !c.InMemory && c.Dir == "":
		bad(`Dir ("") must name a directory unless InMemory is set`)
	}
	if c.InMemory && c.FS != nil {
		bad("FS (%v) must be nil when InMemory is set: the store uses its own memory file system", c.FS)
	}
	if c.BlockCacheSize < 0 {
		bad("BlockCacheSize (%d) must be >= 0", c.BlockCacheSize)
	}
	if c.DiskFullReserve < 0 || c.DiskFullReserve > maxDiskFullReserve {
		bad("DiskFullReserve (%d) must be >= 0 and at most %d (1 GiB)", c.DiskFullReserve, int64(maxDiskFullReserve))
	}
	if c.MemTableSize < 0 || c.MemTableSize >= maxMemTableSize {
		bad("MemTableSize (%d) must be >= 0 and < %d (4 GiB)", c.MemTableSize, int64(maxMemTableSize))
	}
	return errors.Join(errs...)
}

// withDefaults returns c with zero fields replaced by their defaults.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	c.BlockCacheSize = cmp.Or(c.BlockCacheSize, d.BlockCacheSize)
	c.MemTableSize = cmp.Or(c.MemTableSize, d.MemTableSize)
	c.DiskFullReserve = cmp.Or(c.DiskFullReserve, d.DiskFullReserve)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}
