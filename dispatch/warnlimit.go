package dispatch

import (
	"sync"
	"time"
)

// publishWarnInterval is the least time between two warnings of failed
// publishes of one kind: while NATS is down every publish fails, and the
// outage is told once per interval with the count held back.
const publishWarnInterval = 10 * time.Second

// warnLimit lets one warning through per publishWarnInterval and counts
// the ones it holds back (see nats-server server/log.go RateLimitWarnf).
// The zero value is ready; it is safe for concurrent use.
type warnLimit struct {
	mu         sync.Mutex
	next       int64 // Unix ns before which warnings are held back
	suppressed uint64
}

// allow reports whether a warning at now (Unix ns) may be logged and, if
// so, how many were held back since the last one that was.
func (w *warnLimit) allow(now int64) (bool, uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if now < w.next {
		w.suppressed++
		return false, 0
	}
	n := w.suppressed
	w.next, w.suppressed = after(now, publishWarnInterval), 0
	return true, n
}
