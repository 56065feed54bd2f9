package raftlog

import (
	"os"

	"golang.org/x/sys/unix"
)

// datasync makes f's data durable, and its size: fdatasync leaves out only
// the metadata a read does not need (times).
func datasync(f *os.File) error {
	for {
		err := unix.Fdatasync(int(f.Fd()))
		if err != unix.EINTR {
			return err
		}
	}
}
