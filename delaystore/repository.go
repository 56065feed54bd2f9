package delaystore

import (
	"log/slog"
	"time"

	"natsdelay/keys"
)

// RepositoryConfig configures a Repository. A zero field means the default.
type RepositoryConfig struct {
	// TimeBucket is the width of the bucket field of event keys. 0 (the
	// default) keys messages by their exact fire time in milliseconds.
	TimeBucket time.Duration
	// Logger receives the repository's logs; nil discards them.
	Logger *slog.Logger
}

// Scheduled is what Schedule did with one message.
type Scheduled struct {
	// Key is the new message's event key.
	Key keys.Key
	// Replaced is the key of the pending message with the same (subject,
	// client id) that this one replaced and deleted, when HasReplaced.
	Replaced    keys.Key
	HasReplaced bool
}

// Op is one write for Apply: a delete when Msg is nil, otherwise an update
// that rewrites the pending message under Key with Msg.
type Op struct {
	Key keys.Key
	Msg *StoredMessage
}

// Topic is one subject that has pending messages.
type Topic struct {
	Subject string
	Hash    uint64
	Pending uint64
}

// Repository is the event repository: it numbers messages, builds their keys
// and keeps the secondary indexes, always in the same batch as the messages.
// All writes go through it. It is safe for concurrent use.
type Repository struct{}

// OpenRepository opens the repository over s, reading the last event ID and
// the registry of subjects. It does not own s: closing s is the caller's job.
func OpenRepository(s Store, cfg RepositoryConfig) (*Repository, error) { panic("unimplemented") }

// Schedule stores msgs in one batch committed with sync, assigning each its
// event ID (msgs[i].EventId), and returns their keys in order. It replaces a
// pending message with the same (subject, client id), also one earlier in the
// same call. On error nothing is stored.
func (r *Repository) Schedule(msgs []*StoredMessage, sync SyncMode) ([]Scheduled, error) {
	panic("unimplemented")
}

// Get returns the pending message under k, or ErrNotFound.
func (r *Repository) Get(k keys.Key) (*StoredMessage, error) { panic("unimplemented") }

// Lookup returns the key of the pending message with (subject, clientID), or
// ErrNotFound.
func (r *Repository) Lookup(subject, clientID string) (keys.Key, error) { panic("unimplemented") }

// Apply commits ops in one batch. A delete of a missing key and an update of
// a missing key are dropped: an update never brings back a deleted message.
// applied[i] reports whether ops[i] changed a pending message.
func (r *Repository) Apply(ops []Op, sync SyncMode) (applied []bool, err error) {
	panic("unimplemented")
}

// ScanTopic yields the pending messages of topicHash with keys in [from,
// upper) in key order; a nil from means the topic's first key and a nil upper
// its last. The message is decoded for the caller and may be kept.
func (r *Repository) ScanTopic(topicHash uint64, from, upper []byte, yield func(keys.Key, *StoredMessage) bool) error {
	panic("unimplemented")
}

// FirstKey returns the first pending key of topicHash with one seek.
func (r *Repository) FirstKey(topicHash uint64) (k keys.Key, ok bool, err error) {
	panic("unimplemented")
}

// Topics lists the subjects with pending messages from the registry.
func (r *Repository) Topics() []Topic { panic("unimplemented") }

// Pending is the number of pending messages.
func (r *Repository) Pending() uint64 { panic("unimplemented") }

// PendingFor is the number of pending messages of subject.
func (r *Repository) PendingFor(subject string) uint64 { panic("unimplemented") }

// Expired returns up to limit keys of messages whose expiry is at or before
// nowNs, in expiry order, reading only expired index entries.
func (r *Repository) Expired(nowNs int64, limit int) ([]keys.Key, error) { panic("unimplemented") }

// LastID is the highest event ID assigned or observed.
func (r *Repository) LastID() uint64 { panic("unimplemented") }

// ObserveID makes later IDs greater than id (for IDs applied from elsewhere).
func (r *Repository) ObserveID(id uint64) { panic("unimplemented") }

// TimeBucket is the configured bucket width.
func (r *Repository) TimeBucket() time.Duration { panic("unimplemented") }
