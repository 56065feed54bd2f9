package delaystore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/natsdelay/natsdelay/keys"
)

// The duplicate window: a publisher that sends a message again because it
// got no answer in time must not have it delivered twice. For a while after
// a message is stored, ScheduleOnce keeps a record of what answered it, per
// (subject, client id) and per (subject, Nats-Msg-Id), and answers a resend
// with the first answer, storing nothing. The records are written in the
// batch that stores the message, so they are as durable as it is and, in a
// cluster, replicated with it in the same log entry; they outlive the
// message, which may have been delivered and ACKed before the resend came.
//
//	metadata/event-repo/dedup/<kind><subject> 0x00 <id>          -> record (dedupRecordLen bytes)
//	metadata/event-repo/dedup-at/<BE uint64 expire_at_ns><kind><subject> 0x00 <id> -> empty
//
// kind is dedupClientID or dedupMsgID. The second is the records in expiry
// order: each ScheduleOnce batch deletes, in its own batch, at most a bound
// of those expired (see sweepLimit), so the records on disk follow the
// messages stored within the window and nothing stays in memory. Each
// record has exactly one time entry: rewriting a record deletes the entry
// of its old expiry.
const (
	dedupPrefix   = "metadata/event-repo/dedup/"
	dedupAtPrefix = "metadata/event-repo/dedup-at/"

	dedupClientID = 'i' // the record of a Delay-Id
	dedupMsgID    = 'm' // the record of a Nats-Msg-Id

	// dedupRecordLen is a record's value: its expiry and the first
	// answer's fire time (BE int64 each), its event key, and the Sum.
	dedupRecordLen = 8 + 8 + keys.Len + len(DedupSum{})
)

var (
	_ [len(dedupPrefix) - keys.Len - 1]struct{}
	_ [len(dedupAtPrefix) - keys.Len - 1]struct{}
)

// DedupSum is a digest of what defines a message as its publisher sent
// it: the caller's choice, but it must not change between a message and
// its resend (so no time of arrival in it), and should change with any
// field a deliberate replacement would change.
type DedupSum [16]byte

// Once is a message for ScheduleOnce, with what tells a resend of it from
// a new message.
type Once struct {
	Msg *StoredMessage
	// MsgID is the publisher's Nats-Msg-Id, or "": while a record of
	// (subject, MsgID) lives, any message with them is a duplicate,
	// whatever it holds.
	MsgID string
	// Sum, for a message with a client id, identifies what was sent:
	// while a record of (subject, client id) lives, a message with the
	// same Sum is a duplicate, and one with another Sum replaces the
	// pending message as Schedule does. The zero Sum keeps no record of
	// the client id.
	Sum DedupSum
}

// Outcome is what ScheduleOnce did with one message.
type Outcome struct {
	Scheduled
	// FireAtNs is the fire time of the message under Key.
	FireAtNs int64
	// Duplicate reports that the message was a resend within the window:
	// nothing was stored, and Key and FireAtNs are the first answer's. That
	// message may since have been delivered, or replaced.
	Duplicate bool
	// Folded reports that the message, throttled, was folded into the
	// delivery its (subject, client id) already had planned: it replaced
	// that message and took its fire time (see throttle.go).
	Folded bool
}

// ScheduleOnce is Schedule with a duplicate window: each message of in
// that is a resend (see Once) of one stored less than window before nowNs
// is answered with the first one's key and fire time and stores nothing;
// the others are stored in one batch, with their records, which expire
// window after nowNs. The batch also deletes expired records, a bounded
// number of them. A window of 0 or less keeps and reads no records, and
// still deletes expired ones. A duplicate of a message earlier in the same call gets
// that message's key. Errors are Schedule's; a Nats-Msg-Id is checked as
// a client id is. A throttled message (ThrottleNs) gets its fire time
// here, from the record of its window (see throttle.go).
func (r *Repository) ScheduleOnce(in []Once, window time.Duration, nowNs int64, sync SyncMode) ([]Outcome, error) {
	return r.ScheduleOnceNoted(in, window, nowNs, sync, nil)
}

// ScheduleOnceNoted is ScheduleOnce that, if noted is not nil, hands it
// the keys of the messages the batch stores once they are chosen and
// before the batch commits (under the repository's write lock: noted
// must not call it). A dispatcher is told of a message only after its
// commit, and a scan in between must not start above one of them (see
// dispatch.Dispatcher.IngestingKeys).
func (r *Repository) ScheduleOnceNoted(in []Once, window time.Duration, nowNs int64, sync SyncMode, noted func([]Scheduled)) ([]Outcome, error) {
	if len(in) == 0 {
		return nil, nil
	}
	msgs := make([]*StoredMessage, len(in))
	for i, o := range in {
		msgs[i] = o.Msg
		if err := validateName("Nats-Msg-Id", o.MsgID); err != nil {
			return nil, fmt.Errorf("delaystore: schedule message %d of %d: %w", i+1, len(in), err)
		}
	}
	if err := validateBatch(msgs); err != nil {
		return nil, err
	}
	r.wmu.Lock() // held across the commit: see the NB in Schedule.
	defer r.wmu.Unlock()
	if r.closed.Load() {
		return nil, ErrClosed
	}

	d := dedupBatch{r: r, on: window > 0, nowNs: nowNs, expireNs: nowNs + int64(window), recs: make(map[string]*dedupEntry)}
	refs := make([]dedupRef, len(in))
	dup := make([]bool, len(in))
	var folded []bool  // made at the first throttled message
	stored := msgs[:0] // NB: reuses msgs; a message is kept only before its index
	for i, o := range in {
		ref, ok, err := d.duplicate(o)
		if err != nil {
			return nil, fmt.Errorf("delaystore: schedule batch of %d: %w", len(in), err)
		}
		if ok {
			refs[i], dup[i] = ref, true
			continue
		}
		if o.Msg.ThrottleNs != 0 {
			if folded == nil {
				folded = make([]bool, len(in))
			}
			if folded[i], err = d.throttle(o.Msg, stored); err != nil {
				return nil, fmt.Errorf("delaystore: schedule message %d of %d: %w", i+1, len(in), err)
			}
		}
		refs[i] = dedupRef{pos: len(stored)}
		d.record(o, len(stored))
		stored = append(stored, o.Msg)
	}
	var res []Scheduled
	if len(stored) > 0 {
		var err error
		write := d.write
		if noted != nil {
			write = func(b Batch, out []Scheduled) error {
				noted(out)
				return d.write(b, out)
			}
		}
		if res, err = r.scheduleLocked(stored, sync, write); err != nil {
			return nil, err
		}
		r.dedupSwept = d.swept
		r.dedupNext, r.dedupNextKnown = d.next, d.nextKnown
	}
	out := make([]Outcome, len(in))
	for i, ref := range refs {
		switch {
		case dup[i] && ref.pos < 0:
			out[i] = Outcome{Scheduled: Scheduled{Key: ref.key}, FireAtNs: ref.fireAtNs, Duplicate: true}
		case dup[i]:
			out[i] = Outcome{Scheduled: Scheduled{Key: res[ref.pos].Key}, FireAtNs: ref.fireAtNs, Duplicate: true}
		default:
			out[i] = Outcome{Scheduled: res[ref.pos], FireAtNs: in[i].Msg.FireAtNs, Folded: folded != nil && folded[i]}
		}
	}
	return out, nil
}

// dedupRef is the answer a message of the batch gets: the message at pos
// of those the batch stores, or, when pos is negative, key.
type dedupRef struct {
	pos      int
	key      keys.Key
	fireAtNs int64
}

// dedupEntry is a record as the batch leaves it.
type dedupEntry struct {
	expireNs int64
	sum      DedupSum
	ref      dedupRef
	// storedExpireNs is the expiry of the record on disk, 0 if none: its
	// time entry goes when the record is rewritten.
	storedExpireNs int64
	dirty          bool
}

// dedupBatch is the records one ScheduleOnce reads and writes, by record
// key.
type dedupBatch struct {
	r        *Repository
	on       bool // whether the window is open: false reads and keeps no records
	nowNs    int64
	expireNs int64
	recs     map[string]*dedupEntry
	// swept is where the next sweep starts once this batch commits.
	swept uint64
	// next and nextKnown are Repository.dedupNext and dedupNextKnown
	// once this batch commits: the earliest time entry left at or past
	// swept, this batch's own included.
	next      uint64
	nextKnown bool
}

// duplicate reports whether o is a resend of a message whose record
// lives, and that message's answer.
func (d *dedupBatch) duplicate(o Once) (dedupRef, bool, error) {
	m := o.Msg
	if !d.on {
		return dedupRef{}, false, nil
	}
	if o.MsgID != "" {
		e, err := d.entry(dedupMsgID, m.Subject, o.MsgID)
		if err != nil {
			return dedupRef{}, false, err
		}
		if e.expireNs > d.nowNs {
			return e.ref, true, nil
		}
	}
	if m.ClientId != "" && o.Sum != (DedupSum{}) {
		e, err := d.entry(dedupClientID, m.Subject, m.ClientId)
		if err != nil {
			return dedupRef{}, false, err
		}
		if e.expireNs > d.nowNs && e.sum == o.Sum {
			return e.ref, true, nil
		}
	}
	return dedupRef{}, false, nil
}

// record makes the records of o, stored at pos of the batch's messages,
// point at it. Only duplicate reads records, so each is loaded already.
func (d *dedupBatch) record(o Once, pos int) {
	if !d.on {
		return
	}
	set := func(kind byte, id string) {
		e := d.recs[string(appendDedupKey(nil, kind, o.Msg.Subject, id))]
		e.expireNs, e.sum, e.dirty = d.expireNs, o.Sum, true
		e.ref = dedupRef{pos: pos, fireAtNs: o.Msg.FireAtNs}
	}
	if o.MsgID != "" {
		set(dedupMsgID, o.MsgID)
	}
	if o.Msg.ClientId != "" && o.Sum != (DedupSum{}) {
		set(dedupClientID, o.Msg.ClientId)
	}
}

// entry returns the record of (kind, subject, id) as the batch has it,
// reading it from the store the first time; an absent record has a zero
// expiry.
func (d *dedupBatch) entry(kind byte, subject, id string) (*dedupEntry, error) {
	k := appendDedupKey(nil, kind, subject, id)
	if e, ok := d.recs[string(k)]; ok {
		return e, nil
	}
	e := &dedupEntry{}
	v, err := d.r.s.Get(k)
	switch {
	case errors.Is(err, ErrNotFound):
	case err != nil:
		return nil, fmt.Errorf("read duplicate record: %w", err)
	case len(v) != dedupRecordLen:
		return nil, fmt.Errorf("duplicate record of %q on %q is %d bytes, want %d: %w", keys.Clip(id), keys.Clip(subject), len(v), dedupRecordLen, ErrCorrupt)
	default:
		e.expireNs = int64(binary.BigEndian.Uint64(v))
		e.storedExpireNs = e.expireNs
		e.ref = dedupRef{pos: -1, fireAtNs: int64(binary.BigEndian.Uint64(v[8:]))}
		copy(e.ref.key[:], v[16:16+keys.Len])
		copy(e.sum[:], v[16+keys.Len:])
	}
	d.recs[string(k)] = e
	return e, nil
}

// write adds to b the records the batch changed, given the keys of its
// messages, and the deletion of expired ones (see sweep). wmu must be
// held.
func (d *dedupBatch) write(b Batch, out []Scheduled) error {
	val := make([]byte, dedupRecordLen)
	written := uint64(math.MaxUint64) // the earliest expiry this batch writes
	for k, e := range d.recs {
		if !e.dirty {
			continue
		}
		suffix := k[len(dedupPrefix):]
		if e.storedExpireNs != 0 && e.storedExpireNs != e.expireNs {
			if err := b.Delete(appendDedupAtKey(nil, e.storedExpireNs, suffix)); err != nil {
				return fmt.Errorf("move duplicate record: %w", err)
			}
		}
		binary.BigEndian.PutUint64(val, uint64(e.expireNs))
		binary.BigEndian.PutUint64(val[8:], uint64(e.ref.fireAtNs))
		copy(val[16:], out[e.ref.pos].Key[:])
		copy(val[16+keys.Len:], e.sum[:])
		if err := b.Set([]byte(k), val); err != nil {
			return fmt.Errorf("write duplicate record: %w", err)
		}
		if err := b.Set(appendDedupAtKey(nil, e.expireNs, suffix), nil); err != nil {
			return fmt.Errorf("write duplicate record: %w", err)
		}
		written = min(written, expiryOrder(e.expireNs))
	}
	if err := d.sweep(b, sweepLimit(len(out))); err != nil {
		return err
	}
	d.next = min(d.next, written)
	return nil
}

// sweepLimit bounds the expired records a batch of n messages deletes:
// a batch writes at most two records a message, so sweeping more than
// that keeps up with any rate of writes, and the bound keeps a batch
// after a long quiet from growing with everything that expired meanwhile.
func sweepLimit(n int) int { return 64 + 2*n }

// sweep adds to b the deletion of up to limit records expired at nowNs
// and of their time entries, leaving those this batch rewrites. It starts
// where the last committed sweep ended: the entries before are deleted,
// and an LSM store would otherwise step over each deletion again, every
// batch, until a compaction drops them (that made a batch of records cost
// seven times a batch of plain messages). It reads on past now to the
// first entry not expired, and until the clock reaches that one the
// batches that follow sweep without reading the store at all: a read
// costs a batch about what its seek through every level of the store
// does, whatever it finds, and batches of a few messages paid it each
// (performance.md, "Fewer, larger commits").
func (d *dedupBatch) sweep(b Batch, limit int) error {
	r := d.r
	d.swept, d.next, d.nextKnown = r.dedupSwept, r.dedupNext, r.dedupNextKnown
	now := expiryOrder(d.nowNs)
	if d.nextKnown && now < d.next {
		return nil // nothing has expired since the last read
	}
	expired, err := d.expired(limit)
	if err != nil {
		return fmt.Errorf("sweep duplicate records: %w", err)
	}
	if len(expired) < limit {
		d.swept = now + 1 // every entry up to now is gone
	} else {
		// Entries may share the last one's expiry: start on it.
		d.swept = binary.BigEndian.Uint64(expired[len(expired)-1][len(dedupAtPrefix):])
	}
	var rec []byte
	for _, k := range expired {
		rec = append(append(rec[:0], dedupPrefix...), k[len(dedupAtPrefix)+8:]...)
		if e, ok := d.recs[string(rec)]; ok && e.dirty {
			continue // rewritten by this batch, which deleted this entry
		}
		if err := b.Delete(rec); err != nil {
			return fmt.Errorf("sweep duplicate records: %w", err)
		}
		if err := b.Delete(k); err != nil {
			return fmt.Errorf("sweep duplicate records: %w", err)
		}
	}
	return nil
}

// expired returns up to limit time entries from the last sweep's end
// that have expired at nowNs, and sets d.next to the expiry of the first
// entry after them that has not (d.nextKnown), unless limit stopped the
// read first.
func (d *dedupBatch) expired(limit int) ([][]byte, error) {
	var expired [][]byte
	var entryErr error
	lower := binary.BigEndian.AppendUint64([]byte(dedupAtPrefix), d.swept)
	upper := dedupAtUpperBound(d.nowNs)
	d.next, d.nextKnown = math.MaxUint64, false
	if bytes.Compare(lower, upper) >= 0 {
		return nil, nil
	}
	err := d.r.s.Scan(IterOptions{LowerBound: lower, UpperBound: prefixEnd(dedupAtPrefix)}, func(k, _ []byte) bool {
		if len(k) <= len(dedupAtPrefix)+8 {
			entryErr = fmt.Errorf("duplicate time entry %x is %d bytes: %w", k, len(k), ErrCorrupt)
			return false
		}
		if bytes.Compare(k, upper) >= 0 {
			d.next, d.nextKnown = binary.BigEndian.Uint64(k[len(dedupAtPrefix):]), true
			return false
		}
		if len(expired) == limit {
			return false // more expired: the next batch reads again
		}
		expired = append(expired, append([]byte(nil), k...))
		return true
	})
	if err == nil {
		err = entryErr
	}
	if err != nil {
		return nil, err
	}
	if len(expired) < limit && !d.nextKnown {
		d.nextKnown = true // read to the end: no entry after now
	}
	return expired, nil
}

// appendDedupKey appends the record key of (kind, subject, id) to dst.
// Subject and id must have passed validateName.
func appendDedupKey(dst []byte, kind byte, subject, id string) []byte {
	dst = append(dst, dedupPrefix...)
	dst = append(dst, kind)
	dst = append(dst, subject...)
	dst = append(dst, 0)
	return append(dst, id...)
}

// appendDedupAtKey appends the time entry of the record whose key ends in
// suffix (after dedupPrefix) and that expires at expireNs.
func appendDedupAtKey(dst []byte, expireNs int64, suffix string) []byte {
	dst = append(dst, dedupAtPrefix...)
	dst = binary.BigEndian.AppendUint64(dst, expiryOrder(expireNs))
	return append(dst, suffix...)
}

// dedupAtUpperBound is the exclusive upper bound of the time entries of
// records expired at nowNs: those with an expiry at or before it.
func dedupAtUpperBound(nowNs int64) []byte {
	dst := append(make([]byte, 0, len(dedupAtPrefix)+8), dedupAtPrefix...)
	return binary.BigEndian.AppendUint64(dst, expiryOrder(nowNs)+1)
}
