package core

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/dispatch"
	"github.com/natsdelay/natsdelay/keys"
)

// Service runs the life of the service on one store at a time: see the
// package doc. It is safe for concurrent use.
//
// # Storage faults
//
// When a write to disk fails (delaystore.ErrFailed: a failed WAL write or
// fsync, a full disk), the Service recovers by itself: Schedule, Ack and
// the reads return a 503 "storage failing: <cause>; recovering" at once,
// Ready reports unavailable, and delivery stops. The recovery loop closes
// the failed store and opens it again through the reopen given to Open (WithReopen), with backoff,
// until that works, then starts a new generation on it. Deliveries that
// were in flight are delivered again (at least once).
type Service struct {
	cfg Config
	pub dispatch.Publisher // every generation's dispatcher publishes through it
	log *slog.Logger
	// deps are what Open was given besides the store and publisher.
	deps deps

	// gen is the current generation: the store and what runs on it. It is
	// replaced whole by recovery and Resume; see generation. Never nil
	// after Open.
	gen atomic.Pointer[generation]
	// down is non-nil while the Service takes no work: the store failed,
	// or Suspend was called.
	down atomic.Pointer[downState]
	// up is closed while down is nil, and replaced by an open channel
	// when down is set; see setDown. Guarded by stateMu.
	up chan struct{}
	// stateMu orders setting down against swapping in a generation, so a
	// new generation that fails at once keeps the Service recovering, and
	// one that comes up after Suspend is dropped.
	stateMu sync.Mutex
	// kept holds the counters of dispatchers of retired generations, so
	// Stats counts from the start of the process. keptMu also orders
	// swapping gen against reading it with kept. Lock order: stateMu, then
	// keptMu.
	keptMu sync.Mutex
	kept   dispatch.Stats
	// memReleases counts the times memory was handed back after a burst
	// (see Config.IdleRelease), over every generation.
	memReleases atomic.Uint64

	// workMu orders handing work to a generation against retiring it:
	// Schedule holds it shared, Stop takes it to set stopping, and retire
	// takes it to wait for calls that got in before the fault.
	workMu   sync.RWMutex
	stopping bool

	stopOnce  sync.Once
	stopErr   error // the current generation's stopWork, for Close
	closeOnce sync.Once
	closeErr  error

	// kick wakes the recovery loop; cap 1: one pending wake-up is enough.
	kick chan struct{}
	done chan struct{}
	wg   sync.WaitGroup
}

// An Option gives Open a dependency of the Service: something it uses,
// where Config holds what it is told.
type Option func(*deps)

type deps struct {
	metrics Metrics
	reopen  func() (delaystore.Store, error)
}

// WithMetrics has the Service tell m about its commits and storage faults.
func WithMetrics(m Metrics) Option { return func(d *deps) { d.metrics = m } }

// WithReopen gives the Service reopen, which opens the store again, with
// the same settings, after a write to disk failed it
// (delaystore.ErrFailed), or for Resume. The Service closes the old store
// first, then calls reopen with backoff until it succeeds, and owns each
// store it returns. Without it the Service stays unavailable after such a
// failure until it is closed.
func WithReopen(reopen func() (delaystore.Store, error)) Option {
	return func(d *deps) { d.reopen = reopen }
}

// downState is why the Service takes no work.
type downState struct {
	cause error
	// suspended is set by Suspend, and cleared only by Resume; otherwise
	// the store failed.
	suspended bool
}

// Open validates cfg, opens the repository over store, which the Service
// owns from here on (Close closes it, also when Open fails), and starts
// the first generation, whose dispatcher publishes through pub, and the
// recovery loop. On error everything started is stopped and the store is
// closed. cfg holds the settings; opts give what the Service uses besides
// store and pub.
func Open(store delaystore.Store, pub dispatch.Publisher, cfg Config, opts ...Option) (*Service, error) {
	err := cfg.Validate()
	if store == nil {
		err = errors.Join(err, fmt.Errorf("%w: no store", ErrInvalidConfig))
	}
	if pub == nil {
		err = errors.Join(err, fmt.Errorf("%w: no publisher", ErrInvalidConfig))
	}
	var d deps
	for _, o := range opts {
		o(&d)
	}
	if cfg.StartSuspended != nil && d.reopen == nil {
		err = errors.Join(err, fmt.Errorf("%w: StartSuspended needs WithReopen, to open the store at Resume", ErrInvalidConfig))
	}
	if err != nil {
		if store != nil {
			err = errors.Join(err, store.Close())
		}
		return nil, err
	}
	cfg = cfg.withDefaults()
	cfg.Limits = slices.Clone(cfg.Limits)
	s := &Service{cfg: cfg, pub: pub, deps: d, log: cfg.Logger.With("component", "core"), kick: make(chan struct{}, 1), done: make(chan struct{})}
	s.up = make(chan struct{})
	if cfg.StartSuspended != nil {
		s.gen.Store(s.idleGeneration(store))
		s.down.Store(&downState{cause: cfg.StartSuspended, suspended: true})
		s.goFunc(s.recoverLoop)
		return s, nil
	}
	close(s.up)
	g, err := s.startGeneration(store, false)
	if err != nil {
		return nil, err
	}
	s.gen.Store(g)
	s.goFunc(s.recoverLoop)
	return s, nil
}

// goFunc runs f in a goroutine that Stop waits for.
func (s *Service) goFunc(f func()) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f()
	}()
}

// MemoryReleases is how many times the Service has handed memory back
// after a burst of writes since Open (see Config.IdleRelease).
func (s *Service) MemoryReleases() uint64 { return s.memReleases.Load() }

// Config returns the configuration in use, with the defaults filled in.
// Its slices must not be modified.
func (s *Service) Config() Config { return s.cfg }

// Ready reports whether the Service can take and deliver messages: it is
// not stopping, its store has not failed, it is not suspended, and its
// dispatcher is delivering (see dispatch.Dispatcher.Health). The error,
// wrapping wire.ErrUnavailable, says which.
func (s *Service) Ready() error {
	if err := s.unavailable(); err != nil {
		return err
	}
	if err := s.gen.Load().disp.Health(); err != nil {
		return unavailable("%v", err)
	}
	return nil
}

// Down returns why the Service takes no work (the store's fault, or the
// reason given to Suspend), or nil while it does.
func (s *Service) Down() error {
	if d := s.down.Load(); d != nil {
		return d.cause
	}
	return nil
}

// unavailable is the 503 for a call the Service cannot take now, or nil.
func (s *Service) unavailable() error {
	s.workMu.RLock()
	stopping := s.stopping
	s.workMu.RUnlock()
	if stopping {
		return unavailable("shutting down")
	}
	return s.downErr()
}

// downErr is the 503 while the Service is down, or nil.
func (s *Service) downErr() error {
	d := s.down.Load()
	switch {
	case d == nil:
		return nil
	case d.suspended && errors.Is(d.cause, delaystore.ErrNotLeader):
		return unavailable("%s", delaystore.NotLeaderText(d.cause))
	case d.suspended:
		return unavailable("suspended: %v", d.cause)
	case s.deps.reopen != nil:
		return unavailable("storage failing: %v; recovering", d.cause)
	default:
		return unavailable("storage failing: %v; no way to reopen the store: restart the service", d.cause)
	}
}

// Repository is the event repository of the current generation. After a
// storage fault it is replaced by one on the reopened store. It is nil
// while a Service opened with Config.StartSuspended has not run a
// generation yet.
func (s *Service) Repository() *delaystore.Repository { return s.gen.Load().repo }

// Dispatcher is the dispatcher of the current generation; see Stats for
// counters that survive a new generation. Nil as Repository is.
func (s *Service) Dispatcher() *dispatch.Dispatcher { return s.gen.Load().disp }

// NewSnapshot opens an iterator on one consistent view of the whole
// store, for a backup: every write committed before it returns is in the
// view, and none made after. The caller must close it, promptly: it pins
// the engine's files. After a storage fault it is on the store that
// failed, whose Close ends it.
func (s *Service) NewSnapshot() (delaystore.Iterator, error) {
	if err := s.downErr(); err != nil {
		return nil, err
	}
	it, err := s.gen.Load().store.NewIter(delaystore.IterOptions{})
	if err != nil {
		return nil, unavailable("opening a view of the store: %v", err)
	}
	return it, nil
}

// SubjectState is what the current dispatcher knows of subject now: its
// deliveries in flight, and whether it is held at its in-flight limit.
func (s *Service) SubjectState(subject string) dispatch.SubjectState {
	if d := s.gen.Load().disp; d != nil {
		return d.Subject(subject)
	}
	return dispatch.SubjectState{}
}

// LimitedSubjects returns up to n of the subjects held at their in-flight
// limit, in subject order.
func (s *Service) LimitedSubjects(n int) []string {
	if d := s.gen.Load().disp; d != nil {
		return d.LimitedSubjects(n)
	}
	return nil
}

// Stats returns the dispatch counters since Open, across generations, and
// the deliveries in flight now.
func (s *Service) Stats() dispatch.Stats {
	s.keptMu.Lock()
	d, k := s.gen.Load().disp, s.kept
	s.keptMu.Unlock()
	var st dispatch.Stats
	if d != nil {
		st = d.Stats()
	}
	addStats(&st, k)
	return st
}

// addStats adds the counters of b to a; the gauges (InFlight, Topics,
// Limited) are a's.
func addStats(a *dispatch.Stats, b dispatch.Stats) {
	a.Delivered += b.Delivered
	a.Redelivered += b.Redelivered
	a.Acked += b.Acked
	a.Nacked += b.Nacked
	a.Progress += b.Progress
	a.Termed += b.Termed
	a.Failed += b.Failed
	a.DeadLettered += b.DeadLettered
	a.Expired += b.Expired
	a.Canceled += b.Canceled
	a.NoResponders += b.NoResponders
	a.Undeliverable += b.Undeliverable
	a.Evicted += b.Evicted
	a.Skipped += b.Skipped
	a.PlannedAhead += b.PlannedAhead
	a.PlannedOnDelivery += b.PlannedOnDelivery
	a.Withdrawn += b.Withdrawn
	a.Fenced += b.Fenced
	a.FencedPasses += b.FencedPasses
	a.HandedOff += b.HandedOff
	a.StagedPasses += b.StagedPasses
}

// Schedule hands msg to the group commit and returns at once; done is told
// the outcome once the batch is committed. It blocks only while the bytes
// waiting to be committed are at their bound. When the Service cannot take
// it (stopping, down) it returns a 503 error and done is not called. The
// Service owns msg from then on.
func (s *Service) Schedule(msg *delaystore.StoredMessage, done ScheduleFunc) error {
	return s.ScheduleOnce(delaystore.Once{Msg: msg}, func(res delaystore.Outcome, err error) { done(res.Key, err) })
}

// ScheduleOnce is Schedule with the duplicate window (Config.DedupWindow):
// done is told the outcome, which is the first answer when o is a resend
// (see delaystore.Repository.ScheduleOnce).
func (s *Service) ScheduleOnce(o delaystore.Once, done OnceFunc) error {
	s.workMu.RLock()
	defer s.workMu.RUnlock()
	if s.stopping {
		return unavailable("shutting down")
	}
	if err := s.downErr(); err != nil {
		return err
	}
	s.gen.Load().w.submitOne(scheduleRequest{once: o, done: done})
	return nil
}

// ScheduleOnceAll is ScheduleOnce for each message of os, in order, with
// dones[i] told the outcome of os[i]: they reach the group commit as one
// hand-over, so that its next batch takes them all (up to its bounds)
// rather than whichever it finds when it wakes for the first. On an error
// none was taken and no done is called.
func (s *Service) ScheduleOnceAll(os []delaystore.Once, dones []OnceFunc) error {
	if len(os) != len(dones) {
		return fmt.Errorf("core: %d messages and %d dones", len(os), len(dones))
	}
	if len(os) == 0 {
		return nil
	}
	s.workMu.RLock()
	defer s.workMu.RUnlock()
	if s.stopping {
		return unavailable("shutting down")
	}
	if err := s.downErr(); err != nil {
		return err
	}
	rs := make([]scheduleRequest, len(os))
	for i, o := range os {
		rs[i] = scheduleRequest{once: o, done: dones[i]}
	}
	s.gen.Load().w.submit(rs)
	return nil
}

// Ack applies a consumer's answer to the delivery k. It returns a 503 at
// once if the answer cannot be stored now (the message is delivered again
// once the store is back), else done, if not nil, is told the outcome: nil
// also for an answer that came too late to matter (a duplicate, or for a
// message no longer in flight), else an error wrapping wire.ErrUnavailable.
func (s *Service) Ack(k keys.Key, a dispatch.Ack, done func(error)) error {
	if err := s.downErr(); err != nil {
		return err
	}
	if done == nil {
		s.gen.Load().disp.Ack(k, a, nil)
		return nil
	}
	s.gen.Load().disp.Ack(k, a, func(err error) {
		if err != nil && !errors.Is(err, dispatch.ErrUnknownTag) && !errors.Is(err, dispatch.ErrNotInFlight) {
			done(unavailable("ack not applied: %v", err))
			return
		}
		done(nil)
	})
	return nil
}

// NoResponders tells the dispatcher that the delivery k reached no
// subscriber; see dispatch.Dispatcher.NoResponders.
func (s *Service) NoResponders(k keys.Key) bool {
	d := s.gen.Load().disp
	return d != nil && d.NoResponders(k)
}

// Cancel deletes a pending message so it is never delivered. It returns a
// 404 error if there is none under k.
//
// Canceling an occurrence of a recurring schedule ends the schedule: when
// the occurrence went out already, its successor is stored, and is
// canceled too (see dispatch.Dispatcher.Cancel).
func (s *Service) Cancel(ctx context.Context, k keys.Key) error {
	if err := s.downErr(); err != nil {
		return err
	}
	g := s.gen.Load()
	ok, err := g.disp.Cancel(ctx, k)
	if err != nil {
		return unavailable("canceling %s: %v", k, err)
	}
	if !ok {
		return fmt.Errorf("%w: no pending message with tag %s", wire.ErrNotFound, k)
	}
	return nil
}

// Lookup finds the key of the pending message of subject with the client
// id, or returns a 404 error.
func (s *Service) Lookup(subject, id string) (keys.Key, error) {
	if err := s.downErr(); err != nil {
		return keys.Key{}, err
	}
	k, err := s.gen.Load().repo.Lookup(subject, id)
	if errors.Is(err, delaystore.ErrNotFound) {
		// A schedule without a Delay-Id goes by the tag of its first
		// occurrence.
		k, err = s.gen.Load().repo.LookupSchedule(subject, id)
	}
	if errors.Is(err, delaystore.ErrNotFound) {
		return k, fmt.Errorf("%w: no pending message with subject %q and id %q", wire.ErrNotFound, keys.Clip(subject), keys.Clip(id))
	}
	if err != nil {
		return k, unavailable("looking up %q: %v", keys.Clip(id), err)
	}
	return k, nil
}

// Get returns the pending message k, with the attempt of a delivery in
// flight, or a 404 error. The message is the caller's.
func (s *Service) Get(k keys.Key) (*delaystore.StoredMessage, error) {
	if err := s.downErr(); err != nil {
		return nil, err
	}
	g := s.gen.Load()
	m, err := g.repo.Get(k)
	if errors.Is(err, delaystore.ErrNotFound) {
		return nil, fmt.Errorf("%w: no pending message with tag %s", wire.ErrNotFound, k)
	}
	if err != nil {
		return nil, unavailable("reading %s: %v", k, err)
	}
	m.Attempt = max(m.Attempt, g.disp.Attempt(k))
	return m, nil
}

// List calls yield for the pending messages of subject in key order, from
// the key from on (nil: the first), until yield returns false. Each
// message has the attempt of a delivery in flight and is the caller's.
func (s *Service) List(subject string, from []byte, yield func(keys.Key, *delaystore.StoredMessage) bool) error {
	if err := s.downErr(); err != nil {
		return err
	}
	g := s.gen.Load()
	err := g.repo.ScanTopic(keys.TopicHash(subject), from, nil, func(k keys.Key, m *delaystore.StoredMessage) bool {
		if m.Subject != subject {
			return true // another subject with the same hash
		}
		m.Attempt = max(m.Attempt, g.disp.Attempt(k))
		return yield(k, m)
	})
	if err != nil {
		return unavailable("listing %q: %v", keys.Clip(subject), err)
	}
	return nil
}

// ScanTopics yields the subjects with pending messages and their counts,
// in subject order, from the first at or after from ("" for all), until
// yield returns false, reading the subject registry in the store.
func (s *Service) ScanTopics(from string, yield func(delaystore.Topic) bool) error {
	if err := s.downErr(); err != nil {
		return err
	}
	if err := s.gen.Load().repo.ScanTopics(from, yield); err != nil {
		return unavailable("listing subjects: %v", err)
	}
	return nil
}

// DueNow counts the pending messages of subject that are due now, exact to
// the time bucket, by key alone. Subjects whose topic hashes collide
// share a key range, and each is given the due count of both.
func (s *Service) DueNow(subject string) (uint64, error) {
	if err := s.downErr(); err != nil {
		return 0, err
	}
	n, err := s.gen.Load().repo.CountDue(keys.TopicHash(subject), s.cfg.Now().UnixMilli())
	if err != nil {
		return 0, unavailable("counting due messages of %q: %v", keys.Clip(subject), err)
	}
	return n[0], nil
}

// Counts counts pending messages: the totals kept in memory with the
// subject registry, and those due now and within the next minute, hour
// and day from the due counts kept per second in the store, plus the due
// index entries of the partial second each window ends in. It reads no
// message and nothing per subject, so it costs the same with one subject
// or ten million.
func (s *Service) Counts() (wire.Counts, error) {
	if err := s.downErr(); err != nil {
		return wire.Counts{}, err
	}
	g := s.gen.Load()
	c := wire.Counts{Pending: g.repo.Pending(), Subjects: int(g.repo.Subjects()), InFlight: g.disp.Stats().InFlight, Schedules: g.repo.Schedules(), Dead: g.repo.Dead()}
	now := s.cfg.Now()
	n, err := g.repo.CountDueAll(now.UnixMilli(), now.Add(time.Minute).UnixMilli(), now.Add(time.Hour).UnixMilli(), now.Add(24*time.Hour).UnixMilli())
	if err != nil {
		return c, unavailable("counting messages: %v", err)
	}
	c.DueNow = n[0]
	c.NextMinute = n[1] - n[0]
	c.NextHour = n[2] - n[0]
	c.NextDay = n[3] - n[0]
	return c, nil
}

// ScheduleRefs lists up to limit recurring schedules from the schedule
// index, in (subject, name) order: of subject only when it is set, after
// (afterSubject, afterName) when afterSubject is set.
func (s *Service) ScheduleRefs(subject, afterSubject, afterName string, limit int) ([]delaystore.ScheduleRef, error) {
	if err := s.downErr(); err != nil {
		return nil, err
	}
	refs, err := s.gen.Load().repo.ScheduleRefs(subject, afterSubject, afterName, limit)
	if err != nil {
		return nil, unavailable("listing schedules: %v", err)
	}
	return refs, nil
}

// Stop turns new work away, stops the recovery loop, and stops the
// current generation's work: the writer commits and answers what it took,
// then the janitor stops, then the dispatcher (its publishes finish and
// pending deletes are flushed). The store stays open until Close, which
// returns the errors of stopping. Safe to call twice.
func (s *Service) Stop() {
	s.stopOnce.Do(func() {
		s.workMu.Lock()
		s.stopping = true
		s.workMu.Unlock()
		// Recovery stops first, so the generation below is the last.
		close(s.done)
		s.wg.Wait()
		s.stopErr = s.gen.Load().stopWork()
	})
}

// Close stops the Service (see Stop) and closes the store. It is safe to
// call twice; the second call returns the result of the first.
func (s *Service) Close() error {
	s.closeOnce.Do(func() {
		s.Stop()
		s.closeErr = errors.Join(s.stopErr, s.gen.Load().closeStore())
	})
	return s.closeErr
}

// committed is the writer's hook.
func (s *Service) committed(batch int, took time.Duration, err error) {
	if s.deps.metrics != nil {
		s.deps.metrics.Committed(batch, took, err)
	}
}
