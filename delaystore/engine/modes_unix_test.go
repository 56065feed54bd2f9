//go:build unix

package engine_test

import (
	"io/fs"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/delaystore/engine"
)

// Both disk engines keep the data private to the user the service runs
// as: every directory they create is mode 0700 and every file 0600, after
// a write and a reopen. NB: the umask is 0 here, so nothing is left to it;
// the test is not parallel, because the umask is the whole process's.
func TestOpen_DiskEngines_PrivateModes(t *testing.T) {
	old := syscall.Umask(0)
	t.Cleanup(func() { syscall.Umask(old) })
	for _, name := range []string{engine.Pebble, engine.Bolt} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data") // Open creates it
			cfg := engine.Config{Engine: name, Dir: dir}
			for range 2 {
				s := open(t, cfg)
				b := s.NewBatch()
				_ = b.Set([]byte("k"), []byte("v"))
				if err := b.Commit(delaystore.Sync); err != nil {
					t.Fatal(err)
				}
				if err := s.Flush(); err != nil {
					t.Fatal(err)
				}
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
			}
			n := 0
			err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
				if err != nil {
					return err
				}
				fi, err := d.Info()
				if err != nil {
					return err
				}
				want := fs.FileMode(0o600)
				if d.IsDir() {
					want = fs.ModeDir | 0o700
				}
				if fi.Mode() != want {
					t.Errorf("%s: mode %v, want %v", path, fi.Mode(), want)
				}
				n++
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if n < 2 {
				t.Fatalf("found %d entries under %s: nothing was written", n, dir)
			}
		})
	}
}
