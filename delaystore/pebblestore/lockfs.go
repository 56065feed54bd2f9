package pebblestore

import (
	"errors"
	"io"
	"sync"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// lockFS is the file system the Store hands Pebble: fs, with the directory
// lock Pebble takes remembered, so that the Store can release it when
// Pebble cannot close cleanly after a failed write. Without that, the lock
// would stay held for the life of the process and the directory could not
// be opened again until a restart.
type lockFS struct {
	vfs.FS

	mu    sync.Mutex
	locks []*lock
}

// lock is a directory lock that may be released more than once. NB:
// Pebble's own lock panics when released twice.
type lock struct {
	once sync.Once
	c    io.Closer
	err  error
}

func (l *lock) Close() error {
	l.once.Do(func() { l.err = l.c.Close() })
	return l.err
}

// Lock takes the lock as fs does and remembers it.
func (f *lockFS) Lock(name string) (io.Closer, error) {
	c, err := f.FS.Lock(name)
	if err != nil {
		return nil, err
	}
	l := &lock{c: c}
	f.mu.Lock()
	f.locks = append(f.locks, l)
	f.mu.Unlock()
	return l, nil
}

// Unwrap returns the file system under the lock tracking.
func (f *lockFS) Unwrap() vfs.FS { return f.FS }

// release releases every lock taken and not yet released.
func (f *lockFS) release() error {
	f.mu.Lock()
	locks := f.locks
	f.locks = nil
	f.mu.Unlock()
	var errs []error
	for _, l := range locks {
		errs = append(errs, l.Close())
	}
	return errors.Join(errs...)
}
