package delaystore

import "errors"

var (
	// ErrNotFound is returned by Get when the key does not exist.
	ErrNotFound = errors.New("delaystore: not found")
	// ErrClosed is returned by operations on a closed store or repository.
	ErrClosed = errors.New("delaystore: closed")
	// ErrFailed is returned by every call of a store once a write to disk
	// failed (a failed WAL write or fsync, a full disk), and by the commit
	// that met the fault. The store must be closed and opened again: what
	// it holds in memory may no longer match what is on disk.
	ErrFailed = errors.New("delaystore: store failed")
	// ErrBatchCommitted is returned when a batch is used after Commit.
	ErrBatchCommitted = errors.New("delaystore: batch already committed")
	// ErrInvalidConfig is wrapped by every configuration validation error.
	ErrInvalidConfig = errors.New("delaystore: invalid config")
	// ErrCorrupt is returned when a stored value cannot be decoded.
	ErrCorrupt = errors.New("delaystore: corrupt value")
)

// Repository errors.
var (
	// ErrInvalidMessage is wrapped by Schedule and Lookup when a message
	// cannot be stored: an empty subject, a subject or client id with a NUL
	// byte (0x00, which would make index keys ambiguous) or not valid UTF-8,
	// or any other field that does not encode, such as a non-UTF-8 header.
	ErrInvalidMessage = errors.New("delaystore: invalid message")
	// ErrIDsExhausted is returned by Schedule when the next event IDs would
	// overflow uint64.
	ErrIDsExhausted = errors.New("delaystore: event ids exhausted")
	// ErrPlanned is reported by Advance when the occurrence's successor
	// was planned already: planning it again would store one occurrence
	// twice.
	ErrPlanned = errors.New("delaystore: occurrence already planned")
)
