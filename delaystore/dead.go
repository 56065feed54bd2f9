package delaystore

import (
	"encoding/binary"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/natsdelay/natsdelay/keys"
)

// Dead letters: messages that reached their Delay-Max-Deliver, were
// TERMed, expired (when so configured) or could never be published. Each
// is kept under its own keyspace, written in the same batch as the delete
// of the pending message it was, so a crash leaves either the pending
// message or its dead letter, never both and never neither.
//
//	metadata/event-repo/dead/<event key>                        -> DeadLetter
//	metadata/event-repo/dead-at/<BE died_at_ns><event key>      -> empty
//	metadata/event-repo/dead-subject/<subject>                  -> BE uint64 dead letters of the subject
//	metadata/event-repo/dead-total                              -> BE uint64 dead letters
//
// A dead letter keeps the event key of the message it was: the key's
// topic hash and time order make the dead letters of one subject one
// range, in fire order. dead-at orders them by time of death, so the
// janitor reads only those past the retention.
const (
	deadPrefix        = "metadata/event-repo/dead/"
	deadAtPrefix      = "metadata/event-repo/dead-at/"
	deadSubjectPrefix = "metadata/event-repo/dead-subject/"
	deadTotalKey      = "metadata/event-repo/dead-total"

	deadKeyLen   = len(deadPrefix) + keys.Len
	deadAtKeyLen = len(deadAtPrefix) + 8 + keys.Len
)

var (
	_ [len(deadPrefix) - keys.Len - 1]struct{}
	_ [len(deadAtPrefix) - keys.Len - 1]struct{}
	_ [len(deadSubjectPrefix) - keys.Len - 1]struct{}
	_ [len(deadTotalKey) - keys.Len - 1]struct{}
)

// Dead describes the death of a pending message, for Op.Dead: the message
// itself is taken from the store.
type Dead struct {
	// Reason is the Delay-Reason.
	Reason string
	// Attempts is the number of deliveries made; the stored attempt count
	// is used when it is higher.
	Attempts uint32
	// LastAnswer is the consumer's last answer, empty for none.
	LastAnswer string
	// DiedAtNs is the time of death, Unix nanoseconds.
	DiedAtNs int64
}

// DeadTopic is one subject with dead letters.
type DeadTopic struct {
	Subject string
	Dead    uint64
}

func appendDeadKey(dst []byte, k keys.Key) []byte {
	dst = append(dst, deadPrefix...)
	return append(dst, k[:]...)
}

func appendDeadAtKey(dst []byte, diedAtNs int64, k keys.Key) []byte {
	dst = append(dst, deadAtPrefix...)
	dst = binary.BigEndian.AppendUint64(dst, expiryOrder(diedAtNs))
	return append(dst, k[:]...)
}

func appendDeadSubjectKey(dst []byte, subject string) []byte {
	dst = append(dst, deadSubjectPrefix...)
	return append(dst, subject...)
}

// keepDead adds to b the dead letter of m, pending under k until the
// same batch deletes it. wmu must be held.
func (r *Repository) keepDead(b Batch, k keys.Key, m *StoredMessage, d *Dead) error {
	dl := &DeadLetter{
		Message: m, Reason: d.Reason, Attempts: max(d.Attempts, m.GetAttempt()),
		LastAnswer: d.LastAnswer, DiedAtNs: d.DiedAtNs,
	}
	v, err := proto.MarshalOptions{Deterministic: true}.Marshal(dl)
	if err != nil {
		return fmt.Errorf("encode dead letter of %v: %w", k, err)
	}
	if err := b.Set(appendDeadKey(r.w.key[:0], k), v); err != nil {
		return fmt.Errorf("write dead letter of %v: %w", k, err)
	}
	if err := b.Set(appendDeadAtKey(r.w.key[:0], d.DiedAtNs, k), nil); err != nil {
		return fmt.Errorf("index dead letter of %v: %w", k, err)
	}
	r.w.deadDeltas[m.Subject]++
	return nil
}

// dropDead adds to b the delete of the dead letter dl under k. wmu must
// be held.
func (r *Repository) dropDead(b Batch, k keys.Key, dl *DeadLetter) error {
	if err := b.Delete(appendDeadKey(r.w.key[:0], k)); err != nil {
		return fmt.Errorf("delete dead letter %v: %w", k, err)
	}
	if err := b.Delete(appendDeadAtKey(r.w.key[:0], dl.DiedAtNs, k)); err != nil {
		return fmt.Errorf("delete dead letter index entry of %v: %w", k, err)
	}
	r.w.deadDeltas[dl.GetMessage().GetSubject()]--
	return nil
}

// setDeadCounts adds to b the dead-letter counts this batch changes and
// returns the new total. wmu must be held.
func (r *Repository) setDeadCounts(b Batch) (uint64, error) {
	total := int64(r.mu.dead)
	for subject, d := range r.w.deadDeltas {
		if d == 0 {
			continue
		}
		key := appendDeadSubjectKey(nil, subject)
		c, err := r.count(key)
		if err != nil {
			return 0, fmt.Errorf("read dead count of %q: %w", keys.Clip(subject), err)
		}
		n := max(int64(c)+d, 0)
		if err := r.writeCount(b, key, uint64(n)); err != nil {
			return 0, fmt.Errorf("write dead count of %q: %w", keys.Clip(subject), err)
		}
		total += n - int64(c)
	}
	t := uint64(max(total, 0))
	if t != r.mu.dead {
		if err := b.Set([]byte(deadTotalKey), binary.BigEndian.AppendUint64(nil, t)); err != nil {
			return 0, fmt.Errorf("write dead total: %w", err)
		}
	}
	return t, nil
}

// committedDead publishes the dead total of a committed batch. wmu must
// be held.
func (r *Repository) committedDead(t uint64) {
	r.mu.Lock()
	r.mu.dead = t
	r.mu.Unlock()
	clear(r.w.deadDeltas)
}

// Dead is the number of dead letters kept, from memory.
func (r *Repository) Dead() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mu.dead
}

// DeadFor is the number of dead letters of subject, read from the store.
func (r *Repository) DeadFor(subject string) (uint64, error) {
	if r.closed.Load() {
		return 0, ErrClosed
	}
	n, err := r.readCount(appendDeadSubjectKey(nil, subject))
	if err != nil {
		return 0, fmt.Errorf("delaystore: dead count of %q: %w", keys.Clip(subject), err)
	}
	return n, nil
}

// GetDead returns the dead letter kept under k, the key of the message it
// was, or an error wrapping ErrNotFound. It is the caller's.
func (r *Repository) GetDead(k keys.Key) (*DeadLetter, error) {
	if r.closed.Load() {
		return nil, ErrClosed
	}
	dl, err := r.getDead(k)
	if err != nil {
		return nil, fmt.Errorf("delaystore: get dead letter %v: %w", k, err)
	}
	return dl, nil
}

func (r *Repository) getDead(k keys.Key) (*DeadLetter, error) {
	v, err := r.s.Get(appendDeadKey(nil, k))
	if err != nil {
		return nil, err
	}
	dl := new(DeadLetter)
	if err := proto.Unmarshal(v, dl); err != nil {
		return nil, fmt.Errorf("decode dead letter %v: %w: %w", k, ErrCorrupt, err)
	}
	return dl, nil
}

// ScanDead yields the dead letters in key order (topic hash, then fire
// time, then event id), after the key *after (from the first when after
// is nil), of topicHash alone when oneTopic is set, on one consistent
// snapshot, until yield returns false. Each dead letter is decoded for the
// caller and may be kept. NB: subjects whose hashes collide share a
// topic; compare the message's subject when that matters.
func (r *Repository) ScanDead(topicHash uint64, oneTopic bool, after *keys.Key, yield func(keys.Key, *DeadLetter) bool) error {
	if r.closed.Load() {
		return ErrClosed
	}
	lo := []byte(deadPrefix)
	hi := prefixEnd(deadPrefix)
	if oneTopic {
		lo = append(lo, keys.TopicLowerBound(topicHash)...)
		if ub := keys.TopicUpperBound(topicHash); ub != nil {
			hi = append([]byte(deadPrefix), ub...)
		}
	}
	if after != nil {
		if from := append(appendDeadKey(nil, *after), 0); string(from) > string(lo) {
			lo = from
		}
	}
	var decodeErr error
	err := r.s.Scan(IterOptions{LowerBound: lo, UpperBound: hi}, func(kb, v []byte) bool {
		if len(kb) != deadKeyLen {
			decodeErr = fmt.Errorf("dead letter key %x is %d bytes, want %d: %w", kb, len(kb), deadKeyLen, ErrCorrupt)
			return false
		}
		k := keys.Key(kb[len(deadPrefix):])
		dl := new(DeadLetter)
		if err := proto.Unmarshal(v, dl); err != nil {
			decodeErr = fmt.Errorf("decode dead letter %v: %w: %w", k, ErrCorrupt, err)
			return false
		}
		return yield(k, dl)
	})
	if err == nil {
		err = decodeErr
	}
	if err != nil {
		return fmt.Errorf("delaystore: scan dead letters: %w", err)
	}
	return nil
}

// ScanDeadTopics yields the subjects with dead letters and their counts,
// in subject order, from the first at or after from ("" for all), until
// yield returns false, on one consistent snapshot.
func (r *Repository) ScanDeadTopics(from string, yield func(DeadTopic) bool) error {
	if r.closed.Load() {
		return ErrClosed
	}
	var entryErr error
	lo := appendDeadSubjectKey(nil, from)
	err := r.s.Scan(IterOptions{LowerBound: lo, UpperBound: prefixEnd(deadSubjectPrefix)}, func(k, v []byte) bool {
		subject := string(k[len(deadSubjectPrefix):])
		if len(v) != 8 {
			entryErr = fmt.Errorf("dead count of %q is %d bytes, want 8: %w", keys.Clip(subject), len(v), ErrCorrupt)
			return false
		}
		return yield(DeadTopic{Subject: subject, Dead: binary.BigEndian.Uint64(v)})
	})
	if err == nil {
		err = entryErr
	}
	if err != nil {
		return fmt.Errorf("delaystore: scan dead-letter subjects: %w", err)
	}
	return nil
}

// DeadBefore returns up to limit keys of dead letters that died at or
// before nowNs, oldest death first, reading only those index entries.
// limit <= 0 or nowNs < 0 returns none.
func (r *Repository) DeadBefore(nowNs int64, limit int) ([]keys.Key, error) {
	if r.closed.Load() {
		return nil, ErrClosed
	}
	if limit <= 0 || nowNs < 0 {
		return nil, nil
	}
	var out []keys.Key
	var entryErr error
	hi := binary.BigEndian.AppendUint64([]byte(deadAtPrefix), uint64(nowNs)+1)
	err := r.s.Scan(IterOptions{LowerBound: []byte(deadAtPrefix), UpperBound: hi}, func(kb, _ []byte) bool {
		if len(kb) != deadAtKeyLen {
			entryErr = fmt.Errorf("dead letter index entry %x is %d bytes, want %d: %w", kb, len(kb), deadAtKeyLen, ErrCorrupt)
			return false
		}
		out = append(out, keys.Key(kb[len(kb)-keys.Len:]))
		return len(out) < limit
	})
	if err == nil {
		err = entryErr
	}
	if err != nil {
		return nil, fmt.Errorf("delaystore: dead letters before %d: %w", nowNs, err)
	}
	return out, nil
}

// DeleteDead deletes the dead letters under ks in one batch. deleted[i]
// reports whether ks[i] was a dead letter; deleting one that is not
// changes nothing. On error nothing is deleted. It blocks while another
// write is in progress and for the commit.
func (r *Repository) DeleteDead(ks []keys.Key, sync SyncMode) (deleted []bool, err error) {
	if len(ks) == 0 {
		return nil, nil
	}
	r.wmu.Lock() // held across the commit: see the NB in Schedule.
	defer r.wmu.Unlock()
	if r.closed.Load() {
		return nil, ErrClosed
	}
	b := r.s.NewBatch()
	defer b.Close()
	r.resetScratch()
	deleted = make([]bool, len(ks))
	seen := make(map[keys.Key]bool, len(ks))
	n := 0
	for i, k := range ks {
		if seen[k] {
			continue
		}
		seen[k] = true
		dl, err := r.getDead(k)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("delaystore: delete dead letter %d of %d: %w", i+1, len(ks), err)
		}
		if err := r.dropDead(b, k, dl); err != nil {
			return nil, fmt.Errorf("delaystore: delete dead letter %d of %d: %w", i+1, len(ks), err)
		}
		deleted[i] = true
		n++
	}
	if n == 0 {
		return deleted, nil
	}
	total, err := r.setDeadCounts(b)
	if err != nil {
		return nil, fmt.Errorf("delaystore: delete %d dead letters: %w", n, err)
	}
	if err := b.Commit(sync); err != nil {
		return nil, fmt.Errorf("delaystore: delete %d dead letters: commit: %w", n, err)
	}
	r.committedDead(total)
	return deleted, nil
}

// PurgeDead deletes up to limit dead letters that died at or before
// beforeNs, oldest first, and returns how many it deleted. It commits
// without sync: a purge lost in a crash is done again by the next one.
func (r *Repository) PurgeDead(beforeNs int64, limit int) (int, error) {
	ks, err := r.DeadBefore(beforeNs, limit)
	if err != nil || len(ks) == 0 {
		return 0, err
	}
	deleted, err := r.DeleteDead(ks, NoSync)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, ok := range deleted {
		if ok {
			n++
		}
	}
	return n, nil
}

// Replayed is what Replay did with one dead letter.
type Replayed struct {
	// Scheduled is the new pending message, when Done.
	Scheduled Scheduled
	// Msg is the new pending message as stored, when Done.
	Msg *StoredMessage
	// Dead is the dead letter replayed, when Done.
	Dead *DeadLetter
	Done bool
	// Held is set when the dead letter was kept because a pending message
	// holds its Delay-Id on its subject: replaying it would replace that
	// message.
	Held bool
}

// Replay schedules each dead letter under ks again, as a new pending
// message due at nowNs, to its subject or, when target is not empty, to
// target, and deletes the dead letter in the same batch, committed with
// sync: a crash leaves the dead letter or the new message, never both, so
// a dead letter is replayed once. The new message has a new key, the
// headers and payload of the dead one, no attempts, a TTL counted from
// nowNs, and no schedule (an occurrence is replayed as a one-off). It
// keeps its Delay-Id unless a pending message holds it: that dead letter
// is kept and reported Held, since replaying it would replace a message
// its publisher was told is pending. Keys that are not dead letters are
// skipped. It blocks while another write is in progress and for the
// commit.
func (r *Repository) Replay(ks []keys.Key, target string, nowNs int64, sync SyncMode) ([]Replayed, error) {
	if target != "" {
		if err := validateSubject(target); err != nil {
			return nil, fmt.Errorf("delaystore: replay: %w", err)
		}
	}
	r.wmu.Lock() // held across the commit: see the NB in Schedule.
	defer r.wmu.Unlock()
	if r.closed.Load() {
		return nil, ErrClosed
	}
	out := make([]Replayed, len(ks))
	var msgs []*StoredMessage
	var idx []int
	var dead []*DeadLetter
	var dks []keys.Key
	held := map[string]bool{}
	for i, k := range ks {
		dl, err := r.getDead(k)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("delaystore: replay %v: %w", k, err)
		}
		if dl.GetMessage().GetSubject() == "" {
			return nil, fmt.Errorf("delaystore: replay %v: %w: dead letter without a message", k, ErrCorrupt)
		}
		m := proto.Clone(dl.GetMessage()).(*StoredMessage)
		if target != "" {
			m.Subject = target
		}
		if m.ClientId != "" {
			ck := string(appendClientIDKey(nil, m.Subject, m.ClientId))
			_, err := r.s.Get([]byte(ck))
			switch {
			case err == nil || held[ck]:
				out[i].Held = true
				continue
			case !errors.Is(err, ErrNotFound):
				return nil, fmt.Errorf("delaystore: replay %v: %w", k, err)
			}
			held[ck] = true // NB: two dead letters with one id: the first goes
		}
		m.Attempt, m.Recurrence, m.MovedBy, m.EventId = 0, nil, "", 0
		m.EnqueuedAtNs, m.FireAtNs = nowNs, nowNs
		m.DebounceFirstNs, m.DebounceMaxNs = 0, 0 // due now, not a publish of a burst
		m.ThrottleNs = 0                          // nor held by a throttle
		if m.TtlNs != 0 {
			m.ExpireAtNs = nowNs + m.TtlNs
		}
		msgs = append(msgs, m)
		idx = append(idx, i)
		dead = append(dead, dl)
		dks = append(dks, k)
	}
	if len(msgs) == 0 {
		return out, nil
	}
	res, err := r.scheduleLocked(msgs, sync, func(b Batch, _ []Scheduled) error {
		for i, k := range dks {
			if err := r.dropDead(b, k, dead[i]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("delaystore: replay: %w", err)
	}
	for j, i := range idx {
		out[i] = Replayed{Scheduled: res[j], Msg: msgs[j], Dead: dead[j], Done: true}
	}
	return out, nil
}
