// Package keys computes the 24-byte storage key of a scheduled message.
//
// # Layout
//
//	0               8               16              24
//	+---------------+---------------+---------------+
//	|   topicHash   |    bucket     |    eventID    |
//	+---------------+---------------+---------------+
//	 xxhash64(subj)   fireAtMs /      monotonic id
//	                  timeBucketMs
//
// Every field is a big-endian uint64. Big-endian makes the byte order of keys
// equal the numeric order of (topicHash, bucket, eventID), so all messages of
// one subject are one contiguous range, sorted by fire time and then by the
// order they were accepted in, and "everything of this subject that is due"
// is a single range scan from TopicLowerBound to DueUpperBound.
//
// When the time bucket is 0 the bucket is the fire time in raw milliseconds,
// so keys are ordered by exact fire time. A coarser bucket groups messages
// that fire close together; within a bucket they are ordered by eventID, and
// the dispatcher compares each message's own fire time before delivering it.
//
// The hex form of a key is the delivery tag that consumers see: 48 lowercase
// hex characters.
//
// The package only computes values: it does no I/O and keeps no state.
package keys
