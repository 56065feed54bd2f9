package boltstore_test

import (
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/delaystore/boltstore"
	"github.com/natsdelay/natsdelay/delaystore/storetest"
)

// faultyFiles is an Options.OpenFile hook whose files can be made to fail
// every write. bbolt holds a plain *os.File, so the fault is injected below
// it: the descriptor is replaced by a read-only one of the same file, and
// pwrite then fails with EBADF while reads and the memory map carry on.
type faultyFiles struct {
	mu    sync.Mutex
	files []*os.File
}

func (f *faultyFiles) open(name string, flag int, perm os.FileMode) (*os.File, error) {
	file, err := os.OpenFile(name, flag, perm)
	if err == nil {
		f.mu.Lock()
		f.files = append(f.files, file)
		f.mu.Unlock()
	}
	return file, err
}

func (f *faultyFiles) inject(t *testing.T) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, file := range f.files {
		ro, err := syscall.Open(file.Name(), syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		// NB: this closes the original descriptor, and with it bbolt's
		// flock, which a reopen later in the test needs anyway.
		if err := syscall.Dup3(ro, int(file.Fd()), syscall.O_CLOEXEC); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Close(ro); err != nil {
			t.Fatal(err)
		}
	}
}

func TestStore_Faults(t *testing.T) {
	storetest.RunFaults(t, func(t *testing.T, dir string) (delaystore.Store, func()) {
		var files faultyFiles
		s := open(t, boltstore.Config{Path: filepath.Join(dir, "test.bolt"), OpenFile: files.open})
		return s, func() { files.inject(t) }
	})
}
