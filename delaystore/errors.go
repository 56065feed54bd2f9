package delaystore

import "errors"

var (
	// ErrNotFound is returned by Get when the key does not exist.
	ErrNotFound = errors.New("delaystore: not found")
	// ErrClosed is returned by operations on a closed store or repository.
	ErrClosed = errors.New("delaystore: closed")
	// ErrBatchCommitted is returned when a batch is used after Commit.
	ErrBatchCommitted = errors.New("delaystore: batch already committed")
	// ErrInvalidConfig is wrapped by every configuration validation error.
	ErrInvalidConfig = errors.New("delaystore: invalid config")
	// ErrCorrupt is returned when a stored value cannot be decoded.
	ErrCorrupt = errors.New("delaystore: corrupt value")
)
