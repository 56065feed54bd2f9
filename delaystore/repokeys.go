package delaystore

import (
	"encoding/binary"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/natsdelay/natsdelay/keys"
)

// The repository's non-event keys. Every one starts with a prefix of at
// least keys.Len+1 bytes, so no non-event key is ever exactly keys.Len bytes
// long, whatever follows the prefix: scans tell events from everything else
// by length alone, and no subject or client id can forge an event key.
// Sharing the "metadata/" start also keeps all of them in one corner of the
// keyspace, inside the range of the single topic hash that is those 8 bytes.
//
//	metadata/event-repo/last-id                                -> BE uint64 last event id
//	metadata/event-repo/time-bucket                            -> BE uint64 bucket width in ms
//	metadata/event-repo/topic/<subject>                        -> BE uint64 pending count
//	metadata/event-repo/client-id/<subject> 0x00 <client id>   -> 24-byte event key
//	metadata/event-repo/expiry/<BE uint64 expire_at_ns><event key> -> empty
//	metadata/event-repo/schedule/<subject> 0x00 <name>         -> 24-byte event key
//	metadata/event-repo/schedules                              -> BE uint64 schedule count
//
// The last two are the schedule index of recurring schedules (see
// schedules.go); the due index, due counts and totals are in dueindex.go,
// and the dead letters and their indexes in dead.go.
//
// Subjects and client ids may not contain 0x00, so the separator makes
// (subject, client id) -> key injective. The expiry key puts the expiry time
// first, big-endian, so everything expired by now is the single range
// [expiry/, expiry/BE(now+1)); the event key after it keeps entries with the
// same expiry distinct.
const (
	lastIDKey      = "metadata/event-repo/last-id"
	idCeilingKey   = "metadata/event-repo/id-ceiling"
	timeBucketKey  = "metadata/event-repo/time-bucket"
	topicPrefix    = "metadata/event-repo/topic/"
	clientIDPrefix = "metadata/event-repo/client-id/"
	expiryPrefix   = "metadata/event-repo/expiry/"

	expiryKeyLen = len(expiryPrefix) + 8 + keys.Len
)

// NB: these fail to compile if a prefix is ever shortened to keys.Len bytes
// or fewer, which would let some non-event key be exactly keys.Len long.
var (
	_ [len(lastIDKey) - keys.Len - 1]struct{}
	_ [len(idCeilingKey) - keys.Len - 1]struct{}
	_ [len(timeBucketKey) - keys.Len - 1]struct{}
	_ [len(topicPrefix) - keys.Len - 1]struct{}
	_ [len(clientIDPrefix) - keys.Len - 1]struct{}
	_ [len(expiryPrefix) - keys.Len - 1]struct{}
)

// appendTopicKey appends the registry key of subject to dst.
func appendTopicKey(dst []byte, subject string) []byte {
	dst = append(dst, topicPrefix...)
	return append(dst, subject...)
}

// appendClientIDKey appends the client id index key of (subject, clientID)
// to dst. Both must have passed validateName.
func appendClientIDKey(dst []byte, subject, clientID string) []byte {
	dst = append(dst, clientIDPrefix...)
	dst = append(dst, subject...)
	dst = append(dst, 0)
	return append(dst, clientID...)
}

// appendExpiryKey appends the expiry index key of the message under k that
// expires at expireAtNs. Times before 1970 are stored as 0: they are as
// expired as anything can be, and the index stays unsigned big-endian.
func appendExpiryKey(dst []byte, expireAtNs int64, k keys.Key) []byte {
	dst = append(dst, expiryPrefix...)
	dst = binary.BigEndian.AppendUint64(dst, expiryOrder(expireAtNs))
	return append(dst, k[:]...)
}

// expiryOrder is the expiry time as it is ordered in the index.
func expiryOrder(expireAtNs int64) uint64 {
	if expireAtNs < 0 {
		return 0
	}
	return uint64(expireAtNs)
}

// expiryUpperBound is the exclusive upper bound of the index entries that
// expire at or before nowNs. nowNs must be >= 0; +1 cannot overflow because
// a non-negative int64 is below MaxUint64.
func expiryUpperBound(nowNs int64) []byte {
	dst := append(make([]byte, 0, len(expiryPrefix)+8), expiryPrefix...)
	return binary.BigEndian.AppendUint64(dst, uint64(nowNs)+1)
}

// prefixEnd is the exclusive upper bound of every key starting with prefix.
// The prefixes here are ASCII, so the last byte can always be incremented.
func prefixEnd(prefix string) []byte {
	end := []byte(prefix)
	end[len(end)-1]++
	return end
}

// validateName reports whether s can be part of an index key and of a
// StoredMessage: what names the field (subject or client id) for the error.
// A NUL byte would make the client id index ambiguous, and proto3 strings
// must be UTF-8.
func validateName(what, s string) error {
	if i := strings.IndexByte(s, 0); i >= 0 {
		return fmt.Errorf("%w: %s %q has a NUL byte at offset %d; want UTF-8 without 0x00 bytes", ErrInvalidMessage, what, keys.Clip(s), i)
	}
	if !utf8.ValidString(s) {
		return fmt.Errorf("%w: %s %q is not valid UTF-8; want UTF-8 without 0x00 bytes", ErrInvalidMessage, what, keys.Clip(s))
	}
	return nil
}

// validateSubject checks a message's target subject.
func validateSubject(subject string) error {
	if subject == "" {
		return fmt.Errorf("%w: empty subject; want a target subject such as orders.reminder", ErrInvalidMessage)
	}
	return validateName("subject", subject)
}
