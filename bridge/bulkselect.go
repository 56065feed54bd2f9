package bridge

import (
	"errors"
	"math"
	"strings"

	"github.com/natsdelay/natsdelay/bridge/internal/core"
	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/keys"
)

// position is where a selection stopped: the last entry it read. subject
// is set when the selection reads subjects' messages (a filter on subjects)
// and is then always the subject of key; key is the last key read, of that
// subject, of the due index, or of the dead letters.
type position struct {
	subject string
	key     keys.Key
}

// selection is one step's read of the messages a filter selects: where it
// reads, what it has read, and whether it stopped before the end.
type selection struct {
	c       *core.Service
	f       *filter
	keep    func(keys.Key, *delaystore.StoredMessage) bool
	scanned *int
	// frozen are the topics a bulk step leaves alone: see frozenTopics.
	frozen *frozenTopics
	// loBucket and hiBucket are the time buckets of the filter's fire
	// times, hiBucket math.MaxUint64 when they have no end.
	loBucket, hiBucket uint64
	last               position
	stopped            bool
}

// selectMessages reads the messages the filter selects, after the
// position (subject, after), calling keep for each until it returns false
// or maxScanned entries were read, and returns the position of the last
// entry read and whether the selection is done. Resumed from that position,
// it reads on from the entry after it: each entry once, whatever the step's
// limit. It reads through the store's indexes:
//
//   - dead letters: the dead keyspace, of one subject when it has no
//     wildcard, in key order;
//   - a subject without wildcards: that subject's messages, in key order,
//     from the fire time "from" to "to";
//   - the filter ">" (every subject): the due index, in time order, from
//     "from" to "to", and each entry's message;
//   - another filter with wildcards: the subject registry from the
//     filter's literal start, and each matching subject's messages as for
//     one subject.
func (s *Service) selectMessages(f *filter, subject string, after *keys.Key, scanned *int, keep func(keys.Key, *delaystore.StoredMessage) bool) (position, bool, error) {
	c := s.core.Load()
	bucketMs := c.Config().Repository.TimeBucket.Milliseconds()
	sel := &selection{c: c, f: f, keep: keep, scanned: scanned, frozen: &s.frozen,
		loBucket: keys.Bucket(f.fromNs/1e6, bucketMs), hiBucket: math.MaxUint64}
	if f.toNs != math.MaxInt64 {
		sel.hiBucket = keys.Bucket(keys.FireAtMs(f.toNs), bucketMs)
	}
	var err error
	switch {
	case f.tag != nil:
		// One message: read it, and the selection is done.
		if after == nil {
			err = sel.one(*f.tag)
		}
		return sel.last, err == nil, err
	case f.state == stateDead:
		err = sel.dead(after)
	case f.literal:
		err = sel.subject(f.subject, keys.TopicHash(f.subject), after)
	case f.subject == ">":
		err = sel.due(after)
	default:
		err = sel.subjects(subject, after)
	}
	return sel.last, !sel.stopped, err
}

// visit reads one entry, the message m under k of subject (or "" when the
// selection does not read by subject), delivered attempt times, and
// reports whether to read on. It stops, before reading, at maxScanned
// entries read: last is then the entry before, where the next step
// starts.
func (sel *selection) visit(subject string, k keys.Key, m *delaystore.StoredMessage, attempt uint32) bool {
	if *sel.scanned == maxScanned {
		sel.stopped = true
		return false
	}
	*sel.scanned++
	sel.last = position{subject, k}
	if !sel.f.match(m, attempt) || (sel.f.state == stateInFlight && !sel.c.InFlight(k)) || sel.frozen.frozen(k.TopicHash()) {
		return true
	}
	if !sel.keep(k, m) {
		sel.stopped = true
		return false
	}
	return true
}

// one reads the message under k, the filter's tag.
func (sel *selection) one(k keys.Key) error {
	if sel.f.state == stateDead {
		dl, err := sel.c.GetDead(k)
		if err == nil && dl.GetMessage() != nil {
			sel.visit("", k, dl.GetMessage(), dl.Attempts)
		} else if err != nil && !errors.Is(err, wire.ErrNotFound) {
			return err
		}
		return nil
	}
	m, err := sel.c.Get(k)
	if err == nil {
		sel.visit("", k, m, m.Attempt)
	} else if !errors.Is(err, wire.ErrNotFound) {
		return err
	}
	return nil
}

// dead reads the dead letters after the key after, in key order.
func (sel *selection) dead(after *keys.Key) error {
	return sel.c.ScanDead(keys.TopicHash(sel.f.subject), sel.f.literal, after, func(k keys.Key, dl *delaystore.DeadLetter) bool {
		m := dl.GetMessage()
		if m == nil {
			m = &delaystore.StoredMessage{}
		}
		return sel.visit("", k, m, dl.Attempts)
	})
}

// due reads the due index after the key after, in due order, and each
// entry's message.
func (sel *selection) due(after *keys.Key) error {
	start := after
	if start == nil && sel.loBucket > 0 {
		// The due order is by time bucket first: start after the last
		// possible key of the bucket before the filter's first.
		k := keys.New(math.MaxUint64, sel.loBucket-1, math.MaxUint64)
		start = &k
	}
	var readErr error
	err := sel.c.ScanDue(start, sel.hiBucket, func(k keys.Key) bool {
		m, err := sel.c.Get(k)
		if errors.Is(err, wire.ErrNotFound) {
			return true // settled since the index was read
		}
		if err != nil {
			readErr = err
			return false
		}
		return sel.visit("", k, m, m.Attempt)
	})
	if err == nil {
		err = readErr
	}
	return err
}

// subject reads the messages of subject, whose topic hash is hash, after
// the key after (from the first when nil), within the filter's fire times.
func (sel *selection) subject(subject string, hash uint64, after *keys.Key) error {
	from := keys.New(hash, sel.loBucket, 0).Bytes()
	if after != nil && string(after.Successor()) > string(from) {
		from = after.Successor()
	}
	var upper []byte
	if sel.hiBucket != math.MaxUint64 {
		upper = keys.New(hash, sel.hiBucket+1, 0).Bytes()
	}
	return sel.c.ScanTopic(hash, from, upper, func(k keys.Key, m *delaystore.StoredMessage) bool {
		if m.Subject != subject {
			return true // another subject with the same hash
		}
		return sel.visit(subject, k, m, m.Attempt)
	})
}

// subjects reads, in subject order from the subject "from" on (from the
// filter's literal start when ""), the messages of each subject the filter
// matches, those of "from" after the key after.
func (sel *selection) subjects(from string, after *keys.Key) error {
	prefix := literalPrefix(sel.f.subject)
	if from == "" {
		from, after = prefix, nil
	}
	var inner error
	err := sel.c.ScanTopics(from, func(t delaystore.Topic) bool {
		if !strings.HasPrefix(t.Subject, prefix) {
			return false
		}
		if !sel.f.matchSubject(t.Subject) {
			return true
		}
		var start *keys.Key
		if t.Subject == from {
			start = after
		}
		if inner = sel.subject(t.Subject, t.Hash, start); inner != nil || sel.stopped {
			return false
		}
		// NB: a subject read to its end leaves the position on its last
		// possible key, so a resume starts at the next subject. The
		// position names a subject only with a key of that subject: a
		// step that stops before reading the next subject's first entry
		// resumes there, and not past the keys of a subject whose range
		// lies before the last one's.
		sel.last = position{t.Subject, keys.New(t.Hash, math.MaxUint64, math.MaxUint64)}
		return true
	})
	if err == nil {
		err = inner
	}
	return err
}
