package keys

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"unicode/utf8"

	"github.com/cespare/xxhash/v2"
)

// Len is the length of an encoded key in bytes. Keys of any other length in
// the store are not events (metadata and indexes), and scans skip them.
const Len = 24

// TagLen is the length of a key's tag form: two hex characters per byte.
const TagLen = 2 * Len

// Key is an event key. The zero Key is valid (topic 0, bucket 0, id 0) but is
// never produced for a real message, because event IDs start at 1.
type Key [Len]byte

// New builds a key from its three fields.
func New(topicHash, bucket, eventID uint64) Key {
	var k Key
	binary.BigEndian.PutUint64(k[0:8], topicHash)
	binary.BigEndian.PutUint64(k[8:16], bucket)
	binary.BigEndian.PutUint64(k[16:24], eventID)
	return k
}

// Make builds the key of a message for subject that fires at fireAtMs (Unix
// milliseconds), grouped into buckets of timeBucketMs (0 means raw
// milliseconds).
func Make(subject string, fireAtMs, timeBucketMs int64, eventID uint64) Key {
	return New(TopicHash(subject), Bucket(fireAtMs, timeBucketMs), eventID)
}

// TopicHash is the first field of every key of subject.
func TopicHash(subject string) uint64 { return xxhash.Sum64String(subject) }

// Bucket is the second field of a key for a message firing at fireAtMs. A
// negative fire time (before 1970) is clamped to bucket 0; timeBucketMs <= 0
// means raw milliseconds.
func Bucket(fireAtMs, timeBucketMs int64) uint64 {
	if fireAtMs < 0 {
		return 0
	}
	if timeBucketMs <= 0 {
		return uint64(fireAtMs)
	}
	return uint64(fireAtMs / timeBucketMs)
}

// BucketStartMs is the earliest fire time, in Unix milliseconds, that a
// message in bucket can have. Nothing in the bucket fires earlier, so it is a
// safe time to wake up and look.
func BucketStartMs(bucket uint64, timeBucketMs int64) int64 {
	if timeBucketMs <= 0 {
		timeBucketMs = 1
	}
	if bucket > uint64(math.MaxInt64/timeBucketMs) {
		return math.MaxInt64
	}
	return int64(bucket) * timeBucketMs
}

// Decode parses an encoded key. It returns ErrLength if b is not exactly Len
// bytes. The returned Key is a copy; b may be reused.
func Decode(b []byte) (Key, error) {
	var k Key
	if len(b) != Len {
		return k, fmt.Errorf("%w: got %d bytes", ErrLength, len(b))
	}
	copy(k[:], b)
	return k, nil
}

// TopicHash is the key's first field.
func (k Key) TopicHash() uint64 { return binary.BigEndian.Uint64(k[0:8]) }

// Bucket is the key's second field.
func (k Key) Bucket() uint64 { return binary.BigEndian.Uint64(k[8:16]) }

// EventID is the key's third field.
func (k Key) EventID() uint64 { return binary.BigEndian.Uint64(k[16:24]) }

// Bytes returns the encoded key as a new slice.
func (k Key) Bytes() []byte {
	b := make([]byte, Len)
	copy(b, k[:])
	return b
}

// Tag returns the key as 48 lowercase hex characters, the delivery tag.
func (k Key) Tag() string { return hex.EncodeToString(k[:]) }

// AppendTag appends the tag form to dst.
func (k Key) AppendTag(dst []byte) []byte { return hex.AppendEncode(dst, k[:]) }

// String returns the tag form.
func (k Key) String() string { return k.Tag() }

// ParseTag parses a delivery tag. It accepts exactly 48 lowercase hex
// characters and returns an error wrapping ErrTag for anything else.
func ParseTag(tag string) (Key, error) {
	var k Key
	if len(tag) != TagLen {
		return k, fmt.Errorf("%w: %q is %d characters, want %d lowercase hex characters", ErrTag, Clip(tag), len(tag), TagLen)
	}
	for i := 0; i < len(tag); i++ {
		c := tag[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return k, fmt.Errorf("%w: %q has %q at offset %d, want only 0-9 and a-f", ErrTag, Clip(tag), c, i)
		}
	}
	if _, err := hex.Decode(k[:], []byte(tag)); err != nil {
		return k, fmt.Errorf("%w: %v", ErrTag, err)
	}
	return k, nil
}

// Clip shortens hostile input before it is quoted in an error: to at most
// 64 bytes and "...", cut at a UTF-8 rune boundary so the result stays
// valid where s was.
func Clip(s string) string {
	const max = 64
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

// FireAtMs is the key time, in Unix milliseconds, of a message firing at
// fireAtNs (Unix nanoseconds): rounded up to the millisecond, so a key never
// sorts a message before its real fire time.
func FireAtMs(fireAtNs int64) int64 {
	// Not (ns + 999999) / 1e6, which overflows near the end of time.
	ms := fireAtNs / 1e6
	if fireAtNs%1e6 > 0 {
		ms++
	}
	return ms
}

// Successor is the smallest key greater than k, as an inclusive lower bound:
// the encoded key followed by a zero byte. It returns a new slice.
func (k Key) Successor() []byte {
	// One allocation, not two: appending to k.Bytes() grew its slice.
	s := make([]byte, Len+1)
	copy(s, k[:])
	return s
}

// TopicLowerBound is the inclusive lower bound of every key of topicHash: the
// 8-byte prefix [topicHash].
func TopicLowerBound(topicHash uint64) []byte {
	return binary.BigEndian.AppendUint64(make([]byte, 0, 8), topicHash)
}

// TopicUpperBound is the exclusive upper bound of every key of topicHash: the
// 8-byte prefix [topicHash+1]. For the last topic (all bits set) no 8-byte
// prefix is greater, so it returns nil, meaning "no upper bound": the keys
// that sort after the last topic are never 24 bytes long, so a scan that skips
// other lengths stays within the topic.
func TopicUpperBound(topicHash uint64) []byte {
	if topicHash == math.MaxUint64 {
		return nil
	}
	return binary.BigEndian.AppendUint64(make([]byte, 0, 8), topicHash+1)
}

// DueUpperBound is the exclusive upper bound of the keys of topicHash whose
// bucket is at or before the bucket of nowMs: [topicHash][bucket(now)+1]. It
// includes the whole current bucket, so with a coarse time bucket some keys
// below it are not yet due; callers compare each message's own fire time.
func DueUpperBound(topicHash uint64, nowMs, timeBucketMs int64) []byte {
	// NB: Bucket never exceeds MaxInt64, so b+1 cannot overflow.
	b := Bucket(nowMs, timeBucketMs)
	out := make([]byte, 0, 16)
	out = binary.BigEndian.AppendUint64(out, topicHash)
	return binary.BigEndian.AppendUint64(out, b+1)
}
