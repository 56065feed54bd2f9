package dispatch

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/keys"
)

// never is the due time of a topic with nothing known to be pending.
const never = math.MaxInt64

// outgoing is one delivery prepared by a pass.
type outgoing struct {
	f   *flight
	msg *delaystore.StoredMessage
	// attempt and lateness are the delivery's, set once it is published,
	// for counting it once its flush tells that it reached someone.
	attempt  uint32
	lateness time.Duration
	// held: the message fell due while its topic was held back.
	held bool
}

// Dispatcher publishes due messages and tracks them until they are settled.
// It is safe for concurrent use. Start it with Start and stop it with Close.
type Dispatcher struct {
	cfg      Config
	repo     *delaystore.Repository
	pub      Publisher
	log      *slog.Logger
	bucketMs int64
	del      *deleter
	stats    counters

	// mu guards the dispatcher's state, kept in named parts: the subjects
	// with something to do (subjectTable), the deliveries in flight
	// (flightTable), how far the due index has been read (dueFrontier) and
	// the occurrences planned ahead (aheadTable). Each part's methods are
	// what is done to its state; the dispatcher's only order them. One
	// lock, because a pass moves a message from one part to the next in
	// one step.
	mu struct {
		sync.Mutex
		subjects subjectTable
		flights  flightTable
		frontier dueFrontier
		ahead    aheadTable
		pass     uint64
		started  bool
		closed   bool
		// passStart is when the pass under way began, 0 between passes;
		// wakeBy is when the loop, between passes, is due to run again.
		// Health reads them.
		passStart int64
		wakeBy    int64
		// reloadPass is the pass under way at the last ReloadLimits, if
		// one was: until it ends, the limits it began with may still
		// send deliveries (see Unsettled).
		reloadPass uint64
		// publishing is the key a pass is publishing now, while
		// inPublish; the pass broadcasts published when it is done. See
		// waitUnpublishedLocked.
		publishing keys.Key
		inPublish  bool
		published  sync.Cond
		// noted is broadcast each time a round of the planner has noted
		// its plans (see noting).
		noted sync.Cond
		// handed are the messages handed off since the last pass began
		// (see NotifyMessage), each a flight already, in the order they
		// were handed off.
		handed []outgoing
		// commits are the commits of messages under new keys whose
		// messages the dispatcher is not yet told of (see Committing).
		commits pendingCommits
	}

	// beforePublishWait, if set (by tests only), is called when a
	// settling of a message waits for the publish of it under way.
	beforePublishWait func()
	// afterPlanCommit, if set (by tests only), is called by the planner
	// after each commit of plans made ahead, before it notes them; and
	// beforeNotedWait by a replace that waits for that noting.
	afterPlanCommit, beforeNotedWait func()

	// afterReadDue, if set (by tests only), is called by a scan with the
	// expired keys it read, before it takes d.mu again to settle them.
	afterReadDue func(gone []keys.Key)

	// planning is the planner's own lock: held shared while occurrences
	// are planned (a pass's planOccurrences, planLoop's planAhead) and
	// exclusively while a schedule is canceled (see cancelSchedule), so
	// no occurrence is planned between a cancel's read of a schedule's
	// newest occurrence and its delete.
	planning sync.RWMutex

	// flushing holds the passes whose deliveries wait for their flush,
	// which the flusher goroutine does while the next passes go on.
	flushing flushQueue
	// signaledAt is when a wake-up was first signalled since the last pass
	// began, 0 if none; Health reads it.
	signaledAt atomic.Int64
	// delivering is set while a pass publishes, and deliveredAt is when
	// one last did, in nanoseconds since started by the monotonic clock:
	// the planner gives way to passes that deliver (see giveWay), and
	// gaveWay counts the times it did.
	delivering atomic.Bool
	// stagingNow is set while passes are staged, read ahead of a burst and
	// waiting to publish it (see stage.go): the planner gives way then
	// too.
	stagingNow  atomic.Bool
	deliveredAt atomic.Int64
	started     time.Time
	gaveWay     atomic.Uint64
	// planRounds counts the planner's rounds (for tests).
	planRounds atomic.Uint64
	// stagedPasses counts the passes published as staged (see stage.go).
	stagedPasses atomic.Uint64
	// burst holds the deleter's commits while staged passes publish.
	burst *burstHold

	// deliverWarn and deadWarn limit the warnings of failed publishes of
	// deliveries and of dead letters.
	deliverWarn, deadWarn warnLimit

	wake      chan struct{} // cap 1: a pending wake-up is enough
	done      chan struct{}
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error // Close's result
}

// New returns a Dispatcher, not running yet, of the messages in repo,
// which it reads and deletes through its deleter, publishing through pub,
// with the settings cfg, which it validates.
func New(repo *delaystore.Repository, pub Publisher, cfg Config) (*Dispatcher, error) {
	err := cfg.Validate()
	if repo == nil {
		err = errors.Join(err, fmt.Errorf("%w: no repository", ErrInvalidConfig))
	}
	if pub == nil {
		err = errors.Join(err, fmt.Errorf("%w: no publisher", ErrInvalidConfig))
	}
	if err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	d := &Dispatcher{
		started:  time.Now(),
		cfg:      cfg,
		repo:     repo,
		pub:      pub,
		log:      cfg.Logger.With("component", "dispatch"),
		bucketMs: repo.TimeBucket().Milliseconds(),
		wake:     make(chan struct{}, 1),
		done:     make(chan struct{}),
		burst:    &burstHold{most: cfg.DeleteHold},
	}
	d.mu.published.L = &d.mu.Mutex
	d.mu.noted.L = &d.mu.Mutex
	d.mu.subjects = newSubjectTable(cfg, d.bucketMs, d.nowNs, d.log)
	d.mu.flights = newFlightTable(cfg, d.log)
	d.mu.ahead = newAheadTable()
	d.flushing.cond = sync.NewCond(&d.flushing.Mutex)
	return d, nil
}

// Start starts delivering. It reads nothing: the first pass finds what is
// due in the due index.
func (d *Dispatcher) Start() error {
	d.mu.Lock()
	if d.mu.started || d.mu.closed {
		d.mu.Unlock()
		return fmt.Errorf("dispatch: Start called twice or after Close")
	}
	d.mu.started = true
	d.mu.Unlock()

	// Before the first pass, so that nothing paused goes out.
	if err := d.ReloadLimits(); err != nil {
		return err
	}
	d.del = newDeleter(d.repo, d.cfg.MaxPendingDeletes, d.cfg.AttemptWriteDelay, d.log, d.committed, d.burst)
	now := d.nowNs()
	d.mu.Lock()
	d.mu.wakeBy = now
	// No topic is loaded: the first pass reads the due index from its
	// start, so start-up costs what is due, not one seek per subject.
	d.mu.frontier.next = now
	d.mu.Unlock()
	d.flushing.Lock()
	d.flushing.lastOK = now
	d.flushing.Unlock()
	d.goFunc(d.run)
	d.goFunc(d.flushLoop)
	if d.cfg.PlanAhead > 0 {
		d.goFunc(d.planLoop)
	}
	return nil
}

func (d *Dispatcher) goFunc(f func()) {
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		f()
	}()
}

// Close stops delivering, waits for the pass under way, and commits the
// deletes and attempt counts still queued; it returns the error of that
// commit if it failed (the messages are then delivered again after a
// restart). It is safe to call twice; the second call returns the result
// of the first.
func (d *Dispatcher) Close() error {
	d.closeOnce.Do(func() {
		d.mu.Lock()
		d.mu.closed = true
		d.mu.Unlock()
		close(d.done)
		d.wg.Wait()
		if d.del != nil {
			d.closeErr = d.del.close()
		}
	})
	return d.closeErr
}

// Stats returns the counters.
func (d *Dispatcher) Stats() Stats {
	d.mu.Lock()
	inFlight, topics, limited, paused := len(d.mu.flights.byKey), len(d.mu.subjects.byHash), len(d.mu.subjects.held)-d.mu.subjects.paused, d.mu.subjects.paused
	d.mu.Unlock()
	c := &d.stats
	return Stats{
		Delivered: c.delivered.Load(), Redelivered: c.redelivered.Load(), Acked: c.acked.Load(),
		Nacked: c.nacked.Load(), Progress: c.progress.Load(), Termed: c.termed.Load(),
		Failed:       c.failed.Load(),
		DeadLettered: c.deadLettered.Load(), Expired: c.expired.Load(), Canceled: c.canceled.Load(),
		NoResponders: c.noResponders.Load(), Undeliverable: c.undeliverable.Load(), Evicted: c.evicted.Load(), Skipped: c.skipped.Load(),
		PlannedAhead: c.plannedAhead.Load(), PlannedOnDelivery: c.plannedOnDelivery.Load(),
		Withdrawn: c.withdrawn.Load(), Fenced: c.fenced.Load(), FencedPasses: c.fencedPasses.Load(), HandedOff: c.handedOff.Load(), StagedPasses: d.stagedPasses.Load(), InFlight: uint64(inFlight), Topics: uint64(topics), Limited: uint64(limited), Paused: uint64(paused),
	}
}

// Busy reports whether the dispatcher has work under way or soon: a
// delivery in flight, a subject with something due or backing off, a pass
// under way, or one due within the next within (the next message known to
// fall due, or a flight's deadline). A service goes idle only when it is
// not busy.
func (d *Dispatcher) Busy(within time.Duration) bool {
	now := d.nowNs()
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.mu.flights.byKey) > 0 || len(d.mu.subjects.byHash) > 0 || d.mu.passStart != 0 ||
		d.mu.wakeBy != 0 && d.mu.wakeBy <= after(now, within)
}

// Attempt is the number of the last delivery of k known to have reached a
// subscriber, while k is in flight, and 0 otherwise. The count in the store
// may lag it by up to Config.AttemptWriteDelay.
func (d *Dispatcher) Attempt(k keys.Key) uint32 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.mu.flights.attempt(k)
}

func (d *Dispatcher) nowNs() int64 { return d.cfg.Now().UnixNano() }

// after is the time d after now, in Unix ns, saturated at never: a wait
// that reaches past the latest time an int64 holds (in 2262) means "not
// before then", never a sum that wraps around into the past. A negative d
// counts as 0.
func after(now int64, d time.Duration) int64 {
	if d <= 0 {
		return now
	}
	if now > 0 && int64(d) > never-now {
		return never
	}
	return now + int64(d)
}

// msToNs converts Unix ms to Unix ns, saturated at never.
func msToNs(ms int64) int64 {
	if ms > never/int64(time.Millisecond) {
		return never
	}
	return ms * int64(time.Millisecond)
}

func (d *Dispatcher) signal() {
	if d.signaledAt.Load() == 0 {
		d.signaledAt.CompareAndSwap(0, d.nowNs())
	}
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// scannableAt is when a message becomes both due and inside the due range
// of a scan: with raw-millisecond buckets the key holds the fire time
// rounded up, and the range ends at the current millisecond.
func (d *Dispatcher) scannableAt(k keys.Key, fireAtNs int64) int64 {
	return max(fireAtNs, msToNs(keys.BucketStartMs(k.Bucket(), d.bucketMs)))
}

// Notify tells the dispatcher about a message just committed, so it is
// delivered on time even if it is due before everything else. Call it
// after the commit, for every message of the batch.
func (d *Dispatcher) Notify(s delaystore.Scheduled, fireAtNs int64) {
	d.mu.Lock()
	var x keys.Key
	var withdrawing bool
	if s.HasReplaced {
		x, withdrawing = d.replacedLocked(s.Replaced)
	}
	d.arrivedLocked(s.Key, fireAtNs)
	d.mu.Unlock()
	if withdrawing {
		d.DeleteWithdrawn(x, nil)
	}
}

// replacedLocked is told that the message under k was replaced or moved
// by a commit, and waits for a publish of it under way (see
// waitUnpublishedLocked), so that none follows the answer that tells
// its publisher it was replaced or moved. If k is the successor of an
// occurrence planned ahead and not yet published, the schedule ended
// before that occurrence: it is withdrawn, marked settled, and returned
// for the caller to delete (deleteWithdrawn) once mu is let go. Left to
// its pass, it stayed pending, to GET and LIST, until its time, and a
// restart, which forgets that it was withdrawn, delivered it. mu must be
// held.
func (d *Dispatcher) replacedLocked(k keys.Key) (withdrawn keys.Key, ok bool) {
	if f := d.mu.flights.byKey[k]; f != nil {
		d.forgetLocked(f)
	}
	// A scan under way may have read the replaced message before this
	// commit; the mark keeps it from delivering it after the publisher is
	// told it was replaced. The delete is committed already, so the mark
	// goes at the start of the next pass, as for the deleter's commits.
	d.mu.flights.settledUncommitted(k)
	if withdrawn, ok = d.mu.ahead.end(k); ok {
		d.mu.flights.markSettling(withdrawn)
		d.stats.withdrawn.Add(1)
	}
	d.waitUnpublishedLocked(k)
	return withdrawn, ok
}

// DeleteWithdrawn deletes x, an occurrence planned ahead and withdrawn
// (see NotifyMessageWithdrawing), and calls then, if not nil, with the
// outcome once the delete is committed, on the deleter's goroutine.
func (d *Dispatcher) DeleteWithdrawn(x keys.Key, then func(error)) {
	d.del.delete(x, func(_ bool, err error) {
		if then != nil {
			then(err)
		}
	})
}

// arrivedLocked brings the message just committed under k, due at
// fireAtNs, to its topic or the frontier. mu must be held.
func (d *Dispatcher) arrivedLocked(k keys.Key, fireAtNs int64) {
	at := d.scannableAt(k, fireAtNs)
	if k.Bucket() >= d.mu.frontier.scannedUpTo {
		// Past every range scanned so far, so past the frontier too: the
		// due index brings it to its topic when it is due, and until then
		// its subject costs nothing here. Only the wake-up time moves.
		if d.mu.frontier.lower(at) {
			d.signal()
		}
		return
	}
	if d.mu.frontier.ahead(k) && d.mu.frontier.lower(at) {
		// NB: its due-index entry is still to be read, though its topic
		// takes it now: read it soon, while others come in, so that a
		// burst of them (a bulk FIRE, messages held by a pause) is not
		// left for the frontier to wade through, a pass's worth at a
		// time, when a message due later has to be read after them.
		d.signal()
	}
	t := d.mu.subjects.topic(k.TopicHash())
	t.rewindLocked(k)
	if d.mu.subjects.groupHeld(t) {
		// Held for a group's room, not its own: the message may be of
		// another group (see groups.go).
		d.mu.subjects.unhold(t)
	} else if t.limited || t.released {
		return // its cursor is at it or before; room or its turn brings it back
	}
	at = max(at, t.blockedUntil)
	if at < t.next {
		d.mu.subjects.due.schedule(t, at)
		if t.idx == 0 {
			d.signal()
		}
	}
}

// notePeaksLocked records how many entries the maps hold, at the start of
// a pass, before it forgets what was settled since the last: a burst of
// ACKs fills canceled between passes and the pass empties it, so shrunk,
// which runs after, would not see how large it grew. mu must be held.
func (d *Dispatcher) notePeaksLocked() {
	d.mu.subjects.peak = max(d.mu.subjects.peak, len(d.mu.subjects.byHash))
	d.mu.flights.notePeaks()
}

// keptCap is the size up to which a map or an array grown by a burst is
// kept for reuse once the burst is over; a larger one is given back.
const keptCap = 1024

// emptied returns s cleared and empty, or nil if its array is larger
// than keptCap, so a burst does not keep its memory.
func emptied[T any](s []T) []T {
	if cap(s) > keptCap {
		return nil
	}
	clear(s)
	return s[:0]
}

// shrunk returns m, or a copy of it once it holds less than a quarter of
// the most it held since the last copy (*peak). A Go map keeps its buckets
// after deletes, so without this a wave of keys that came and went would
// keep its memory for the life of the process.
func shrunk[K comparable, V any](m map[K]V, peak *int) map[K]V {
	n := len(m)
	if n > *peak {
		*peak = n
		return m
	}
	if *peak <= keptCap || n >= *peak/4 {
		return m
	}
	c := make(map[K]V, n)
	maps.Copy(c, m)
	*peak = n
	return c
}

// fenceHeld reports whether the dispatcher may publish now (see
// Config.Fence).
func (d *Dispatcher) fenceHeld() bool { return d.cfg.Fence == nil || d.cfg.Fence() }

// FenceLifted tells the dispatcher that its fence (Config.Fence) may hold
// now where it did not: a fenced dispatcher looks again at once, not
// after its FenceRetry. A caller that lifts the fence itself (a new
// generation of the service made current) calls it, so that the first
// pass after it does not wait.
func (d *Dispatcher) FenceLifted() { d.signal() }

// fenced is the loop's turn while the fence is down: nothing is done, and
// the loop looks again soon. It counts as a wait the loop wakes from, for
// Health.
func (d *Dispatcher) fenced() time.Duration {
	d.stats.fencedPasses.Add(1)
	now := d.nowNs()
	d.mu.Lock()
	d.mu.passStart = 0
	d.mu.wakeBy = after(now, d.cfg.FenceRetry)
	d.mu.Unlock()
	d.signaledAt.Store(0)
	return d.cfg.FenceRetry
}

func (d *Dispatcher) run() {
	defer d.stopFlushing()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		wait := d.fenced
		if d.fenceHeld() {
			wait = d.pass
		}
		timer.Reset(wait())
		select {
		case <-d.done:
			return
		case <-d.wake:
		case <-timer.C:
		}
	}
}

// pass does what is due now and returns how long to sleep. It orders the
// parts' steps: the frontier reads what fell due, the subject table puts
// back what a change of limits released, the flight table makes room and
// gives back its expired flights, and the due topics' scans fill what is
// left of the pass.
func (d *Dispatcher) pass() time.Duration {
	d.signaledAt.Store(0)
	now := d.nowNs()
	d.advanceFrontier(now)
	d.mu.Lock()
	pass := d.beginPassLocked(now)
	d.mu.subjects.readmitReleased(now)
	// A redelivery needs no room in the in-flight window: its flight
	// holds a slot already. Only first deliveries wait for room, so a
	// window full of NAKed or unanswered deliveries still redelivers them.
	budget := d.cfg.PassLimit
	room := d.cfg.MaxInFlight - len(d.mu.flights.byKey)
	if room <= 0 && d.mu.subjects.dueBy(now) {
		room += d.evictLongWaitsLocked(now)
	}
	paused := func(t *topic) bool { return d.mu.subjects.ruleOf(t).paused }
	redeliver, deadLetter := d.mu.flights.expire(now, &budget, d.backoffAfter, paused)
	// After the redeliveries, before any scan: see handoff.go.
	handed := d.takeHandedLocked(now)
	d.mu.Unlock()

	out := append(d.redeliveries(redeliver, now), handed...)
	budget -= len(handed)
	for _, f := range deadLetter {
		d.deadLetter(f.key, nil, f.attempt, "max-deliver", f.answer, nil)
	}
	probed := d.scanDue(now, pass, min(budget, room), &out)
	d.deliverPass(stagedPass{out: out, pass: pass, probed: probed}, now)
	wait, at := d.untilNext()
	stage, wait := d.staging(at, wait)
	if stage {
		d.stage(at)
		wait, _ = d.untilNext()
	}
	return wait
}

// deliverPass publishes what pass p took.
func (d *Dispatcher) deliverPass(p stagedPass, now int64) {
	if len(p.out) == 0 && len(p.probed) == 0 {
		return
	}
	d.delivering.Store(true)
	d.publish(p.out, now, p.pass, p.probed)
	d.deliveredAt.Store(int64(time.Since(d.started)))
	d.delivering.Store(false)
}

// beginPassLocked starts pass number d.mu.pass+1 at now and returns its
// number: it forgets the flights whose deletes committed since the last
// pass, and the topics with nothing left. mu must be held.
func (d *Dispatcher) beginPassLocked(now int64) uint64 {
	d.mu.passStart = now
	d.mu.pass++
	d.notePeaksLocked()
	d.mu.flights.settleCommitted(d.forgottenLocked)
	d.mu.subjects.dropIdle(now)
	d.mu.flights.shrink()
	return d.mu.pass
}

// redeliveries reads the messages of the flights to deliver again and
// returns them to publish, each with its attempt counted; a message gone
// is forgotten, one expired is settled as such, and one that cannot be
// read now is tried again after the no-responders back-off.
func (d *Dispatcher) redeliveries(redeliver []*flight, now int64) []outgoing {
	var out []outgoing
	for _, f := range redeliver {
		msg, err := d.repo.Get(f.key)
		switch {
		case errors.Is(err, delaystore.ErrNotFound):
			d.mu.Lock()
			d.forgetLocked(f)
			d.mu.Unlock()
			continue
		case err != nil:
			d.log.Warn("reading message to redeliver", "tag", f.key, "err", err)
			d.mu.Lock()
			d.mu.flights.retryAt(f, after(now, d.cfg.NoRespondersBackoff))
			d.mu.Unlock()
			continue
		case expired(msg, now):
			d.mu.Lock()
			d.mu.flights.settling(f)
			d.mu.Unlock()
			d.settleExpired(f.key, msg, nil)
			continue
		}
		d.mu.Lock()
		f.attempt++
		d.mu.Unlock()
		out = append(out, outgoing{f: f, msg: msg})
	}
	return out
}

// scanDue scans due topics for first deliveries into out, up to budget,
// and returns the topics it sent a probe to.
//
// Due topics are taken one at a time, and only while there is budget:
// the rest stay in the heap as they are, so a pass costs what it delivers,
// not what is due. With the window full it takes none, and untilNext does
// not count them; the flight that frees room wakes the loop.
func (d *Dispatcher) scanDue(now int64, pass uint64, budget int, out *[]outgoing) []*topic {
	var probed []*topic
	for budget > 0 {
		d.mu.Lock()
		t := d.mu.subjects.nextDue(now, pass)
		if t == nil {
			d.mu.Unlock()
			break
		}
		if t.handedOut > 0 || t.staged > 0 {
			// A message of it was handed off since this pass took those
			// handed before, or an earlier staged pass took some: they go
			// out first, and the next pass scans the topic then.
			t.scanPass = pass
			d.mu.subjects.reschedule(t, now)
			d.mu.Unlock()
			continue
		}
		allowed := d.mu.subjects.toScan(t, now)
		if allowed == 0 {
			d.mu.Unlock()
			continue
		}
		t.scanPass, t.scanning = pass, true
		d.mu.Unlock()
		n, probe := d.scan(t, now, pass, min(budget, d.cfg.TopicPassLimit, allowed), out)
		d.mu.Lock()
		d.mu.subjects.spend(t, now, n)
		d.mu.Unlock()
		budget -= n
		if probe {
			probed = append(probed, t)
		}
	}
	return probed
}

func expired(msg *delaystore.StoredMessage, now int64) bool {
	return msg.ExpireAtNs != 0 && msg.ExpireAtNs <= now
}

func (d *Dispatcher) backoffAfter(attempt uint32) time.Duration {
	if len(d.cfg.Backoff) == 0 || attempt == 0 {
		return 0
	}
	i := min(int(attempt)-1, len(d.cfg.Backoff)-1)
	return d.cfg.Backoff[i]
}

// untilNext is the sleep until the earliest topic or timer, and that
// time. While the in-flight window is full no topic can be scanned, so
// only timers count: the flight whose end makes room wakes the loop (see
// forgetLocked).
func (d *Dispatcher) untilNext() (time.Duration, int64) {
	now := d.nowNs()
	d.mu.Lock()
	defer d.mu.Unlock()
	next := int64(never)
	scannable := len(d.mu.subjects.due) > 0 && len(d.mu.flights.byKey) < d.cfg.MaxInFlight
	if scannable {
		next = d.mu.subjects.due[0].next
	}
	next = min(next, d.mu.flights.nextDeadline())
	if len(d.mu.flights.byKey) < d.cfg.MaxInFlight && len(d.mu.subjects.released) > 0 {
		next = now // the next pass puts more of them back
	}
	if len(d.mu.flights.byKey) < d.cfg.MaxInFlight && d.mu.subjects.dueNow(now, d.frontierCap()) < d.frontierCap() {
		// Not while the window is full, as for due topics: the
		// flight that makes room wakes the loop (see forgetLocked).
		next = min(next, d.mu.frontier.next)
	}
	if !scannable && d.mu.subjects.dueBy(now) {
		// Full, with topics due: look for flights to evict when that is
		// allowed again (at once, if a flight began a long wait).
		next = min(next, max(d.mu.flights.evictCheckAt, now))
		if next <= now {
			next = now
		}
	}
	wait := time.Hour // nothing known to be due: look again in an hour
	switch {
	case len(d.mu.flights.committed) > 0 || len(d.mu.handed) > 0 || next <= now:
		wait = 0
	case next != never:
		wait = max(time.Duration(next-now), 0)
	}
	d.mu.passStart = 0
	d.mu.wakeBy = after(now, wait)
	return wait, d.mu.wakeBy
}
