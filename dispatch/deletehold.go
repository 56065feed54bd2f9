package dispatch

import (
	"sync"
	"time"
)

// deleteHoldTail is how long after a staged burst's publishes end the
// deleter still holds its commits: the burst's deliveries are still on
// their way to the consumers, whose ACKs these are.
const deleteHoldTail = 20 * time.Millisecond

// burstHold keeps the deleter's commits out of a staged burst. A burst of
// thousands of occurrences goes out in tens of milliseconds, and its ACKs
// come back while it does: committing their deletes then takes the CPU
// that the burst's last deliveries, and the consumers reading them, wait
// for. A delete is not urgent (it is written without fsync, and one lost
// is a redelivery), so the deleter waits for the burst, at most
// Config.DeleteHold, and deletes after it.
type burstHold struct {
	most time.Duration // 0 or less: never hold

	mu sync.Mutex
	// over is closed when the burst's publishes end; nil while none is
	// out.
	over chan struct{}
	// endedAt is when the last burst's publishes ended.
	endedAt time.Time
	// held counts the times the deleter waited (for tests).
	held uint64
}

// begin notes that a staged burst starts to publish.
func (h *burstHold) begin() {
	if h.most <= 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.over == nil {
		h.over = make(chan struct{})
	}
}

// end notes that the burst's publishes ended.
func (h *burstHold) end() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.over != nil {
		close(h.over)
		h.over = nil
		h.endedAt = time.Now()
	}
}

// wait returns once no burst publishes and deleteHoldTail has passed
// since the last one ended, once it has waited h.most, or once done is
// closed.
func (h *burstHold) wait(done <-chan struct{}) {
	if h.most <= 0 {
		return
	}
	h.mu.Lock()
	over := h.over
	if over == nil && h.tailLeftLocked() <= 0 {
		h.mu.Unlock()
		return
	}
	h.held++
	h.mu.Unlock()
	deadline := time.NewTimer(h.most)
	defer deadline.Stop()
	if over != nil {
		select {
		case <-over:
		case <-deadline.C:
			return
		case <-done:
			return
		}
	}
	h.mu.Lock()
	rest := h.tailLeftLocked()
	h.mu.Unlock()
	if rest <= 0 {
		return
	}
	tail := time.NewTimer(rest)
	defer tail.Stop()
	select {
	case <-tail.C:
	case <-deadline.C:
	case <-done:
	}
}

// tailLeftLocked is how much of the tail after the last burst is left.
// mu must be held.
func (h *burstHold) tailLeftLocked() time.Duration {
	return time.Until(h.endedAt.Add(min(deleteHoldTail, h.most)))
}

// heldCount is how many times the deleter waited for a burst.
func (h *burstHold) heldCount() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.held
}
