package pebblestore

import (
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"syscall"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/natsdelay/natsdelay/delaystore"
)

// reserveName is the reserve file in the store's directory. Pebble ignores
// files whose names it does not know.
const reserveName = "natsdelay-disk-full-reserve"

// errDiskFull is the cause a Store fails with once the disk filled.
var errDiskFull = fmt.Errorf("disk full: writes refused until the store is reopened with space free: %w", syscall.ENOSPC)

// reserve is the disk-full reserve: a file of zeros in the store's
// directory, deleted when a write meets a full disk, so that the writes
// Pebble has under way can finish and the Store can then fail cleanly.
//
// Pebble survives few write errors. A failed WAL write fails the
// commit with a fatal error, which the Store recovers (see guard), but a
// WAL rotation that fails panics while Pebble's locks are in disorder,
// which no recover can undo, and a MANIFEST write that fails is fatal on
// a background goroutine. On a full disk each of these is a matter of
// chance. With the reserve released at the first ENOSPC, Pebble's disk-full
// wrapper (vfs.OnDiskFull) retries that write, which then fits, and the
// Store refuses every call after it, so nothing else is written but what
// Close needs.
type reserve struct {
	fs   vfs.FS // the file system under the disk-full wrapper
	dir  string
	path string
	size int64
	log  *slog.Logger
	// released is set once the disk filled and the reserve was deleted.
	released atomic.Bool
}

// ensure creates the reserve if it is missing or short, provided the disk
// has room for it and as much again besides. It returns an error wrapping
// delaystore.ErrFailed and ENOSPC if the disk is too full. NB: it checks
// the free space before it writes, so that a disk that cannot hold the
// reserve is never filled by it.
func (r *reserve) ensure() error {
	if err := r.fs.MkdirAll(r.dir, dirMode); err != nil {
		return err
	}
	var have int64
	if fi, err := r.fs.Stat(r.path); err == nil {
		have = fi.Size()
	}
	if du, err := r.fs.GetDiskUsage(r.dir); err != nil {
		// Some file systems cannot tell; the reserve is made all the same.
		r.log.Debug("disk usage unknown", "dir", r.dir, "err", err)
	} else if free, want := du.AvailBytes+uint64(have), 2*uint64(r.size); free < want {
		return fmt.Errorf("%w: disk full: %d bytes free in %s counting the reserve, want %d: the %d-byte reserve and as much again: %w",
			delaystore.ErrFailed, free, r.dir, want, r.size, syscall.ENOSPC)
	}
	if have >= r.size {
		return nil
	}
	if err := r.create(); err != nil {
		_ = r.fs.Remove(r.path)
		if vfs.IsNoSpaceError(err) {
			return fmt.Errorf("%w: disk full: cannot reserve %d bytes in %s: %w", delaystore.ErrFailed, r.size, r.dir, err)
		}
		return fmt.Errorf("creating the disk-full reserve: %w", err)
	}
	return nil
}

func (r *reserve) create() error {
	f, err := r.fs.Create(r.path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	zeros := make([]byte, min(r.size, 1<<20))
	var werr error
	for left := r.size; left > 0 && werr == nil; left -= int64(len(zeros)) {
		_, werr = f.Write(zeros[:min(int64(len(zeros)), left)])
	}
	if werr == nil {
		werr = f.Sync()
	}
	return errors.Join(werr, f.Close())
}

// release is Pebble's disk-full callback: it deletes the reserve so that
// the write that met the full disk can be retried, and marks the store
// failed. Pebble blocks other writes while it runs; it does not block.
func (r *reserve) release() {
	if !r.released.CompareAndSwap(false, true) {
		return
	}
	err := r.fs.Remove(r.path)
	r.log.Error("disk full: released the reserve so that writes under way can finish; the store refuses further use until reopened",
		"dir", r.dir, "reserve_bytes", r.size, "remove_err", err)
}
