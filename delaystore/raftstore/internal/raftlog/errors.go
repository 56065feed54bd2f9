package raftlog

import "errors"

var (
	// ErrCorrupt is returned by Open and GetLog for a record or a file that
	// fails its check in a place a crash cannot explain; the error says
	// which file and offset.
	ErrCorrupt = errors.New("raftlog: corrupt")
	// ErrNotConsecutive is returned by StoreLogs for entries that do not
	// follow the log's last one, or each other, and by DeleteRange for a
	// range that would leave a hole.
	ErrNotConsecutive = errors.New("raftlog: entries not consecutive")
	// ErrClosed is returned by every method after Close.
	ErrClosed = errors.New("raftlog: closed")
)
