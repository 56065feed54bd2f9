package pebblestore_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/delaystore/pebblestore"
	"github.com/natsdelay/natsdelay/delaystore/storetest"
)

// walFaults returns an injector, off until turned on, that fails the WAL
// operations in kinds. NB: it leaves the MANIFEST and sstables alone, so
// only the commit path meets the fault.
func walFaults(kinds ...errorfs.OpKind) *errorfs.Toggle {
	return &errorfs.Toggle{Injector: errorfs.InjectorFunc(func(op errorfs.Op) error {
		if strings.HasSuffix(op.Path, ".log") && slices.Contains(kinds, op.Kind) {
			return errorfs.ErrInjected
		}
		return nil
	})}
}

var walFaultKinds = map[string][]errorfs.OpKind{
	"write": {errorfs.OpFileWrite, errorfs.OpFileWriteAt},
	"sync":  {errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo},
}

// A commit whose WAL write or fsync fails fails the Store instead of the
// process: that commit and every later call return ErrFailed, Close lets
// go of the directory, and a reopen in the same process finds the data
// committed before the fault intact and the failed batch whole or not at
// all (see storetest.RunFaults).
func TestStore_Faults(t *testing.T) {
	for _, kind := range []string{"write", "sync"} {
		t.Run(kind, func(t *testing.T) {
			storetest.RunFaults(t, func(t *testing.T, dir string) (delaystore.Store, func()) {
				faults := walFaults(walFaultKinds[kind]...)
				s := open(t, pebblestore.Config{Dir: dir, FS: errorfs.Wrap(vfs.Default, faults)})
				return s, faults.On
			})
		})
	}
}

// A full disk fails the store, not the process: at the first ENOSPC the
// store deletes its reserve file, Pebble retries the write, which now
// fits, and so the commit under way succeeds, whole; every later call
// returns ErrFailed. Open refuses a disk too full to recreate the reserve
// and keep as much again free, and opens once space returns, with every
// committed batch intact.
func TestStore_DiskFull_ReleasesReserveAndFails(t *testing.T) {
	dir := t.TempDir()
	var full atomic.Int32 // WAL writes to fail with ENOSPC
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if strings.HasSuffix(op.Path, ".log") && op.Kind == errorfs.OpFileWrite && full.Add(-1) >= 0 {
			return syscall.ENOSPC
		}
		return nil
	})
	fs := errorfs.Wrap(vfs.Default, inj)
	cfg := pebblestore.Config{Dir: dir, FS: fs, DiskFullReserve: 64 << 10}
	s := open(t, cfg)
	reservePath := filepath.Join(dir, "natsdelay-disk-full-reserve")
	if fi, err := os.Stat(reservePath); err != nil || fi.Size() != 64<<10 {
		t.Fatalf("reserve after Open: %v, %v; want a file of 64 KiB", fi, err)
	}
	commit(t, s, delaystore.Sync, "a", "1")

	full.Store(1)
	commit(t, s, delaystore.Sync, "b", "2") // retried after the reserve went
	if _, err := os.Stat(reservePath); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("reserve after the disk filled: %v, want it deleted", err)
	}
	_, err := s.Get([]byte("a"))
	if !errors.Is(err, delaystore.ErrFailed) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Get after the disk filled = %v, want ErrFailed and ENOSPC", err)
	}
	if err := s.Close(); err != nil {
		t.Logf("Close after the disk filled: %v", err)
	}

	// Too full: room for the reserve, but not for as much again besides.
	tooFull := cfg
	tooFull.FS = smallDisk{FS: fs, avail: 100 << 10}
	if s, err := pebblestore.Open(tooFull); !errors.Is(err, delaystore.ErrFailed) {
		if err == nil {
			s.Close()
		}
		t.Fatalf("Open on a disk without room for the reserve = %v, want ErrFailed", err)
	} else {
		t.Log(err)
	}
	s = open(t, cfg)
	got := contents(t, s)
	if len(got) != 2 || got["a"] != "1" || got["b"] != "2" {
		t.Fatalf("after reopen the store holds %v, want a=1 b=2", got)
	}
}

// smallDisk reports avail bytes free, whatever the disk under it has.
type smallDisk struct {
	vfs.FS
	avail uint64
}

func (d smallDisk) GetDiskUsage(path string) (vfs.DiskUsage, error) {
	du, err := d.FS.GetDiskUsage(path)
	du.AvailBytes = d.avail
	return du, err
}

func contents(t *testing.T, s delaystore.Store) map[string]string {
	t.Helper()
	got := map[string]string{}
	err := s.Scan(delaystore.IterOptions{}, func(k, v []byte) bool {
		got[string(k)] = string(v)
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// commit sets each key and value pair of kvs in one batch.
func commit(t *testing.T, s delaystore.Store, mode delaystore.SyncMode, kvs ...string) {
	t.Helper()
	b := s.NewBatch()
	defer b.Close()
	for i := 0; i+1 < len(kvs); i += 2 {
		if err := b.Set([]byte(kvs[i]), []byte(kvs[i+1])); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Commit(mode); err != nil {
		t.Fatal(err)
	}
}
