package delaystore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/natsdelay/natsdelay/keys"
)

// RepositoryConfig configures a Repository. A zero field means the default.
type RepositoryConfig struct {
	// TimeBucket is the width of the bucket field of event keys: 0 (the
	// default) keys messages by their exact fire time in milliseconds, and
	// anything else must be a whole number of milliseconds. It is fixed for
	// the life of a store, because existing keys were built with it:
	// OpenRepository records it on first use and refuses a different one.
	TimeBucket time.Duration
	// Logger receives the repository's logs; nil discards them.
	Logger *slog.Logger
	// AdvanceHook, if not nil, is called by Advance at each AdvanceStage
	// of a batch that writes something, with the writers' lock held. It
	// is a test hook: crash tests use it to kill the process inside the
	// window between planning an occurrence and publishing it, which a
	// kill from outside hits only by chance. It must not call the
	// Repository.
	AdvanceHook func(AdvanceStage)
	// Now is the clock the message cache reads to tell an occurrence due
	// soon, which it keeps, from one due far ahead, which it does not
	// (see cacheHorizon); nil means time.Now.
	Now func() time.Time
}

// AdvanceStage is where in an Advance batch AdvanceHook is called.
type AdvanceStage int

const (
	// AdvanceBeforeCommit is after the batch is built, before its commit.
	AdvanceBeforeCommit AdvanceStage = iota + 1
	// AdvanceAfterCommit is right after the commit synced, before the
	// repository's counts take it in and before Advance returns.
	AdvanceAfterCommit
)

// DefaultRepositoryConfig returns the configuration that zero fields mean.
func DefaultRepositoryConfig() RepositoryConfig {
	return RepositoryConfig{
		TimeBucket:  0,
		Logger:      nil,
		AdvanceHook: nil,
		Now:         nil,
	}
}

// Validate reports every bad field at once, wrapped in ErrInvalidConfig.
func (c RepositoryConfig) Validate() error {
	var errs []error
	if c.TimeBucket < 0 {
		errs = append(errs, fmt.Errorf("%w: TimeBucket (%v) must be >= 0", ErrInvalidConfig, c.TimeBucket))
	} else if c.TimeBucket%time.Millisecond != 0 {
		errs = append(errs, fmt.Errorf("%w: TimeBucket (%v) must be a whole number of milliseconds", ErrInvalidConfig, c.TimeBucket))
	}
	return errors.Join(errs...)
}

// Scheduled is what Schedule did with one message.
type Scheduled struct {
	// Key is the new message's event key.
	Key keys.Key
	// Replaced is the key of the pending message with the same (subject,
	// client id) that this one replaced and deleted, when HasReplaced.
	Replaced    keys.Key
	HasReplaced bool
	// ReplacedOccurrence says the message replaced was an occurrence of a
	// recurring schedule (set by Schedule and ScheduleOnce).
	ReplacedOccurrence bool
}

// Op is one write for Apply: a delete when Msg is nil, otherwise an update
// that rewrites the pending message under Key with Msg.
type Op struct {
	Key keys.Key
	Msg *StoredMessage
	// Pending, on a delete, is the message under Key when the caller knows
	// it is still pending: no op before this one deleted it and nothing
	// can replace it (it has no client id). Apply then deletes it without
	// reading it first, which on a large store is most of a delete's cost.
	// It needs the subject and expiry time, the client id if any, and
	// WrittenOnce as read (see singledelete.go).
	// A wrong Pending corrupts the counts and indexes; when unsure, leave
	// it nil. It is not used with Dead.
	Pending *StoredMessage
	// Dead, on a delete, keeps the message as a dead letter (see
	// dead.go), written in the same batch as the delete: a crash leaves
	// the pending message or its dead letter, never both or neither.
	Dead *Dead
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
//
// # Indexes
//
// Next to each message (under its 24-byte event key) the repository keeps,
// in the same batch:
//
//   - the last event ID, so no ID is ever handed out twice, even across a
//     crash: the ID and the messages it numbers land together or not at all;
//   - a (subject, client id) index for replacing and cancelling by Delay-Id;
//   - an expiry index ordered by expiry time, so Expired reads only what has
//     expired;
//   - a registry of subjects with their exact pending counts, and its
//     totals, so opening reads two keys rather than every subject;
//   - a due index of every message in time order, and due counts per
//     second, so the dispatcher finds what is due, and INFO counts it,
//     without a seek or a count per subject (see dueindex.go);
//   - a schedule index with each recurring schedule's next occurrence, and
//     their count (see Advance and ScheduleRefs), and the same occurrences
//     in time order, so planning them ahead reads only them (see
//     recurindex.go).
//
// Every such key is longer than keys.Len bytes, and scans of events skip
// keys of any other length.
//
// # Writes
//
// Schedule and Apply are serialised: one runs at a time, including its
// commit. Reads (Get, Lookup, ScanTopic, ScanDue, ScanOccurrences,
// ScanTopics, PendingFor, CountDueAll, Expired) go straight to the Store
// and do not wait for writes; Pending, Subjects and LastID serve from
// memory and reflect only committed writes.
type Repository struct {
	s        Store
	log      *slog.Logger
	bucket   time.Duration
	bucketMs int64
	closed   atomic.Bool
	// advanceHook is RepositoryConfig.AdvanceHook.
	advanceHook func(AdvanceStage)
	// now is RepositoryConfig.Now, or time.Now.
	now func() time.Time

	// wmu serialises writers; it is held across the commit (see Schedule).
	// Lock order: wmu, then mu.
	wmu sync.Mutex
	// w is the writers' scratch space, reused between calls. wmu must be held.
	w scratch
	// counts are the per-key counts writers keep (see countCache). wmu
	// must be held.
	counts countCache
	// msgs are the messages written last, encoded (see msgCache); it has
	// its own lock, taken after wmu and never with mu.
	msgs msgCache
	// dedupSwept is the expiry, in the order of the duplicate window's
	// time entries, below which the last committed sweep left none (see
	// dedup.go); the next sweep starts there, not over the deletions of
	// those before it. wmu must be held.
	dedupSwept uint64
	// dedupNext, when dedupNextKnown, is an expiry (in the same order)
	// below which no time entry lies from dedupSwept on: until the
	// clock reaches it no record has expired, and a batch sweeps without
	// reading the store (see sweep). A sweep that reads to its end, or
	// past now, learns it; whatever writes a time entry lowers it to
	// that entry's expiry. wmu must be held.
	dedupNext      uint64
	dedupNextKnown bool
	// rewritten are the keys rewritten in this process from a value
	// written once, until their delete, and rewrittenPeak the most it
	// held since it was last made (see singledelete.go). wmu must be
	// held.
	rewritten     map[keys.Key]struct{}
	rewrittenPeak int
	// plannedHere are the occurrences this process planned in place, from
	// the commit of their plan to the commit of their delete (see
	// planned.go).
	plannedHere plannedSet

	mu struct {
		sync.Mutex
		// lastID is the highest event ID committed or observed.
		lastID uint64
		// reserved is the highest event ID handed to a batch, committed or
		// not; the next ID is reserved+1. It is never below lastID, and it
		// never goes back, so a failed commit skips IDs but never reuses them.
		reserved uint64
		// ceiling is the highest ID the store has durably leased (see
		// reserveIDs); reserved never passes it, and a reopened repository
		// starts above it.
		ceiling uint64
		// pending and subjects are the totals of the subject registry:
		// pending messages, and subjects with any. They are kept in the
		// store with it, read at open, and changed (holding wmu and mu)
		// only after a commit succeeds; as the only writer, a holder of
		// wmu may read them without mu. Per-subject counts stay in the
		// store, and at most maxCachedCounts of them in the count cache,
		// so memory does not grow with the number of subjects.
		pending  uint64
		subjects uint64
		// schedules is the number of recurring schedules with an
		// occurrence still to plan (see schedules.go).
		schedules uint64
		// dead is the number of dead letters kept (see dead.go).
		dead uint64
	}
}

// scratch is memory that writers reuse so a batch of messages does not
// allocate per message.
type scratch struct {
	val []byte
	key []byte
	// held is the writes a grouped batch holds back (see groupedbatch.go).
	held heldRuns
	// ref holds an event key written as a value. NB: a copy, because
	// slicing a key passed by value would move every caller's key to the
	// heap, occurrence or not.
	ref    []byte
	deltas map[string]int64
	// due is the change this batch makes to the due count of each second
	// (see dueindex.go).
	due map[int64]int64
	// schedules is the change this batch makes to the number of
	// schedules (see schedules.go).
	schedules int64
	// deadDeltas is the change this batch makes to the dead letters of
	// each subject (see dead.go).
	deadDeltas map[string]int64
	// rewrites are the message keys this batch rewrites (true) or deletes
	// (false), of those that matter to single deletes (see
	// singledelete.go).
	rewrites map[keys.Key]bool
	// inPlace are the occurrences this batch plans in place (see
	// planned.go).
	inPlace []keys.Key
	// applied is Apply's: the messages as its batch leaves them (see
	// applyOps), kept so that a commit does not make a map of its own.
	applied map[keys.Key]*StoredMessage
}

// maxKeptScratch bounds the scratch buffer kept between writes, so one huge
// message does not pin its size in memory for good.
const maxKeptScratch = 1 << 20

// OpenRepository opens the repository over s, reading the last event ID and
// the registry's totals; on a store written without the due index it
// builds it first, reading every message key once. It
// records cfg.TimeBucket in s on first use, and returns an error wrapping
// ErrInvalidConfig if s was used with a different one. It does not own s:
// closing s is the caller's job, after Close.
func OpenRepository(s Store, cfg RepositoryConfig) (*Repository, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Repository{
		s:        s,
		log:      log.With("component", "delaystore"),
		bucket:   cfg.TimeBucket,
		bucketMs: cfg.TimeBucket.Milliseconds(),
		// A test hook; nil in every real configuration.
		advanceHook: cfg.AdvanceHook,
		now:         cfg.Now,
		w:           scratch{deltas: make(map[string]int64), due: make(map[int64]int64), deadDeltas: make(map[string]int64), rewrites: make(map[keys.Key]bool)},
		counts:      newCountCache(),
		rewritten:   make(map[keys.Key]struct{}),
	}
	if r.now == nil {
		r.now = time.Now
	}
	r.msgs.init()

	v, err := s.Get([]byte(lastIDKey))
	switch {
	case errors.Is(err, ErrNotFound):
	case err != nil:
		return nil, fmt.Errorf("delaystore: open repository: read last id: %w", err)
	case len(v) != 8:
		return nil, fmt.Errorf("delaystore: open repository: last id is %d bytes, want 8: %w", len(v), ErrCorrupt)
	default:
		r.mu.lastID = binary.BigEndian.Uint64(v)
		r.mu.reserved = r.mu.lastID
	}
	// IDs up to the ceiling may have been seen by readers before the crash
	// that lost them, so none of them is handed out again.
	switch v, err := s.Get([]byte(idCeilingKey)); {
	case errors.Is(err, ErrNotFound):
	case err != nil:
		return nil, fmt.Errorf("delaystore: open repository: read id ceiling: %w", err)
	case len(v) != 8:
		return nil, fmt.Errorf("delaystore: open repository: id ceiling is %d bytes, want 8: %w", len(v), ErrCorrupt)
	default:
		r.mu.ceiling = binary.BigEndian.Uint64(v)
		r.mu.reserved = max(r.mu.reserved, r.mu.ceiling)
	}
	r.mu.ceiling = max(r.mu.ceiling, r.mu.reserved)

	if err := r.checkTimeBucket(); err != nil {
		return nil, err
	}

	if err := r.openIndexes(); err != nil {
		return nil, fmt.Errorf("delaystore: open repository: %w", err)
	}
	if r.mu.schedules, err = r.readScheduleCount(); err != nil {
		return nil, fmt.Errorf("delaystore: open repository: %w", err)
	}
	r.log.Debug("opened event repository", "last_id", r.mu.lastID, "subjects", r.mu.subjects, "pending", r.mu.pending)
	return r, nil
}

// checkTimeBucket records the bucket width on first use and refuses another
// one later: keys built with one width do not sort correctly among keys built
// with another.
func (r *Repository) checkTimeBucket() error {
	v, err := r.s.Get([]byte(timeBucketKey))
	switch {
	case errors.Is(err, ErrNotFound):
		b := r.s.NewBatch()
		defer b.Close()
		if err := b.Set([]byte(timeBucketKey), binary.BigEndian.AppendUint64(nil, uint64(r.bucketMs))); err != nil {
			return fmt.Errorf("delaystore: open repository: record time bucket: %w", err)
		}
		if err := b.Commit(Sync); err != nil {
			return fmt.Errorf("delaystore: open repository: record time bucket: %w", err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("delaystore: open repository: read time bucket: %w", err)
	case len(v) != 8:
		return fmt.Errorf("delaystore: open repository: time bucket is %d bytes, want 8: %w", len(v), ErrCorrupt)
	}
	if got := int64(binary.BigEndian.Uint64(v)); got != r.bucketMs {
		return fmt.Errorf("%w: TimeBucket (%v) differs from the %v this store was created with; existing keys depend on it",
			ErrInvalidConfig, r.bucket, time.Duration(got)*time.Millisecond)
	}
	return nil
}

// Close makes later calls return ErrClosed. It waits for a write in progress
// to finish, so once it returns the caller may close the Store. It does not
// close the Store. A second Close returns nil.
func (r *Repository) Close() error {
	r.wmu.Lock()
	defer r.wmu.Unlock()
	if r.closed.Swap(true) {
		return nil
	}
	// No ID above reserved was handed out, so the ceiling can come back
	// down to it and a clean restart goes on without a gap in the IDs.
	// It is only tidiness: if the write fails (the store failed, or this
	// node no longer leads a cluster), the next open starts higher.
	r.mu.Lock()
	reserved, ceiling := r.mu.reserved, r.mu.ceiling
	r.mu.Unlock()
	if reserved < ceiling {
		if err := r.writeCeiling(reserved); err != nil {
			r.log.Debug("id ceiling left as leased", "ceiling", ceiling, "reserved", reserved, "err", err)
		}
	}
	return nil
}

// CheckWritable commits, synced, a rewrite of a value the store already
// holds (the recorded time bucket): it changes nothing, and tells whether
// the store takes durable writes now. A service that reopened a store after
// a write to disk failed calls it before taking messages again, so that it
// does not accept them on a disk that still fails. It blocks while another
// write is in progress.
func (r *Repository) CheckWritable() error {
	r.wmu.Lock()
	defer r.wmu.Unlock()
	if r.closed.Load() {
		return ErrClosed
	}
	b := r.s.NewBatch()
	defer b.Close()
	if err := b.Set([]byte(timeBucketKey), binary.BigEndian.AppendUint64(nil, uint64(r.bucketMs))); err != nil {
		return fmt.Errorf("delaystore: check writable: %w", err)
	}
	if err := b.Commit(Sync); err != nil {
		return fmt.Errorf("delaystore: check writable: %w", err)
	}
	return nil
}

// Schedule stores msgs in one batch committed with sync and returns their
// keys in order. It assigns each message its event ID, setting
// msgs[i].EventId, and keys it by subject and fire time rounded up to the
// millisecond. A message with a client id replaces the pending message with
// the same (subject, client id), including one earlier in the same call: the
// later one wins, and the earlier one's Key is never stored.
//
// It returns an error wrapping ErrInvalidMessage, and stores nothing, if a
// subject is empty, a subject or client id contains a NUL byte or is not
// UTF-8, or a header is not UTF-8. On any error nothing is stored and the
// IDs it assigned are never used again.
// It blocks while another write is in progress and for the commit. The
// repository does not keep msgs.
func (r *Repository) Schedule(msgs []*StoredMessage, sync SyncMode) ([]Scheduled, error) {
	if len(msgs) == 0 {
		return nil, nil
	}
	if err := validateBatch(msgs); err != nil {
		return nil, err
	}

	// NB: wmu is held across the commit on purpose, against the usual rule of
	// not holding a lock across I/O. The last ID and the pending counts are
	// read-modify-write: the batch stores values computed from the state
	// before it, so a second batch built while the first is committing would
	// write stale counts and could publish a lower last ID. All writes go
	// through this one place (ingest through a group-commit writer, deletes
	// through one deleter), so there is little concurrency to lose, and
	// readers never take wmu.
	r.wmu.Lock()
	defer r.wmu.Unlock()
	if r.closed.Load() {
		return nil, ErrClosed
	}
	return r.scheduleLocked(msgs, sync, nil)
}

// validateBatch checks the subjects and client ids of msgs.
func validateBatch(msgs []*StoredMessage) error {
	// Messages in a batch mostly share a subject, so work per subject is
	// done once per run of equal subjects, here and in scheduleLocked.
	for i, m := range msgs {
		if i == 0 || m.GetSubject() != msgs[i-1].GetSubject() {
			if err := validateSubject(m.GetSubject()); err != nil {
				return fmt.Errorf("delaystore: schedule message %d of %d: %w", i+1, len(msgs), err)
			}
		}
		if err := validateName("client id", m.GetClientId()); err != nil {
			return fmt.Errorf("delaystore: schedule message %d of %d: %w", i+1, len(msgs), err)
		}
	}
	return nil
}

// scheduleLocked is Schedule, with wmu held and msgs checked; extra, if
// not nil, adds its own writes to the batch before the counts are set,
// told the keys of msgs.
func (r *Repository) scheduleLocked(msgs []*StoredMessage, sync SyncMode, extra func(Batch, []Scheduled) error) ([]Scheduled, error) {
	if err := r.resolveDebounce(msgs); err != nil {
		return nil, err
	}
	first, last, err := r.reserveIDs(len(msgs))
	if err != nil {
		return nil, err
	}
	out := r.assignKeys(msgs, first)

	b := grouped(r.s.NewBatch(), &r.w.held)
	defer b.Close()
	r.resetScratch()
	deltas := r.w.deltas

	superseded, err := r.resolveReplacements(b, deltas, msgs, out)
	if err != nil {
		return nil, err
	}
	if err := r.writeScheduled(b, deltas, msgs, out, superseded); err != nil {
		return nil, err
	}
	deadTotal := r.mu.dead // NB: only wmu's holder changes it
	if extra != nil {
		if err := extra(b, out); err != nil {
			return nil, fmt.Errorf("delaystore: schedule batch of %d: %w", len(msgs), err)
		}
		var err error
		if deadTotal, err = r.setDeadCounts(b); err != nil {
			return nil, fmt.Errorf("delaystore: schedule batch of %d: %w", len(msgs), err)
		}
	}

	counts, err := r.setCounts(b, deltas)
	if err != nil {
		return nil, fmt.Errorf("delaystore: schedule batch of %d: %w", len(msgs), err)
	}
	if err := b.Set([]byte(lastIDKey), binary.BigEndian.AppendUint64(r.w.val[:0], last)); err != nil {
		return nil, fmt.Errorf("delaystore: schedule batch of %d: record last id: %w", len(msgs), err)
	}
	if err := r.leaseIDs(); err != nil {
		return nil, fmt.Errorf("delaystore: schedule batch of %d: %w", len(msgs), err)
	}
	if err := b.Commit(sync); err != nil {
		return nil, fmt.Errorf("delaystore: schedule batch of %d: commit: %w", len(msgs), err)
	}
	r.committed(counts, last)
	if extra != nil {
		r.committedDead(deadTotal)
	}
	r.trimScratch()
	return out, nil
}

// assignKeys numbers msgs from first on, setting their event ids, and
// returns their keys.
func (r *Repository) assignKeys(msgs []*StoredMessage, first uint64) []Scheduled {
	out := make([]Scheduled, len(msgs))
	var hash uint64
	for i, m := range msgs {
		m.EventId = first + uint64(i)
		// keys.Make, with the subject's hash reused along a run.
		if i == 0 || m.Subject != msgs[i-1].Subject {
			hash = keys.TopicHash(m.Subject)
		}
		out[i].Key = keys.New(hash, keys.Bucket(keys.FireAtMs(m.FireAtNs), r.bucketMs), m.EventId)
	}
	return out
}

// resolveReplacements adds to b the removal of the pending messages that
// msgs replace by client id, records in out what each message replaces,
// and returns which of msgs a later one in the same call replaces (nil if
// none has a client id). wmu must be held.
//
// Replacements are resolved before anything is written, so a message
// replaced later in the same call is never written at all: the batch then
// never sets and deletes the same key.
func (r *Repository) resolveReplacements(b Batch, deltas map[string]int64, msgs []*StoredMessage, out []Scheduled) ([]bool, error) {
	var superseded []bool
	var latest map[string]int // client id index key -> index in msgs
	for i, m := range msgs {
		if m.ClientId == "" {
			continue
		}
		if latest == nil {
			latest = make(map[string]int)
			superseded = make([]bool, len(msgs))
		}
		ck := string(appendClientIDKey(r.w.key[:0], m.Subject, m.ClientId))
		if j, ok := latest[ck]; ok {
			out[i].Replaced, out[i].HasReplaced = out[j].Key, true
			out[i].ReplacedOccurrence = msgs[j].Recurrence != nil
			superseded[j] = true
		} else {
			old, occurrence, ok, err := r.replacePending(b, deltas, []byte(ck))
			if err != nil {
				return nil, fmt.Errorf("delaystore: schedule batch of %d: replace client id %q of %q: %w", len(msgs), keys.Clip(m.ClientId), keys.Clip(m.Subject), err)
			}
			out[i].Replaced, out[i].HasReplaced, out[i].ReplacedOccurrence = old, ok, occurrence
		}
		latest[ck] = i
	}
	return superseded, nil
}

// writeScheduled adds to b each of msgs not superseded, under its key in
// out, with its index entries, and adds to deltas the messages it writes
// per subject. wmu must be held.
func (r *Repository) writeScheduled(b Batch, deltas map[string]int64, msgs []*StoredMessage, out []Scheduled, superseded []bool) error {
	var run int64 // messages of subject runSubject not yet in deltas
	var runSubject string
	for i, m := range msgs {
		if superseded != nil && superseded[i] {
			continue
		}
		if err := r.writeOneScheduled(b, &out[i].Key, m); err != nil {
			return fmt.Errorf("delaystore: schedule batch of %d: %w", len(msgs), err)
		}
		if m.Subject != runSubject {
			if run != 0 {
				deltas[runSubject] += run
			}
			runSubject, run = m.Subject, 0
		}
		run++
	}
	if run != 0 {
		deltas[runSubject] += run
	}
	return nil
}

// writeOneScheduled adds to b the new message m under key, with its due,
// client id, expiry and schedule index entries. wmu must be held.
func (r *Repository) writeOneScheduled(b Batch, key *keys.Key, m *StoredMessage) error {
	if m.Recurrence != nil && m.Recurrence.Name == "" {
		m.Recurrence.Name = scheduleName(m.Recurrence, *key)
	}
	if err := r.setMessage(b, key, m, true); err != nil {
		return err
	}
	if err := r.indexDue(b, key); err != nil {
		return err
	}
	if m.ClientId != "" {
		r.w.key = appendClientIDKey(r.w.key[:0], m.Subject, m.ClientId)
		if err := b.Set(r.w.key, key[:]); err != nil {
			return fmt.Errorf("index client id: %w", err)
		}
	}
	if m.ExpireAtNs != 0 {
		r.w.key = appendExpiryKey(r.w.key[:0], m.ExpireAtNs, *key)
		if err := b.Set(r.w.key, nil); err != nil {
			return fmt.Errorf("index expiry: %w", err)
		}
	}
	return r.indexSchedule(b, *key, m)
}

// idLease is how many IDs one durable write of the ceiling covers: one
// extra synced commit per 65,536 messages.
const idLease = 1 << 16

// reserveIDs hands out n consecutive IDs and returns the first and the last.
// The batch that uses them must call leaseIDs before it commits. wmu must
// be held.
func (r *Repository) reserveIDs(n int) (first, last uint64, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mu.reserved > math.MaxUint64-uint64(n) {
		return 0, 0, fmt.Errorf("%w: last id %d, want %d more", ErrIDsExhausted, r.mu.reserved, n)
	}
	first = r.mu.reserved + 1
	r.mu.reserved += uint64(n)
	return first, r.mu.reserved, nil
}

// leaseIDs makes sure every ID reserved so far is below the durable
// ceiling, raising it first if not. wmu must be held.
//
// The last ID is written in the same batch as the messages it numbers, but
// that is not enough to never reuse one: a commit is readable before it is
// durable (Pebble publishes a batch before its WAL fsync completes), so the
// dispatcher can deliver a message whose batch a crash then loses, and the
// reopened repository would number the next message the same. So IDs are
// leased: before a batch with IDs above the ceiling commits, the ceiling is
// raised in a synced commit of its own, and a reopened repository starts
// above it.
func (r *Repository) leaseIDs() error {
	r.mu.Lock()
	reserved, ceiling := r.mu.reserved, r.mu.ceiling
	r.mu.Unlock()
	if reserved <= ceiling {
		return nil
	}
	// wmu, held by the caller, keeps other writers out, so only this
	// goroutine moves the ceiling; mu is not held across the I/O.
	next := reserved + min(idLease, math.MaxUint64-reserved)
	if err := r.writeCeiling(next); err != nil {
		return err
	}
	r.mu.Lock()
	r.mu.ceiling = next
	r.mu.Unlock()
	return nil
}

// writeCeiling durably records ceiling as the highest ID that may be handed
// out. wmu must be held.
func (r *Repository) writeCeiling(ceiling uint64) error {
	b := r.s.NewBatch()
	defer b.Close()
	if err := b.Set([]byte(idCeilingKey), binary.BigEndian.AppendUint64(nil, ceiling)); err != nil {
		return fmt.Errorf("delaystore: lease ids: %w", err)
	}
	if err := b.Commit(Sync); err != nil {
		return fmt.Errorf("delaystore: lease ids: %w", err)
	}
	return nil
}

// replacePending adds to b the deletion of the pending message indexed under
// the client id key ck, if there is one, and returns its key and whether
// it is an occurrence of a recurring schedule. The caller overwrites the
// index entry itself. wmu must be held.
func (r *Repository) replacePending(b Batch, deltas map[string]int64, ck []byte) (old keys.Key, occurrence, ok bool, err error) {
	v, err := r.s.Get(ck)
	if errors.Is(err, ErrNotFound) {
		return keys.Key{}, false, false, nil
	}
	if err != nil {
		return keys.Key{}, false, false, fmt.Errorf("read index: %w", err)
	}
	old, err = keys.Decode(v)
	if err != nil {
		return keys.Key{}, false, false, fmt.Errorf("index entry: %w: %w", ErrCorrupt, err)
	}
	m, err := r.get(old)
	if errors.Is(err, ErrNotFound) {
		// The index and its message change in one batch, so this means
		// the store was changed behind the repository's back. The entry is
		// about to be overwritten; there is nothing to replace.
		r.log.Warn("client id index points at a missing message", "tag", old.Tag())
		return keys.Key{}, false, false, nil
	}
	if err != nil {
		return keys.Key{}, false, false, err
	}
	if err := r.deleteMessage(b, &old, m, false); err != nil {
		return keys.Key{}, false, false, err
	}
	deltas[m.Subject]--
	return old, m.Recurrence != nil, true, nil
}

// setMessage adds the message's value to b; once says k never held a value
// before (see singledelete.go). k is a pointer so that the key passed to
// the Batch interface does not escape to the heap once per message. wmu
// must be held.
func (r *Repository) setMessage(b Batch, k *keys.Key, m *StoredMessage, once bool) error {
	var err error
	r.w.val, err = appendMessage(r.w.val[:0], m, m.EventId, once)
	if err != nil {
		return fmt.Errorf("encode %v: %w", k, err)
	}
	if err := b.Set(k[:], r.w.val); err != nil {
		return fmt.Errorf("write %v: %w", k, err)
	}
	r.msgs.changed(k, r.w.val, r.readBack(m))
	return nil
}

// cacheHorizon is how far ahead of now an occurrence may be due for the
// message cache to keep it once written. The reads it serves come when
// the occurrence falls due: the planner's, up to a second before (see
// dispatch.Config.PlanAhead), the pass's and the delete's after the ACK.
// A value written further ahead is seldom still there by then: a service
// busy enough for the reads to matter turns the cache over within
// seconds (it keeps the last 65,536 values, and 10,000 occurrences a
// second write as many), and a quiet one drops it at the idle release
// (10 s after a burst, see bridge/idle). Kept anyway, the occurrences due
// far ahead that a burst of schedules writes (100,000 due next January
// hold 22 MiB) would only stay in the heap until then. A minute keeps
// every occurrence of a schedule of a minute or less, whose reads are the
// ones that add up, and costs any other one a point read of the store
// when it falls due.
const cacheHorizon = time.Minute

// readBack reports whether the service reads m back by its key soon after
// it is written, so that the message cache keeps it: an occurrence of a
// recurring schedule due within cacheHorizon is read to plan it, to
// publish it and to delete it, and a message with a client id is read to
// replace or delete it. A plain message is published from the due scan
// and deleted without a read (see Op.Pending); keeping a copy of each
// would cost more than it saves.
func (r *Repository) readBack(m *StoredMessage) bool {
	if m.ClientId != "" && m.Recurrence == nil {
		return true
	}
	return m.Recurrence != nil && m.FireAtNs <= r.now().Add(cacheHorizon).UnixNano()
}

// deleteMessage adds to b the deletion of m, stored under k, and of its index
// entries; withClientID says whether to delete its client id entry too (not
// when the entry is about to be overwritten). wmu must be held.
func (r *Repository) deleteMessage(b Batch, k *keys.Key, m *StoredMessage, withClientID bool) error {
	del := b.Delete
	if r.singleDeletable(k, m) {
		del = b.SingleDelete
	}
	r.noteDelete(*k)
	if err := del(k[:]); err != nil {
		return fmt.Errorf("delete %v: %w", k, err)
	}
	r.msgs.changed(k, nil, false)
	if err := r.unindexDue(del, k); err != nil {
		return err
	}
	if m.ExpireAtNs != 0 {
		r.w.key = appendExpiryKey(r.w.key[:0], m.ExpireAtNs, *k)
		if err := b.Delete(r.w.key); err != nil {
			return fmt.Errorf("delete expiry entry of %v: %w", k, err)
		}
	}
	if err := r.unindexSchedule(b, *k, m); err != nil {
		return fmt.Errorf("delete schedule entry of %v: %w", k, err)
	}
	if withClientID && m.ClientId != "" {
		// The entry points at k, because a message and its entry change
		// together and replacing a message deletes it.
		r.w.key = appendClientIDKey(r.w.key[:0], m.Subject, m.ClientId)
		if err := b.Delete(r.w.key); err != nil {
			return fmt.Errorf("delete client id entry of %v: %w", k, err)
		}
	}
	return nil
}

// totals are the registry's totals as a batch leaves them.
type totals struct{ pending, subjects uint64 }

// setCounts adds to b the registry entries of every subject in deltas, the
// due counts, the totals and the schedule count this batch changes, and
// returns the new totals. It reads each subject's count from the count
// cache or the store: with wmu held nothing else writes it, so either has
// the count as the last commit left it. wmu must be held.
func (r *Repository) setCounts(b Batch, deltas map[string]int64) (totals, error) {
	pending, subjects := int64(r.mu.pending), int64(r.mu.subjects)
	for subject, d := range deltas {
		if d == 0 {
			continue
		}
		r.w.key = appendTopicKey(r.w.key[:0], subject)
		c, err := r.count(r.w.key)
		if err != nil {
			return totals{}, fmt.Errorf("read pending count of %q: %w", keys.Clip(subject), err)
		}
		cur := int64(c)
		n := cur + d
		if n < 0 {
			// NB: deletes are applied only to messages that exist, so this
			// means the registry disagrees with the data. Do not wrap around.
			r.log.Error("pending count would go negative", "subject", subject, "count", cur, "delta", d)
			n = 0
		}
		if err := r.writeCount(b, r.w.key, uint64(n)); err != nil {
			return totals{}, fmt.Errorf("write pending count of %q: %w", keys.Clip(subject), err)
		}
		pending += n - cur
		switch {
		case cur == 0 && n > 0:
			subjects++
		case cur > 0 && n == 0:
			subjects--
		}
	}
	t := totals{pending: uint64(max(pending, 0)), subjects: uint64(max(subjects, 0))}
	if t.pending != r.mu.pending {
		if err := b.Set([]byte(pendingTotalKey), binary.BigEndian.AppendUint64(r.w.val[:0], t.pending)); err != nil {
			return totals{}, fmt.Errorf("write pending total: %w", err)
		}
	}
	if t.subjects != r.mu.subjects {
		if err := b.Set([]byte(subjectsTotalKey), binary.BigEndian.AppendUint64(r.w.val[:0], t.subjects)); err != nil {
			return totals{}, fmt.Errorf("write subjects total: %w", err)
		}
	}
	if err := r.setDueCounts(b); err != nil {
		return totals{}, err
	}
	if err := r.setScheduleCount(b); err != nil {
		return totals{}, err
	}
	return t, nil
}

// committed publishes the effect of a committed batch to the in-memory
// state: the new totals, and lastID if the batch numbered messages (0 if
// not). wmu must be held.
func (r *Repository) committed(t totals, lastID uint64) {
	r.counts.committed()
	r.msgs.committed()
	r.plannedHere.committed(r.w.inPlace, r.w.rewrites)
	r.committedRewrites()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.mu.pending, r.mu.subjects = t.pending, t.subjects
	if lastID > r.mu.lastID {
		r.mu.lastID = lastID
	}
	r.mu.schedules = uint64(max(int64(r.mu.schedules)+r.w.schedules, 0))
	r.w.schedules = 0
}

// resetScratch clears what a batch accumulates in scratch space, at the
// start of every write: a batch whose commit failed must leave nothing
// behind for the next one. wmu must be held.
func (r *Repository) resetScratch() {
	r.counts.forgetUncommitted()
	r.msgs.forgetUncommitted()
	clear(r.w.deltas)
	clear(r.w.due)
	clear(r.w.deadDeltas)
	clear(r.w.rewrites)
	r.w.inPlace = r.w.inPlace[:0]
	r.w.schedules = 0
}

// trimScratch drops scratch buffers that grew too large to keep. wmu must be
// held.
func (r *Repository) trimScratch() {
	if cap(r.w.val) > maxKeptScratch {
		r.w.val = nil
	}
	if cap(r.w.key) > maxKeptScratch {
		r.w.key = nil
	}
	r.w.held.trim(maxKeptScratch)
	// A map keeps its buckets when cleared, so one that a batch of
	// many subjects grew is dropped rather than kept for good.
	if len(r.w.deltas) > maxKeptDeltas {
		r.w.deltas = make(map[string]int64)
	}
	clear(r.w.deltas)
	clear(r.w.due)
	r.w.schedules = 0
}

// maxKeptDeltas bounds the subjects whose count changes the scratch map
// keeps room for between writes.
const maxKeptDeltas = 1024

// Apply commits ops in one batch: deletes (Msg nil) and updates, such as a
// new attempt count. Each op is applied to the message as left by the ops
// before it. An op on a key that is not pending is dropped, so an update
// never brings back a deleted message and deleting twice changes the counts
// once. applied[i] reports whether ops[i] changed a pending message.
//
// A delete also removes the message's index entries. An update keeps them
// in step: a changed expiry time moves its expiry entry. An update that
// would change what the indexes are built from (the subject, the client id,
// a non-zero event id other than the key's, or whether it is an occurrence
// of a recurring schedule still to plan), or that does not encode, is
// a caller's bug: it is dropped and logged, not failed, so one bad op cannot
// block a batch of deletes that its caller retries. Apply does not modify or
// keep Msg; it stores it with the key's event id.
//
// On error nothing is applied. It blocks while another write is in progress
// and for the commit.
func (r *Repository) Apply(ops []Op, sync SyncMode) (applied []bool, err error) {
	if len(ops) == 0 {
		return nil, nil
	}
	r.wmu.Lock() // held across the commit: see the NB in Schedule.
	defer r.wmu.Unlock()
	if r.closed.Load() {
		return nil, ErrClosed
	}

	b := grouped(r.s.NewBatch(), &r.w.held)
	defer b.Close()
	r.resetScratch()
	deltas := r.w.deltas
	applied = make([]bool, len(ops))
	found, dead, err := r.applyOps(b, deltas, ops, applied)
	if err != nil {
		return nil, err
	}
	if !found {
		return applied, nil
	}

	counts, err := r.setCounts(b, deltas)
	if err != nil {
		return nil, fmt.Errorf("delaystore: apply batch of %d: %w", len(ops), err)
	}
	deadTotal := r.mu.dead // NB: only wmu's holder changes it
	if dead {
		if deadTotal, err = r.setDeadCounts(b); err != nil {
			return nil, fmt.Errorf("delaystore: apply batch of %d: %w", len(ops), err)
		}
	}
	if err := b.Commit(sync); err != nil {
		return nil, fmt.Errorf("delaystore: apply batch of %d: commit: %w", len(ops), err)
	}
	r.committed(counts, 0)
	r.committedDead(deadTotal)
	r.trimScratch()
	return applied, nil
}

// applyOps adds ops to b, and their count changes to deltas, setting
// applied[i] for each op that changes a pending message. It reports
// whether any op found a pending message, and whether any kept one as
// dead. wmu must be held.
func (r *Repository) applyOps(b Batch, deltas map[string]int64, ops []Op, applied []bool) (found, dead bool, err error) {
	// state holds the messages as this batch leaves them, nil once deleted,
	// so later ops on the same key see earlier ones.
	if r.w.applied == nil {
		r.w.applied = make(map[keys.Key]*StoredMessage)
	}
	state := r.w.applied
	defer func() {
		// As trimScratch does with deltas: a huge batch's map is let go.
		if len(state) > maxKeptDeltas {
			r.w.applied = nil
		}
		clear(state)
	}()
	for i, op := range ops {
		cur, err := r.applyTarget(&ops[i], state)
		if err != nil {
			return false, false, fmt.Errorf("delaystore: apply op %d of %d: %w", i+1, len(ops), err)
		}
		if cur == nil {
			continue
		}
		found = true
		if op.Msg == nil {
			if err := r.applyDelete(b, &ops[i], cur); err != nil {
				return false, false, fmt.Errorf("delaystore: apply op %d of %d: %w", i+1, len(ops), err)
			}
			if op.Dead != nil {
				dead = true
			}
			deltas[cur.Subject]--
			state[op.Key] = nil
			applied[i] = true
			continue
		}
		ok, err := r.update(b, &ops[i], cur)
		if err != nil {
			return false, false, fmt.Errorf("delaystore: apply op %d of %d: %w", i+1, len(ops), err)
		}
		if ok {
			state[op.Key] = op.Msg
			applied[i] = true
		}
	}
	return found, dead, nil
}

// applyTarget returns the message pending under op.Key as the ops before
// it in the batch leave it (state), or nil if none is. A plain delete
// takes the message its caller read, op.Pending, rather than reading it
// again. wmu must be held.
func (r *Repository) applyTarget(op *Op, state map[keys.Key]*StoredMessage) (*StoredMessage, error) {
	if cur, seen := state[op.Key]; seen {
		return cur, nil
	}
	if op.Msg == nil && op.Pending != nil && op.Dead == nil {
		return op.Pending, nil
	}
	m, err := r.get(op.Key)
	switch {
	case errors.Is(err, ErrNotFound):
		return nil, nil
	case err != nil:
		return nil, err
	}
	return m, nil
}

// applyDelete adds to b the delete of cur, pending under op.Key, with its
// index entries, keeping it as dead if op.Dead says so. wmu must be held.
func (r *Repository) applyDelete(b Batch, op *Op, cur *StoredMessage) error {
	if err := r.deleteMessage(b, &op.Key, cur, true); err != nil {
		return err
	}
	if op.Dead != nil {
		return r.keepDead(b, op.Key, cur, op.Dead)
	}
	return nil
}

// update adds to b the rewrite of cur, pending under op.Key, with op.Msg,
// and reports whether it did; it drops an invalid update (see Apply). wmu
// must be held.
func (r *Repository) update(b Batch, op *Op, cur *StoredMessage) (bool, error) {
	m := op.Msg
	id := op.Key.EventID()
	var bad string
	switch {
	case m.Subject != cur.Subject:
		bad = fmt.Sprintf("changes subject %q to %q", keys.Clip(cur.Subject), keys.Clip(m.Subject))
	case m.ClientId != cur.ClientId:
		bad = fmt.Sprintf("changes client id %q to %q", keys.Clip(cur.ClientId), keys.Clip(m.ClientId))
	case m.EventId != 0 && m.EventId != id:
		bad = fmt.Sprintf("has event id %d, want %d (the key's) or 0", m.EventId, id)
	case toPlan(m) != toPlan(cur) || (toPlan(m) && m.Recurrence.Name != cur.Recurrence.Name):
		// NB: planning goes through Advance, which stores the successor
		// in the same batch; an update that plans an occurrence, or
		// unplans one, would end its schedule or plan it twice.
		bad = fmt.Sprintf("changes whether it is an occurrence still to plan, or of which schedule (planned %v to %v)", cur.GetRecurrence().GetPlanned(), m.GetRecurrence().GetPlanned())
	}
	if bad == "" {
		var err error
		r.w.val, err = appendMessage(r.w.val[:0], m, id, false)
		if err != nil {
			bad = "does not encode: " + err.Error()
		}
	}
	if bad != "" {
		r.log.Error("dropping invalid update", "tag", op.Key.Tag(), "event_id", id, "err", bad)
		return false, nil
	}

	// Compare as indexed, so the batch never deletes and sets the same key.
	if (m.ExpireAtNs != 0) != (cur.ExpireAtNs != 0) || expiryOrder(m.ExpireAtNs) != expiryOrder(cur.ExpireAtNs) {
		if cur.ExpireAtNs != 0 {
			r.w.key = appendExpiryKey(r.w.key[:0], cur.ExpireAtNs, op.Key)
			if err := b.Delete(r.w.key); err != nil {
				return false, fmt.Errorf("move expiry entry of %v: %w", op.Key, err)
			}
		}
		if m.ExpireAtNs != 0 {
			r.w.key = appendExpiryKey(r.w.key[:0], m.ExpireAtNs, op.Key)
			if err := b.Set(r.w.key, nil); err != nil {
				return false, fmt.Errorf("move expiry entry of %v: %w", op.Key, err)
			}
		}
	}
	if err := b.Set(op.Key[:], r.w.val); err != nil {
		return false, fmt.Errorf("write %v: %w", op.Key, err)
	}
	r.noteRewrite(op.Key, cur)
	r.msgs.changed(&op.Key, r.w.val, r.readBack(op.Msg))
	return true, nil
}

// Get returns the pending message under k, or an error wrapping ErrNotFound.
// The message is the caller's. It returns an error wrapping ErrCorrupt if the
// stored value cannot be decoded.
func (r *Repository) Get(k keys.Key) (*StoredMessage, error) {
	if r.closed.Load() {
		return nil, ErrClosed
	}
	m, _, err := r.read(k, false)
	if err != nil {
		return nil, fmt.Errorf("delaystore: get %v: %w", k, err)
	}
	return m, nil
}

// Has reports whether a message is pending under k: Get without
// decoding it, for a caller that needs only to know whether it is gone.
func (r *Repository) Has(k keys.Key) (bool, error) {
	if r.closed.Load() {
		return false, ErrClosed
	}
	if _, ok := r.msgs.lookup(&k); ok {
		return true, nil
	}
	_, err := r.s.Get(k[:])
	switch {
	case errors.Is(err, ErrNotFound):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("delaystore: has %v: %w", k, err)
	}
	return true, nil
}

// get reads and decodes the message under k, from the cache of messages
// written last or else the store. wmu must be held.
func (r *Repository) get(k keys.Key) (*StoredMessage, error) {
	m, _, err := r.read(k, true)
	return m, err
}

// getSized is get that also returns the size of the message as stored,
// encoded. wmu must be held.
func (r *Repository) getSized(k keys.Key) (*StoredMessage, int, error) {
	return r.read(k, true)
}

// read is get, or with locked false a read without wmu (see
// resolvePlanned).
func (r *Repository) read(k keys.Key, locked bool) (*StoredMessage, int, error) {
	v, cached := r.msgs.lookup(&k)
	if !cached {
		var err error
		if v, err = r.s.Get(k[:]); err != nil {
			return nil, 0, err
		}
	}
	m, err := unmarshalMessage(v)
	if err != nil {
		return nil, 0, fmt.Errorf("decode %v: %w: %w", k, ErrCorrupt, err)
	}
	return r.resolvePlanned(&k, m, len(v), locked, cached)
}

// newBatch starts a batch with room for about size bytes if the store
// can (BatchSizer), else an ordinary one.
func (r *Repository) newBatch(size int) Batch {
	if bs, ok := r.s.(BatchSizer); ok && size > 0 {
		return bs.NewBatchSize(size)
	}
	return r.s.NewBatch()
}

// Lookup returns the key of the pending message with (subject, clientID), or
// an error wrapping ErrNotFound. It returns an error wrapping
// ErrInvalidMessage for an empty subject or client id, or one with a NUL byte.
func (r *Repository) Lookup(subject, clientID string) (keys.Key, error) {
	if r.closed.Load() {
		return keys.Key{}, ErrClosed
	}
	if err := validateSubject(subject); err != nil {
		return keys.Key{}, fmt.Errorf("delaystore: lookup: %w", err)
	}
	if clientID == "" {
		return keys.Key{}, fmt.Errorf("delaystore: lookup: %w: empty client id", ErrInvalidMessage)
	}
	if err := validateName("client id", clientID); err != nil {
		return keys.Key{}, fmt.Errorf("delaystore: lookup: %w", err)
	}
	v, err := r.s.Get(appendClientIDKey(nil, subject, clientID))
	if err != nil {
		return keys.Key{}, fmt.Errorf("delaystore: lookup client id %q of %q: %w", keys.Clip(clientID), keys.Clip(subject), err)
	}
	k, err := keys.Decode(v)
	if err != nil {
		return keys.Key{}, fmt.Errorf("delaystore: lookup client id %q of %q: %w: %w", keys.Clip(clientID), keys.Clip(subject), ErrCorrupt, err)
	}
	return k, nil
}

// ScanTopic yields the pending messages of topicHash with keys in [from,
// upper) in key order, on one consistent snapshot, until yield returns false;
// a nil from means the topic's first key and a nil upper its last, and
// bounds outside the topic are narrowed to it. Each message is decoded for
// the caller and may be kept. It returns an error wrapping ErrCorrupt if a
// value cannot be decoded, after yielding the messages before it.
//
// Two subjects whose hashes collide share a topic; compare the message's
// Subject when that matters.
func (r *Repository) ScanTopic(topicHash uint64, from, upper []byte, yield func(keys.Key, *StoredMessage) bool) error {
	if r.closed.Load() {
		return ErrClosed
	}
	lo := keys.TopicLowerBound(topicHash)
	if from != nil && bytes.Compare(from, lo) > 0 {
		lo = from
	}
	hi := keys.TopicUpperBound(topicHash)
	if upper != nil && (hi == nil || bytes.Compare(upper, hi) < 0) {
		hi = upper
	}
	if hi != nil && bytes.Compare(lo, hi) >= 0 {
		return nil
	}
	err := r.scanMessages(IterOptions{LowerBound: lo, UpperBound: hi}, nil, yield)
	if err != nil {
		return fmt.Errorf("delaystore: scan topic %016x: %w", topicHash, err)
	}
	return nil
}

// scanMessages yields the pending messages in opts' bounds whose topic
// hash keep accepts (every one when keep is nil), decoded, in key order,
// until yield returns false. Keys that are not event keys are passed by.
func (r *Repository) scanMessages(opts IterOptions, keep func(topicHash uint64) bool, yield func(keys.Key, *StoredMessage) bool) error {
	var decodeErr error
	err := r.s.Scan(opts, func(kb, v []byte) bool {
		if len(kb) != keys.Len {
			return true
		}
		k := keys.Key(kb)
		if keep != nil && !keep(k.TopicHash()) {
			return true
		}
		// unmarshalMessage copies bytes and strings out of v, so the
		// message outlives this call even though v does not.
		m, err := unmarshalMessage(v)
		if err != nil {
			decodeErr = fmt.Errorf("decode %v: %w: %w", k, ErrCorrupt, err)
			return false
		}
		m, _, err = r.resolvePlanned(&k, m, 0, false, false)
		if err != nil {
			decodeErr = err
			return false
		}
		return yield(k, m)
	})
	if err == nil {
		err = decodeErr
	}
	return err
}

// FirstKey returns the first pending key of topicHash with one seek; ok is
// false when the topic has none.
func (r *Repository) FirstKey(topicHash uint64) (k keys.Key, ok bool, err error) {
	if r.closed.Load() {
		return keys.Key{}, false, ErrClosed
	}
	opts := IterOptions{LowerBound: keys.TopicLowerBound(topicHash), UpperBound: keys.TopicUpperBound(topicHash)}
	err = r.s.Scan(opts, func(kb, _ []byte) bool {
		if len(kb) != keys.Len {
			return true
		}
		k, ok = keys.Key(kb), true
		return false
	})
	if err != nil {
		return keys.Key{}, false, fmt.Errorf("delaystore: first key of topic %016x: %w", topicHash, err)
	}
	return k, ok, nil
}

// CountDue counts the pending messages of topicHash by key alone, without
// reading or decoding them: n[i] is how many are due at dueMs[i] (Unix
// milliseconds), that is, whose time bucket starts at or before it, so the
// counts are exact to the time bucket. dueMs must be ascending; the scan
// reads the keys up to the bucket of the last one.
func (r *Repository) CountDue(topicHash uint64, dueMs ...int64) ([]uint64, error) {
	if r.closed.Load() {
		return nil, ErrClosed
	}
	n := make([]uint64, len(dueMs))
	if len(dueMs) == 0 {
		return n, nil
	}
	opts := IterOptions{LowerBound: keys.TopicLowerBound(topicHash), UpperBound: keys.DueUpperBound(topicHash, dueMs[len(dueMs)-1], r.bucketMs)}
	err := r.s.Scan(opts, func(kb, _ []byte) bool {
		if len(kb) != keys.Len {
			return true
		}
		at := keys.BucketStartMs(keys.Key(kb).Bucket(), r.bucketMs)
		for i := len(dueMs) - 1; i >= 0 && at <= dueMs[i]; i-- {
			n[i]++
		}
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("delaystore: count due of topic %016x: %w", topicHash, err)
	}
	return n, nil
}

// ScanTopics yields the subjects with pending messages and their counts,
// in subject order, from the first at or after from ("" for all), until
// yield returns false. It reads the subject registry in the store, on one
// consistent snapshot. Subjects hold no NUL byte, so from+"\x00" starts
// just after from.
func (r *Repository) ScanTopics(from string, yield func(Topic) bool) error {
	if r.closed.Load() {
		return ErrClosed
	}
	lo := appendTopicKey(nil, from)
	var entryErr error
	err := r.s.Scan(IterOptions{LowerBound: lo, UpperBound: prefixEnd(topicPrefix)}, func(k, v []byte) bool {
		subject := string(k[len(topicPrefix):])
		if isVersionGuard(subject) {
			return true
		}
		if len(v) != 8 {
			entryErr = fmt.Errorf("pending count of %q is %d bytes, want 8: %w", keys.Clip(subject), len(v), ErrCorrupt)
			return false
		}
		n := binary.BigEndian.Uint64(v)
		if n == 0 {
			return true // never written: an entry is deleted at zero
		}
		return yield(Topic{Subject: subject, Hash: keys.TopicHash(subject), Pending: n})
	})
	if err == nil {
		err = entryErr
	}
	if err != nil {
		return fmt.Errorf("delaystore: scan subject registry: %w", err)
	}
	return nil
}

// Topics lists every subject with pending messages, sorted by subject,
// from the subject registry in the store. It holds them all at once: for
// a page of them, use ScanTopics.
func (r *Repository) Topics() ([]Topic, error) {
	var out []Topic
	err := r.ScanTopics("", func(t Topic) bool {
		out = append(out, t)
		return true
	})
	return out, err
}

// Pending is the number of pending messages, from memory.
func (r *Repository) Pending() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mu.pending
}

// Subjects is the number of subjects with pending messages, from memory.
func (r *Repository) Subjects() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mu.subjects
}

// PendingFor is the number of pending messages of subject, read from the
// subject registry in the store.
func (r *Repository) PendingFor(subject string) (uint64, error) {
	if r.closed.Load() {
		return 0, ErrClosed
	}
	n, err := r.readCount(appendTopicKey(nil, subject))
	if err != nil {
		return 0, fmt.Errorf("delaystore: pending count of %q: %w", keys.Clip(subject), err)
	}
	return n, nil
}

// Expired returns up to limit keys of messages whose expiry is at or before
// nowNs, in expiry order (then key order), reading only expired index
// entries. limit <= 0 or nowNs < 0 returns none. It returns an error
// wrapping ErrCorrupt for a malformed index entry.
func (r *Repository) Expired(nowNs int64, limit int) ([]keys.Key, error) {
	if r.closed.Load() {
		return nil, ErrClosed
	}
	if limit <= 0 || nowNs < 0 {
		return nil, nil
	}
	var out []keys.Key
	var entryErr error
	opts := IterOptions{LowerBound: []byte(expiryPrefix), UpperBound: expiryUpperBound(nowNs)}
	err := r.s.Scan(opts, func(kb, _ []byte) bool {
		if len(kb) != expiryKeyLen {
			entryErr = fmt.Errorf("expiry entry %x is %d bytes, want %d: %w", kb, len(kb), expiryKeyLen, ErrCorrupt)
			return false
		}
		out = append(out, keys.Key(kb[len(kb)-keys.Len:]))
		return len(out) < limit
	})
	if err == nil {
		err = entryErr
	}
	if err != nil {
		return nil, fmt.Errorf("delaystore: expired at %d: %w", nowNs, err)
	}
	return out, nil
}

// LastID is the highest event ID committed or observed. IDs of a failed
// commit are not counted here, but they are never used again either.
func (r *Repository) LastID() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mu.lastID
}

// ObserveID makes later IDs greater than id, for IDs applied from elsewhere
// (a replica applying a leader's writes). It only changes memory: the next
// Schedule persists the higher last ID, and until then a restart must observe
// the same IDs again, as replaying a log does.
func (r *Repository) ObserveID(id uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.mu.lastID = max(r.mu.lastID, id)
	r.mu.reserved = max(r.mu.reserved, id)
}

// TimeBucket is the configured bucket width.
func (r *Repository) TimeBucket() time.Duration { return r.bucket }
