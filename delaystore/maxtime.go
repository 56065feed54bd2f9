package delaystore

import "time"

// MaxTime is the latest time a message may fire or expire at, and the
// last time a recurring schedule may plan an occurrence for. Times are
// stored as int64 Unix nanoseconds, which end at 2262-04-11T23:47:16Z:
// past that, time.Time.UnixNano wraps around to 1677, which would make a
// message due at once and list it in the past. MaxTime is a round date
// before the end, so that the limit is easy to state.
var MaxTime = time.Date(2262, time.January, 1, 0, 0, 0, 0, time.UTC)

// MaxTimeNs is MaxTime in Unix nanoseconds.
var MaxTimeNs = MaxTime.UnixNano()
