package bridge

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"natsdelay/delaystore"
	"natsdelay/dispatch"
	"natsdelay/janitor"
)

// generation is one open store and everything that runs on it: the
// repository, the dispatcher, the janitor and the group-commit writer. A
// write to disk that fails ends a generation; recovery replaces it whole
// with one on a reopened store, because what the old one keeps in memory
// (pending counts, the last event id, flights, cursors) may no longer match
// what is on disk.
type generation struct {
	store delaystore.Store // watched: see watchedStore
	repo  *delaystore.Repository
	disp  *dispatch.Dispatcher
	jan   *janitor.Janitor
	w     *writer

	// failed is set by the first call that met delaystore.ErrFailed.
	failed atomic.Bool

	stopWorkOnce   sync.Once
	closeStoreOnce sync.Once
}

// fault is why the Service is not taking messages: the store failed.
type fault struct {
	cause error
}

// err is the 503 that requests get while the fault lasts.
func (f *fault) err(canReopen bool) error {
	if canReopen {
		return unavailable("storage failing: %v; recovering", f.cause)
	}
	return unavailable("storage failing: %v; no way to reopen the store: restart the service", f.cause)
}

// startGeneration opens the repository over st and starts a dispatcher, a
// janitor and a writer on it. With probe, it first checks that st takes a
// synced write, as a reopened store must before it takes messages again. On
// error it closes what it started and st.
func (s *Service) startGeneration(st delaystore.Store, probe bool) (*generation, error) {
	g := &generation{}
	g.store = &watchedStore{Store: st, onFail: func(err error) { s.fail(g, err) }}
	err := s.buildGeneration(g, probe)
	if err != nil {
		g.stopWork()
		err = errors.Join(err, g.closeStore())
		return nil, err
	}
	return g, nil
}

func (s *Service) buildGeneration(g *generation, probe bool) error {
	var err error
	g.repo, err = delaystore.OpenRepository(g.store, delaystore.RepositoryConfig{TimeBucket: s.cfg.TimeBucket, Logger: s.cfg.Logger})
	if err != nil {
		return fmt.Errorf("bridge: open repository: %w", err)
	}
	if probe {
		// NB: a store often opens fine on a disk that still fails (it only
		// reads); without this the service would flap between ready and
		// failing at each ingest.
		if err := g.repo.CheckWritable(); err != nil {
			return fmt.Errorf("bridge: reopened store: %w", err)
		}
	}
	g.disp, err = dispatch.New(dispatch.Config{
		Repo:              g.repo,
		Publisher:         s.pub,
		AckWait:           s.cfg.AckWait,
		MaxDeliver:        s.cfg.MaxDeliver,
		Backoff:           s.cfg.Backoff,
		DeadLetterSubject: s.cfg.DeadLetterSubject,
		DeadLetterExpired: s.cfg.DeadLetterExpired,
		MaxInFlight:       s.cfg.MaxInFlight,
		Observer:          s.m,
		Now:               s.cfg.Now,
		Logger:            s.cfg.Logger,
	})
	if err != nil {
		return err
	}
	g.jan, err = janitor.New(janitor.Config{Source: g.repo, Remover: g.disp, Interval: s.cfg.ExpiryInterval, Now: s.cfg.Now, Logger: s.cfg.Logger})
	if err != nil {
		return err
	}
	if err := g.disp.Start(); err != nil {
		return err
	}
	g.jan.Start()
	g.w = newWriter(g.repo, g.disp, s.cfg.MaxBatch, s.cfg.MaxBatchBytes, s.log, s.m.committed)
	return nil
}

// stopWork stops the writer, the janitor and the dispatcher, in that
// order. Nothing may hand the writer messages any more: see
// Service.retire and Service.Close. Safe to call twice.
func (g *generation) stopWork() {
	g.stopWorkOnce.Do(func() {
		if g.w != nil {
			g.w.close()
		}
		if g.jan != nil {
			_ = g.jan.Close()
		}
		if g.disp != nil {
			_ = g.disp.Close()
		}
	})
}

// closeStore closes the repository and the store, after stopWork. A
// failed store is not flushed: it would only report its fault again.
// The second call returns nil.
func (g *generation) closeStore() error {
	var errs []error
	g.closeStoreOnce.Do(func() {
		if g.repo != nil {
			errs = append(errs, g.repo.Close())
		}
		if !g.failed.Load() {
			errs = append(errs, g.store.Flush())
		}
		errs = append(errs, g.store.Close())
	})
	return errors.Join(errs...)
}

// fail puts the Service in the recovering state when a call on g's store
// met delaystore.ErrFailed: from now on ingest, ack syncs and the API
// answer 503 without touching the store, and Ready reports unavailable.
// It wakes the recovery loop. It does not block: it runs inside whatever
// call met the fault, a commit included.
func (s *Service) fail(g *generation, cause error) {
	s.stateMu.Lock()
	first := g.failed.CompareAndSwap(false, true)
	current := s.gen.Load() == g
	if first && current {
		s.fault.Store(&fault{cause: cause})
	}
	s.stateMu.Unlock()
	if !first || !current {
		// A generation still being built, on a reopened store, is
		// dropped by reopen, which logs why.
		return
	}
	s.m.storeFailures.Inc()
	s.log.Error("storage failing: taking no messages until the store is reopened", "err", cause, "reopen", s.cfg.Reopen != nil)
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// swap makes g, just started on a reopened store, the current generation
// and ends the fault, unless g has failed already. The retired
// generation's dispatch counters are kept, in the same step, so Stats
// neither counts them twice nor loses them.
func (s *Service) swap(g *generation) bool {
	s.stateMu.Lock()
	defer s.stateMu.Unlock()
	if g.failed.Load() {
		return false
	}
	s.keptMu.Lock()
	if old := s.gen.Load(); old != nil {
		s.keepStatsLocked(old.disp)
	}
	s.gen.Store(g)
	s.keptMu.Unlock()
	s.fault.Store(nil)
	return true
}

// storageErr is the 503 for a request the Service cannot take now
// because the store failed, or nil.
func (s *Service) storageErr() error {
	if f := s.fault.Load(); f != nil {
		return f.err(s.cfg.Reopen != nil)
	}
	return nil
}

// recoverLoop runs for the life of the Service: when the current
// generation has failed it retires it and, if Config.Reopen is set, opens
// the store again with backoff until it succeeds, then starts a new
// generation on it.
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
		if g == nil || !g.failed.Load() {
			continue
		}
		s.retire(g)
		if s.cfg.Reopen == nil {
			s.log.Error("storage failing and Config.Reopen is not set: the service stays unavailable until it is restarted")
			continue
		}
		first := time.Duration(0)
		if !recoveredAt.IsZero() && time.Since(recoveredAt) < stableAfter {
			wait = min(max(2*wait, s.cfg.ReopenBackoff), s.cfg.ReopenMaxBackoff)
			first = wait
			s.log.Warn("storage failed again soon after it recovered; waiting before reopening",
				"up_for", time.Since(recoveredAt).Round(time.Millisecond), "wait", first)
		} else {
			wait = 0
		}
		last, ok := s.reopen(first)
		if !ok {
			return
		}
		recoveredAt, wait = time.Now(), max(wait, last)
	}
}

// retire stops a failed generation and closes its store. Deliveries in
// flight are not lost: they are delivered again from the reopened store.
func (s *Service) retire(g *generation) {
	// NB: the fault was set before the loop was woken, so handlers that
	// take ingestMu from now on do not hand the writer anything; taking it
	// once waits for those that got in before.
	s.ingestMu.Lock()
	s.ingestMu.Unlock()
	g.stopWork()
	if err := g.closeStore(); err != nil {
		s.log.Warn("closing the failed store", "err", err)
	}
}

// reopen waits first, then opens the store again until it works or the
// Service closes, and swaps in a new generation. It returns the last wait
// between attempts (0 if the first worked) and false if the Service
// closed first.
func (s *Service) reopen(first time.Duration) (time.Duration, bool) {
	wait, last := s.cfg.ReopenBackoff, first
	timer := time.NewTimer(first)
	defer timer.Stop()
	select {
	case <-s.done:
		return 0, false
	case <-timer.C:
	}
	for attempt := 1; ; attempt++ {
		st, err := s.cfg.Reopen()
		var g *generation
		if err == nil {
			g, err = s.startGeneration(st, true)
		}
		if err == nil && s.swap(g) {
			s.log.Info("storage recovered: the store is open again", "attempts", attempt)
			return last, true
		}
		if err == nil {
			// It failed after the probe, before it took over.
			g.stopWork()
			err = errors.Join(errors.New("bridge: reopened store failed at once"), g.closeStore())
		}
		s.m.reopenFails.Inc()
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
