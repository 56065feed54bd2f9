//go:build !linux

package raftlog

import "os"

// datasync makes f's data durable; without fdatasync, with fsync.
func datasync(f *os.File) error { return f.Sync() }
