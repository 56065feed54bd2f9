package boltstore

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/natsdelay/natsdelay/delaystore"
)

const (
	// DefaultTimeout is how long Open waits for the file lock when
	// Config.Timeout is 0.
	DefaultTimeout = time.Second
	// DefaultInitialMmapSize is the memory map size used when
	// Config.InitialMmapSize is 0.
	DefaultInitialMmapSize = 1 << 30
	// DefaultMinFree is the free space Open wants on the file's disk when
	// Config.MinFree is 0: as much as Pebble's store wants for its
	// disk-full reserve and as much again, so both engines refuse the same
	// disks.
	DefaultMinFree = 16 << 20
)

// Config configures Open. A zero field means the default shown by
// DefaultConfig.
type Config struct {
	// Path is the database file, created if it does not exist. Its
	// directory must exist. Required.
	Path string

	// Timeout bounds how long Open waits for the lock on the file that
	// another process (or another Store in this one) holds, so a locked
	// file is a clear error, not a hang. Default 1s. bbolt's own zero
	// means waiting forever.
	Timeout time.Duration

	// InitialMmapSize is the size in bytes of the first memory map of the
	// file. It is address space, not memory or disk: the file still grows
	// only as data arrives. Until the file outgrows it, readers never block
	// a commit (see the package doc). Default 1 GiB.
	InitialMmapSize int64

	// NoFreelistSync skips writing the list of free pages on every commit,
	// which makes commits that delete much cheaper. In exchange, opening
	// the file after a crash scans it to rebuild the list. Default off.
	NoFreelistSync bool

	// MinFree is the free space, in bytes, that Open wants on the disk that
	// holds Path; with less it fails with an error wrapping
	// delaystore.ErrFailed and ENOSPC. NB: bbolt often writes into pages
	// its file already has, so a store opened on a full disk commits a
	// few batches and then fails again when the file must grow: without
	// this check a service that reopens a failed store would flap between
	// recovered and failing for as long as the disk stays full. Default
	// 16 MiB; -1 turns the check off.
	MinFree int64

	// Logger receives bbolt's logs. Nil discards them.
	Logger *slog.Logger

	// OpenFile opens the database file; nil means os.OpenFile. Tests set it
	// to inject faults.
	OpenFile func(name string, flag int, perm os.FileMode) (*os.File, error)
}

// DefaultConfig returns the defaults that Open uses for zero fields. Path is
// left empty: it has no sensible default.
func DefaultConfig() Config {
	return Config{
		Timeout:         DefaultTimeout,
		InitialMmapSize: DefaultInitialMmapSize,
		MinFree:         DefaultMinFree,
	}
}

// Validate reports every invalid field at once, in an error that wraps
// delaystore.ErrInvalidConfig. Zero fields are valid: they mean the default.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("boltstore: %w: "+format, append([]any{delaystore.ErrInvalidConfig}, args...)...))
	}
	if c.Path == "" {
		bad(`Path ("") must name the database file`)
	}
	if c.Timeout < 0 {
		bad("Timeout (%s) must be >= 0", c.Timeout)
	}
	if c.InitialMmapSize < 0 {
		bad("InitialMmapSize (%d) must be >= 0", c.InitialMmapSize)
	}
	if c.MinFree < -1 {
		bad("MinFree (%d) must be >= 0, or -1 to skip the check", c.MinFree)
	}
	return errors.Join(errs...)
}

// withDefaults returns c with zero fields replaced by their defaults.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	c.Timeout = cmp.Or(c.Timeout, d.Timeout)
	c.InitialMmapSize = cmp.Or(c.InitialMmapSize, d.InitialMmapSize)
	c.MinFree = cmp.Or(c.MinFree, d.MinFree)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}
