//go:build unix

package server

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lockFile is the file in the data dir that a running serve holds a lock on.
const lockFile = "natsdelay.lock"

// lockDataDir creates dir, private to this user, if it is missing, and
// takes an exclusive lock on dir/natsdelay.lock, so that a second serve on
// the same dir stops before it starts anything. The lock goes when unlock
// is called or the process exits, however it exits.
func lockDataDir(dir string) (unlock func(), err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create the data dir %s: %w", dir, err)
	}
	path := filepath.Join(dir, lockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, settingsf("the data dir %s is in use by another natsdelay: stop it, or give this one its own --data-dir", dir)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	// NB: the file stays; removing it would let a third serve lock a new
	// file while the second still holds the old one.
	return func() { f.Close() }, nil
}
