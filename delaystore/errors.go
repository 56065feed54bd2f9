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
	// ErrNotLeader is wrapped by the Commit of a replicated store on a
	// node that is not, or is no longer, the leader of its cluster. It is
	// no fault of the store: the write was refused (or, had it been
	// proposed, may still be committed by the next leader), and the
	// leader takes writes. See NotLeaderError.
	ErrNotLeader = errors.New("not the leader")
)

// NotLeaderError is an ErrNotLeader that names the leader the node knows
// of, for a reply that tells a client where writes go now.
type NotLeaderError struct {
	// Leader is the leader's id, or empty while the node knows of none
	// (an election is under way, or no quorum answers).
	Leader string
	// Err is the replication's own error, if any.
	Err error
}

func (e *NotLeaderError) Error() string {
	if e.Leader == "" {
		return "not the leader: no leader"
	}
	return "not the leader: leader is " + e.Leader
}

// Is makes errors.Is(err, ErrNotLeader) hold.
func (e *NotLeaderError) Is(target error) bool { return target == ErrNotLeader }

func (e *NotLeaderError) Unwrap() error { return e.Err }

// NotLeaderText is what a client is told when err wraps ErrNotLeader: the
// NotLeaderError's text if it has one, else ErrNotLeader's.
func NotLeaderText(err error) string {
	if nl, ok := errors.AsType[*NotLeaderError](err); ok {
		return nl.Error()
	}
	return ErrNotLeader.Error()
}

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
