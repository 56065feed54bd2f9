package raftstore

import (
	"fmt"
	"sync"
	"time"
)

// The frame budget bounds the bytes of Raft requests a node holds at once,
// across all its connections. The guard (frames.go) bounds each request,
// but hashicorp/raft's transport decodes a request into memory, and holds
// it until it has answered it, on every connection at once: 128
// connections each sending a field just under the field bound would hold
// 16 GiB. So the guard reserves a request's bytes in the budget before it
// hands them on, and they stay reserved until the transport writes that
// request's answer (requests are answered in order on a connection), or
// the connection closes.
//
// A request waits for room while others hold the budget; one that finds
// no room within the stall timeout is refused, and its connection
// dropped, which gives back what it held: two requests that each hold
// part of the budget and wait for the rest cannot wait for each other for
// good. A request whose connection holds all that is held may take more
// than the budget: one request of the largest size the node sends itself
// (maxRequestBytes) must always pass. And a connection that holds nothing
// takes its first holdChunk without waiting, so that a heartbeat or a
// vote is never held up behind large requests: that is at most
// maxRaftConns times holdChunk (8 MiB) over the budget.

// frameBudget is the node's budget, shared by its guards.
type frameBudget struct {
	max int64

	mu      sync.Mutex
	held    int64
	peak    int64
	changed chan struct{} // closed and replaced when bytes are given back
}

func newFrameBudget(max int64) *frameBudget {
	return &frameBudget{max: max, changed: make(chan struct{})}
}

// acquire reserves n bytes for a connection that holds mine already. It
// waits for room, for at most timeout (0 for no bound), or until stop is
// closed.
func (b *frameBudget) acquire(n, mine int64, timeout time.Duration, stop <-chan struct{}) error {
	var expired <-chan time.Time
	for {
		b.mu.Lock()
		if b.held+n <= b.max || b.held == mine || mine == 0 && n <= holdChunk {
			b.held += n
			b.peak = max(b.peak, b.held)
			b.mu.Unlock()
			return nil
		}
		changed := b.changed
		b.mu.Unlock()
		if expired == nil && timeout > 0 {
			t := time.NewTimer(timeout)
			defer t.Stop()
			expired = t.C
		}
		select {
		case <-changed:
		case <-expired:
			return fmt.Errorf("%w: a request waited %v for room among the %d bytes of Raft requests the node holds at most", errFrame, timeout, b.max)
		case <-stop:
			return errGuardClosed
		}
	}
}

// release gives back n bytes.
func (b *frameBudget) release(n int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	b.held -= n
	close(b.changed)
	b.changed = make(chan struct{})
	b.mu.Unlock()
}

// usage is what the budget holds now, and the most it held at once.
func (b *frameBudget) usage() (held, peak int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.held, b.peak
}

// connHold is what one connection holds of the budget: the request under
// way, and those handed on and not answered yet, oldest first.
type connHold struct {
	budget *frameBudget

	mu       sync.Mutex
	current  int64
	unanswer []int64
	total    int64
}

// grow reserves n more bytes for the request under way.
func (h *connHold) grow(n int64, timeout time.Duration, stop <-chan struct{}) error {
	h.mu.Lock()
	mine := h.total
	h.mu.Unlock()
	if err := h.budget.acquire(n, mine, timeout, stop); err != nil {
		return err
	}
	h.mu.Lock()
	h.current += n
	h.total += n
	h.mu.Unlock()
	return nil
}

// passed records that the request under way was handed on whole: its
// bytes stay held until its answer.
func (h *connHold) passed() {
	h.mu.Lock()
	h.unanswer = append(h.unanswer, h.current)
	h.current = 0
	h.mu.Unlock()
}

// answered gives back the bytes of the oldest request not answered yet.
func (h *connHold) answered() {
	h.mu.Lock()
	if len(h.unanswer) == 0 {
		h.mu.Unlock()
		return
	}
	n := h.unanswer[0]
	h.unanswer = h.unanswer[1:]
	h.total -= n
	h.mu.Unlock()
	h.budget.release(n)
}

// releaseAll gives back everything, when the connection closes.
func (h *connHold) releaseAll() {
	h.mu.Lock()
	n := h.total
	h.current, h.unanswer, h.total = 0, nil, 0
	h.mu.Unlock()
	h.budget.release(n)
}
