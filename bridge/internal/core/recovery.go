package core

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/natsdelay/natsdelay/dispatch"
)

// fail puts the Service in the recovering state when a call on g's store
// met delaystore.ErrFailed: from now on Schedule, Ack and the reads return
// 503 without touching the store, and Ready reports unavailable. It wakes
// the recovery loop. It does not block: it runs inside whatever call met
// the fault, a commit included.
func (s *Service) fail(g *generation, cause error) {
	s.stateMu.Lock()
	first := g.failed.CompareAndSwap(false, true)
	current := s.gen.Load() == g
	if first && current && s.down.Load() == nil {
		s.setDown(&downState{cause: cause})
	}
	s.stateMu.Unlock()
	if !first || !current {
		// A generation still being built, on a reopened store, is
		// dropped by reopen, which logs why.
		return
	}
	if s.deps.metrics != nil {
		s.deps.metrics.StoreFailed()
	}
	s.log.Error("storage failing: taking no messages until the store is reopened", "err", cause, "reopen", s.deps.reopen != nil)
	s.wake()
}

func (s *Service) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// swap makes g, just started on a reopened store, the current generation
// and ends the fault, unless g has failed already or the Service was
// suspended meanwhile. The retired generation's dispatch counters are
// kept, in the same step, so Stats neither counts them twice nor loses
// them.
func (s *Service) swap(g *generation) bool {
	s.stateMu.Lock()
	defer s.stateMu.Unlock()
	if d := s.down.Load(); g.failed.Load() || (d != nil && d.suspended) {
		return false
	}
	s.keptMu.Lock()
	if d := s.gen.Load().disp; d != nil {
		addStats(&s.kept, d.Stats())
	}
	s.gen.Store(g)
	s.keptMu.Unlock()
	s.setDown(nil)
	g.serving.Store(true)
	if g.disp != nil {
		// NB: its loop, fenced until now, would look again only after
		// its retry.
		g.disp.FenceLifted()
	}
	return true
}

// setDown records why the Service takes no work, or nil when it takes work
// again, and wakes WaitUp's callers when it does. stateMu must be held.
func (s *Service) setDown(d *downState) {
	was := s.down.Load()
	switch {
	case d == nil && was != nil:
		close(s.up)
	case d != nil && was == nil:
		s.up = make(chan struct{})
	}
	s.down.Store(d)
}

// WaitUp waits until the Service takes work: it is not down (a storage
// fault being recovered, Suspend, a Resume still reopening). It returns
// nil then, or an error if ctx ends or the Service stops first. A leader
// that just resumed calls it before it lets clients in, so that they do
// not meet the 503 of a store being reopened.
func (s *Service) WaitUp(ctx context.Context) error {
	for {
		s.stateMu.Lock()
		up, down := s.up, s.down.Load()
		s.stateMu.Unlock()
		if down == nil {
			return nil
		}
		select {
		case <-up:
		case <-ctx.Done():
			return fmt.Errorf("core: waiting for the store: %w (%v)", ctx.Err(), down.cause)
		case <-s.done:
			return unavailable("shutting down")
		}
	}
}

// Suspend stops the current generation for reason (leadership lost, say)
// as a storage fault would: the writer commits and answers what it took,
// the dispatcher and the janitor stop, and the store is closed; from then
// on calls get a 503 "suspended: <reason>" until Resume. It blocks until
// the generation has stopped. Suspending a suspended Service only changes
// the reason.
func (s *Service) Suspend(reason error) {
	s.stateMu.Lock()
	s.setDown(&downState{cause: reason, suspended: true})
	g := s.gen.Load()
	s.stateMu.Unlock()
	s.retire(g)
}

// Resume ends a Suspend: the recovery loop opens the store again through
// the reopen given by WithReopen, with backoff, and starts a new
// generation on it. It returns at once; Ready says when the Service is
// back. Without a reopen the Service stays down. Resume on a Service that is not
// suspended does nothing.
func (s *Service) Resume() {
	s.stateMu.Lock()
	if d := s.down.Load(); d != nil && d.suspended {
		// The store is closed; until the loop reopens it, calls get
		// the 503 of a fault being recovered.
		s.setDown(&downState{cause: errors.New("resuming")})
	}
	s.stateMu.Unlock()
	s.wake()
}

// recoverLoop runs for the life of the Service: when the current
// generation has failed or was suspended and resumed, it retires it and,
// given a reopen (WithReopen), opens the store again with backoff until it
// succeeds, then starts a new generation on it.
//
// A store that fails again soon after it was reopened (a disk still
// nearly full takes a few commits, then fails) does not start the backoff
// over: the loop waits as long as the last wait, doubled up to
// ReopenMaxBackoff, before it reopens, so a fault that outlives its
// reopens costs one cycle per ReopenMaxBackoff, not a busy loop of
// reopens and log lines. A generation that ran for stableAfter without
// failing resets the backoff.
func (s *Service) recoverLoop() {
	var (
		recoveredAt time.Time     // when the last reopen succeeded
		wait        time.Duration // the last wait before a reopen
	)
	stableAfter := 10 * s.cfg.ReopenMaxBackoff
	for {
		select {
		case <-s.done:
			return
		case <-s.kick:
		}
		g := s.gen.Load()
		d := s.down.Load()
		if d == nil || d.suspended || (!g.failed.Load() && !g.retired.Load()) {
			continue
		}
		s.retire(g)
		if s.deps.reopen == nil {
			s.log.Error("store closed and no reopen was given (WithReopen): the service stays unavailable until it is restarted")
			continue
		}
		first := time.Duration(0)
		if g.failed.Load() && !recoveredAt.IsZero() && time.Since(recoveredAt) < stableAfter {
			wait = min(max(2*wait, s.cfg.ReopenBackoff), s.cfg.ReopenMaxBackoff)
			first = wait
			s.log.Warn("storage failed again soon after it recovered; waiting before reopening",
				"up_for", time.Since(recoveredAt).Round(time.Millisecond), "wait", first)
		} else {
			wait = 0
		}
		last, ok := s.reopen(first, g.failed.Load())
		if !ok {
			return
		}
		recoveredAt, wait = time.Now(), max(wait, last)
	}
}

// retire stops a generation and closes its store. Deliveries in flight
// are not lost: they are delivered again from the reopened store.
func (s *Service) retire(g *generation) {
	// NB: down was set before, so Schedule calls that take workMu from now
	// on do not hand the writer anything; taking it waits for those that
	// got in before.
	s.workMu.Lock()
	g.retired.Store(true)
	s.workMu.Unlock()
	if err := errors.Join(g.stopWork(), g.closeStore()); err != nil {
		s.log.Warn("closing the store", "err", err)
	}
}

// beforeSwap, if set, is called with the dispatcher of a generation
// started on a reopened store, before reopen swaps it in. Tests only.
var beforeSwap func(*dispatch.Dispatcher)

// reopen waits first, then opens the store again until it works, the
// Service is suspended or it stops, and swaps in a new generation. It
// returns the last wait between attempts (0 if the first worked) and false
// if the Service stopped first. afterFault says why the store was closed:
// a storage fault, or a suspension (a node of a cluster that stopped
// leading) that was lifted.
func (s *Service) reopen(first time.Duration, afterFault bool) (time.Duration, bool) {
	wait, last := s.cfg.ReopenBackoff, first
	timer := time.NewTimer(first)
	defer timer.Stop()
	select {
	case <-s.done:
		return 0, false
	case <-timer.C:
	}
	for attempt := 1; ; attempt++ {
		if d := s.down.Load(); d != nil && d.suspended {
			return last, true
		}
		st, err := s.deps.reopen()
		var g *generation
		if err == nil {
			g, err = s.startGeneration(st, true)
		}
		if err == nil && beforeSwap != nil {
			beforeSwap(g.disp)
		}
		if err == nil && s.swap(g) {
			if afterFault {
				s.log.Info("storage recovered: the store is open again", "attempts", attempt)
			} else {
				s.log.Info("resumed on the store", "attempts", attempt)
			}
			return last, true
		}
		if d := s.down.Load(); err == nil && d != nil && d.suspended {
			if err := errors.Join(g.stopWork(), g.closeStore()); err != nil {
				s.log.Warn("closing the store", "err", err)
			}
			return last, true
		}
		if err == nil {
			// It failed after the probe, before it took over.
			err = errors.Join(errors.New("core: reopened store failed at once"), g.stopWork(), g.closeStore())
		}
		if s.deps.metrics != nil {
			s.deps.metrics.ReopenFailed()
		}
		s.log.Warn("reopening the store failed; retrying", "err", err, "attempt", attempt, "retry_in", wait)
		timer.Reset(wait)
		select {
		case <-s.done:
			return 0, false
		case <-timer.C:
		}
		last = wait
		wait = min(2*wait, s.cfg.ReopenMaxBackoff)
	}
}
