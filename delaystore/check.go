package delaystore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/natsdelay/natsdelay/keys"
)

// Check reads the whole store and reports, joined, every way in which
// the indexes and counts disagree with the messages: a subject's pending
// count, the totals, the due index (one entry per message, none for a
// message that is not there), and the Delay-Id index (each entry names a
// message of its subject and id). It returns nil for a consistent store.
// It holds every message key in memory, and is meant for a store that was
// just restored or repaired, not for one under load: writes that commit
// while it reads make it report differences that are not there.
func (r *Repository) Check() error {
	if r.closed.Load() {
		return ErrClosed
	}
	msgs, perSubject, err := r.checkMessages()
	if err != nil {
		return err
	}
	errs := []error{r.checkTopics(perSubject), r.checkDue(msgs), r.checkClientIDs(msgs)}
	var total uint64
	for _, n := range perSubject {
		total += n
	}
	if p, s := r.Pending(), r.Subjects(); p != total || s != uint64(len(perSubject)) {
		errs = append(errs, fmt.Errorf("totals: %d pending in %d subjects, the messages are %d in %d", p, s, total, len(perSubject)))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("delaystore: check: %w: %w", ErrCorrupt, err)
	}
	return nil
}

// checkMessages decodes every message and returns their subjects and
// ids by key, and the count of each subject.
func (r *Repository) checkMessages() (map[keys.Key]checkedMessage, map[string]uint64, error) {
	msgs := map[keys.Key]checkedMessage{}
	perSubject := map[string]uint64{}
	var decodeErr error
	err := r.s.Scan(IterOptions{}, func(k, v []byte) bool {
		if len(k) != keys.Len {
			return true
		}
		var m StoredMessage
		if err := proto.Unmarshal(v, &m); err != nil {
			decodeErr = fmt.Errorf("delaystore: check: decode %x: %w: %w", k, ErrCorrupt, err)
			return false
		}
		ek := keys.Key(k)
		rm, _, err := r.resolvePlanned(&ek, &m, 0, false, false)
		if err != nil {
			decodeErr = fmt.Errorf("delaystore: check: %w", err)
			return false
		}
		msgs[ek] = checkedMessage{subject: rm.Subject, clientID: rm.ClientId}
		perSubject[rm.Subject]++
		return true
	})
	return msgs, perSubject, errors.Join(err, decodeErr)
}

type checkedMessage struct{ subject, clientID string }

// checkTopics compares the subject registry with the messages' counts.
func (r *Repository) checkTopics(perSubject map[string]uint64) error {
	var errs []error
	seen := 0
	err := r.ScanTopics("", func(t Topic) bool {
		seen++
		if n := perSubject[t.Subject]; n != t.Pending {
			errs = append(errs, fmt.Errorf("subject %q: registry says %d pending, %d messages", keys.Clip(t.Subject), t.Pending, n))
		}
		return true
	})
	if seen != len(perSubject) {
		errs = append(errs, fmt.Errorf("the registry has %d subjects, the messages %d", seen, len(perSubject)))
	}
	return errors.Join(append(errs, err)...)
}

// checkDue checks that the due index holds each message's key once, and
// nothing else.
func (r *Repository) checkDue(msgs map[keys.Key]checkedMessage) error {
	var errs []error
	seen := make(map[keys.Key]bool, len(msgs))
	err := r.ScanDue(nil, ^uint64(0), func(k keys.Key) bool {
		if _, ok := msgs[k]; !ok {
			errs = append(errs, fmt.Errorf("due index: %v has no message", k))
		} else if seen[k] {
			errs = append(errs, fmt.Errorf("due index: %v twice", k))
		}
		seen[k] = true
		return len(errs) < 10
	})
	if len(seen) != len(msgs) && len(errs) == 0 {
		errs = append(errs, fmt.Errorf("due index: %d entries, %d messages", len(seen), len(msgs)))
	}
	return errors.Join(append(errs, err)...)
}

// checkClientIDs checks that each Delay-Id entry names a message of its
// subject and id, and that each message with an id has its entry.
func (r *Repository) checkClientIDs(msgs map[keys.Key]checkedMessage) error {
	var errs []error
	withID, entries := 0, 0
	for _, m := range msgs {
		if m.clientID != "" {
			withID++
		}
	}
	prefix := []byte(clientIDPrefix)
	err := r.s.Scan(IterOptions{LowerBound: prefix, UpperBound: prefixEnd(clientIDPrefix)}, func(k, v []byte) bool {
		subject, id, ok := bytes.Cut(k[len(prefix):], []byte{0})
		m, found := msgs[keys.Key(v)]
		if !ok || len(v) != keys.Len || !found || m.subject != string(subject) || m.clientID != string(id) {
			errs = append(errs, fmt.Errorf("Delay-Id index: %q names %x, which is not a message of that subject and id", k[len(prefix):], v))
		} else {
			entries++
		}
		return len(errs) < 10
	})
	if len(errs) == 0 && entries != withID {
		errs = append(errs, fmt.Errorf("Delay-Id index: %d entries, %d messages with an id", entries, withID))
	}
	return errors.Join(append(errs, err)...)
}

// CheckStore runs Check on s, through a repository opened with the time
// bucket s was created with, and closes that repository (not s). Like
// OpenRepository it writes the keys a first open writes.
func CheckStore(s Store, log *slog.Logger) error {
	cfg := RepositoryConfig{Logger: log}
	v, err := s.Get([]byte(timeBucketKey))
	switch {
	case err == nil && len(v) == 8:
		cfg.TimeBucket = time.Duration(binary.BigEndian.Uint64(v)) * time.Millisecond
	case err != nil && !errors.Is(err, ErrNotFound):
		return fmt.Errorf("delaystore: check: read time bucket: %w", err)
	}
	r, err := OpenRepository(s, cfg)
	if err != nil {
		return fmt.Errorf("delaystore: check: %w", err)
	}
	return errors.Join(r.Check(), r.Close())
}
