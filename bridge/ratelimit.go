package bridge

import (
	"sync"
	"time"
)

// warnInterval is the least time between two warnings of one kind that
// input from outside can cause at any rate.
const warnInterval = 10 * time.Second

// rateLimit lets one warning through per interval and counts the ones it
// holds back, so that a client repeating a mistake thousands of times a
// second is seen without flooding the log (see nats-server server/log.go
// RateLimitWarnf). The zero value is ready; it is safe for concurrent use.
type rateLimit struct {
	mu struct {
		sync.Mutex
		next       time.Time
		suppressed uint64
	}
}

// allow reports whether a warning at now may be logged and, if so, how
// many were held back since the last one that was.
func (r *rateLimit) allow(now time.Time) (bool, uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now.Before(r.mu.next) {
		r.mu.suppressed++
		return false, 0
	}
	n := r.mu.suppressed
	r.mu.suppressed = 0
	r.mu.next = now.Add(warnInterval)
	return true, n
}
