package bridge

import (
	"context"
	"sync/atomic"
	"time"
)

// Drain looks at the dispatcher's flights after drainPoll, then twice as
// long after each look, up to drainPollMax: a look goes through every
// flight under the dispatcher's lock (up to the window, 65,536 by
// default), and a move waits at most drainPollMax after the last answer
// settled.
const (
	drainPoll    = 5 * time.Millisecond
	drainPollMax = 100 * time.Millisecond
)

// heldTopics are the topics whose deliveries the service holds back while
// a cell of a fleet drains them before it hands them to another cell (see
// Drain). Unlike frozen topics, they take ingest, API requests and
// answers to their deliveries as ever: only new deliveries and
// redeliveries wait.
type heldTopics struct {
	f atomic.Pointer[func(topicHash uint64) bool]
	// inForce, if set (by tests), is called once a Drain's hold is in
	// force: the dispatcher has the rule that holds the topics back.
	inForce func()
}

// held reports whether the topic's deliveries are held back now.
func (h *heldTopics) held(topicHash uint64) bool {
	f := h.f.Load()
	return f != nil && (*f)(topicHash)
}

// undelivered is the dispatcher's Config.Frozen: the topics frozen, and
// those whose deliveries are held back.
func (s *Service) undelivered(topicHash uint64) bool {
	return s.frozen.frozen(topicHash) || s.held.held(topicHash)
}

// Drain holds back the deliveries of the topics keep accepts, by hash,
// for a cell of a fleet about to hand them to another cell, and waits
// until none of their deliveries is out unanswered, or answered with its
// settlement not yet committed (see dispatch.Dispatcher.Unsettled): an
// answer that comes now is applied here, and the cell that takes the
// messages does not deliver again one that was answered. It waits no
// longer than the ack wait, since a delivery unanswered that long is
// delivered again anyway; it returns then as when drained. Ingest and
// API requests go on meanwhile. It returns ctx's error, the hold lifted,
// if ctx ends first.
//
// The hold stays until release is called: the caller freezes the topics
// (SetFrozen) first, or gives the hand-over up. release may be called
// more than once.
func (s *Service) Drain(ctx context.Context, keep func(topicHash uint64) bool) (release func(), err error) {
	s.held.f.Store(&keep)
	release = func() {
		if s.held.f.CompareAndSwap(&keep, nil) {
			_ = s.reloadDelivery() // a core that is down reads it when it starts again
		}
	}
	if err := s.reloadDelivery(); err != nil {
		release()
		return nil, err
	}
	if s.held.inForce != nil {
		s.held.inForce()
	}
	var bound <-chan time.Time
	if c := s.core.Load(); c != nil {
		t := time.NewTimer(c.Config().Delivery.AckWait)
		defer t.Stop()
		bound = t.C
	}
	look := time.NewTimer(drainPoll)
	defer look.Stop()
	for every := drainPoll; !s.drained(keep); every = min(2*every, drainPollMax) {
		look.Reset(every)
		select {
		case <-ctx.Done():
			release()
			return nil, ctx.Err()
		case <-bound:
			s.log.Warn("deliveries of the partitions to hand over still unanswered after the ack wait: they count as unanswered, and are delivered again by the cell that takes them")
			return release, nil
		case <-look.C:
		}
	}
	return release, nil
}

// drained reports whether the dispatcher holds no flight of the topics
// keep accepts that a hand-over would undo (see Drain). A core that is
// down delivers nothing.
func (s *Service) drained(keep func(topicHash uint64) bool) bool {
	c := s.core.Load()
	if c == nil || c.Down() != nil {
		return true
	}
	d := c.Dispatcher()
	if d == nil {
		return true
	}
	n, sure := d.Unsettled(keep)
	return sure && n == 0
}
