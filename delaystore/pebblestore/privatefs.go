package pebblestore

import (
	"errors"
	"io"
	"os"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Modes of what the Store creates on disk: private to the user the
// service runs as, as bbolt's file is.
const (
	dirMode  os.FileMode = 0o700
	fileMode os.FileMode = 0o600
)

// privateFS is the operating system's file system with the directories
// and files Pebble creates private to this user. Pebble's own file system
// creates files with mode 0666 and directories with the mode it is given,
// 0755, both less the umask.
//
// vfs.FS takes no mode for files, so a file is created as Pebble
// creates it and its mode is then set. In between, no one else can reach
// it: its directory was created 0700. An existing directory keeps the mode
// it has; whoever made it chose that.
type privateFS struct {
	vfs.FS
}

// Unwrap returns the file system under the modes.
func (f privateFS) Unwrap() vfs.FS { return f.FS }

func (f privateFS) MkdirAll(dir string, _ os.FileMode) error {
	return f.FS.MkdirAll(dir, dirMode)
}

func (f privateFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	return private(f.FS.Create(name, category))(name)
}

func (f privateFS) OpenReadWrite(name string, category vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	return private(f.FS.OpenReadWrite(name, category, opts...))(name)
}

func (f privateFS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	return private(f.FS.ReuseForWrite(oldname, newname, category))(newname)
}

// Lock takes the lock as fs does; the lock file is made private too.
func (f privateFS) Lock(name string) (io.Closer, error) {
	c, err := f.FS.Lock(name)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(name, fileMode); err != nil {
		return nil, joinClose(err, c)
	}
	return c, nil
}

// private returns a function that sets the mode of the file name that an
// open call returned, closing it if that fails.
func private(file vfs.File, err error) func(name string) (vfs.File, error) {
	return func(name string) (vfs.File, error) {
		if err != nil {
			return nil, err
		}
		if err := os.Chmod(name, fileMode); err != nil {
			return nil, joinClose(err, file)
		}
		return file, nil
	}
}

// joinClose closes c after err, and returns err with any error of Close.
func joinClose(err error, c io.Closer) error {
	return errors.Join(err, c.Close())
}
