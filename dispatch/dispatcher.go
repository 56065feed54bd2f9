package dispatch

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"natsdelay/delaystore"
	"natsdelay/keys"
)

// never is the due time of a topic with nothing known to be pending.
const never = math.MaxInt64

// flightState is where an in-flight message is in its life.
type flightState uint8

const (
	// sent: published, waiting for an answer until the deadline.
	stateSent flightState = iota
	// retry: waiting until the deadline to be delivered again.
	stateRetry
	// settling: its delete is queued; it is forgotten once that commits.
	stateSettling
)

// flight is a message this process has handed out and not yet settled.
type flight struct {
	key     keys.Key
	topic   *topic
	state   flightState
	attempt uint32 // number of the delivery made last (or being made)
	// counted is the last attempt known to have reached a subscriber: the
	// one being made counts only once its pass has flushed without a
	// no-responders answer.
	counted uint32
	// term is a +TERM that arrived while the delivery under way was not yet
	// known to count; its pass settles it once it has flushed, with bounced
	// telling whether that delivery reached nobody.
	term    *pendingTerm
	bounced bool
	ackNone bool
	// pausedWait is set while its redelivery waits for its subject's
	// pause to end.
	pausedWait bool
	// parked is set for a message the publisher can never publish (see
	// ErrUndeliverable); it waits with no deadline.
	parked bool
	// maxDeliver is the message's limit, or the default, read at delivery.
	maxDeliver uint32
	// pending is what deleting the message needs to know of it (subject
	// and expiry), for messages nothing but the dispatcher can delete:
	// those without a client id, which no new message can replace.
	pending  *delaystore.StoredMessage
	pass     uint64 // the pass that published it
	deadline int64  // Unix ns; meaning depends on state
	idx      int    // in the timer heap; -1 when not in it
	// lostPass is the pass whose delivery of it reached nobody (bounced,
	// or failed to publish or flush), so that pass's flush does not count
	// it as delivered.
	lostPass uint64
}

// pendingTerm is a +TERM waiting for its flight's pass to flush.
type pendingTerm struct {
	reason string
	done   func(error)
}

// topic is the dispatcher's view of one topic hash (one subject, barring
// hash collisions, which merely share a range and stay correctly ordered).
type topic struct {
	hash uint64
	// heldAt is the last time the topic was held back by its in-flight
	// limit, its rate or a pause (Unix ns; 0: never): a message due at or
	// before it waited for the limit, and its lateness says so.
	heldAt int64
	next   int64 // Unix ns when the next message is due and scannable
	idx    int   // in the due heap; -1 when not in it

	// cursor is the inclusive lower bound of the next scan; nil means the
	// topic's first key. Everything below it is in flight or settled.
	cursor []byte
	// single is the due-index entry that brought the topic into memory,
	// while it is the only one known: its first scan reads just that key
	// (see advanceFrontier and readSingle).
	single *keys.Key
	// rewind is the lowest key that became deliverable (committed, or
	// bounced) since the scan under way began; nil if none. Such a key can
	// sort below where the scan gets to, because the scan's snapshot did
	// not have it or it was in flight then, so the scan must not leave the
	// cursor above it.
	rewind []byte

	// No-responders back-off: nothing of the topic goes out before
	// blockedUntil, and then only one probe per pass until one gets through.
	blockedUntil int64
	backoff      time.Duration
	probing      bool
	probePass    uint64
	noRespPass   uint64
	// probeOpen is set while a probe is out and its flush has not told
	// whether it got through; the topic is not scanned meanwhile.
	probeOpen bool

	// flights counts the flights of the topic. A topic with none, not
	// due, and not backing off is dropped at the next pass (see
	// dropIdleLocked), so memory follows the subjects with work, not every
	// subject seen since the start.
	flights int
	// scanPass is the last pass that scanned it: a pass scans each topic
	// once, for fairness.
	scanPass uint64
	// limited is set while the topic is held out of the due heap at its
	// in-flight limit, with more due (see fairness.go).
	limited bool
	// subject is the subject of the first message a scan took, for logs
	// and limits.
	subject string
	// rule is its flow control, resolved from the limits of generation
	// ruleGen (see limits.go), and bucket its rate's tokens, if it has a
	// rate.
	rule    rule
	ruleGen uint64
	bucket  *rate.Limiter
	// pausedHeld is set while it is held because it is paused.
	pausedHeld bool
}

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

	// pubMu is held while a pass checks and publishes one message; Ack,
	// Cancel and +TERM take it to mark a message settled, so once they
	// return the message is never published again.
	pubMu sync.Mutex

	mu struct {
		sync.Mutex
		topics   map[uint64]*topic
		due      topicHeap
		flights  map[keys.Key]*flight
		timers   flightHeap
		canceled map[keys.Key]struct{}
		// unsent keeps the counted attempts of flights forgotten because
		// their delivery reached nobody, until a scan makes a flight of
		// the message again: its count in the store may lag (see
		// Config.AttemptWriteDelay).
		unsent map[keys.Key]uint32
		// committed holds keys whose deletes have committed; the loop
		// forgets their flights before its next scan, so no scan that
		// started earlier can see the key without its flight.
		committed []keys.Key
		pass      uint64
		// frontier is how far the due index has been read: every entry
		// up to it (in due order) was handed to its topic, which was put
		// in the due heap; nil before the first read. frontierNext is
		// when the first entry after it becomes scannable, never if none
		// is known, and scannedUpTo the bucket below which passes have
		// scanned (see advanceFrontier and Notify).
		frontier     *keys.Key
		frontierNext int64
		scannedUpTo  uint64
		// idle are topics that may have nothing left to do; see
		// dropIdleLocked.
		idle []*topic
		// peaks are the most entries each map held since it was last
		// copied; see shrunk.
		peaks struct{ topics, flights, unsent, canceled, ahead, aheadNext int }
		// ahead holds the occurrences the planner planned before they
		// fell due, until they are first published (see planLoop and
		// publish), aheadNext each one's key by its successor's, and
		// planFrom is how far the planner has read the index of
		// occurrences (in the due index's order).
		ahead     map[keys.Key]aheadPlan
		aheadNext map[keys.Key]keys.Key
		planFrom  *keys.Key
		// evictCheckAt is when evictLongWaitsLocked may look again after
		// it found nothing to evict.
		evictCheckAt int64
		// evictLogAt is when the next eviction may be logged, and
		// evictedUnlogged counts those since the last line.
		evictLogAt      int64
		evictedUnlogged int
		// held are the topics held at their in-flight limit (see
		// fairness.go); limitLogAt is when the next of them may be
		// logged, and limitedUnlogged counts those since the last line.
		held            map[*topic]struct{}
		paused          int // of held, those held because paused
		limitLogAt      int64
		limitedUnlogged int
		// limits are the limits set by pattern (see limits.go).
		limits  limitTable
		started bool
		closed  bool
		// passStart is when the pass under way began, 0 between passes;
		// wakeBy is when the loop, between passes, is due to run again.
		// Health reads them.
		passStart int64
		wakeBy    int64
	}

	// flushing holds the passes whose deliveries wait for their flush,
	// which the flusher goroutine does while the next passes go on.
	flushing struct {
		sync.Mutex
		cond    *sync.Cond
		batches []flushBatch
		// unflushed counts the deliveries queued or being flushed; a pass
		// waits while it is at PassLimit, so a flush that hangs holds up
		// delivery as it did when every pass waited for its own.
		unflushed int
		stopped   bool // run has returned: flush what is queued, then stop
		// For Health: when the flush under way began (0 if none), when
		// the last one succeeded (or Start), and the last one's error and
		// when it failed.
		busySince int64
		lastOK    int64
		lastErr   error
		lastFail  int64
	}
	// signaledAt is when a wake-up was first signalled since the last pass
	// began, 0 if none; Health reads it.
	signaledAt atomic.Int64

	wake      chan struct{} // cap 1: a pending wake-up is enough
	done      chan struct{}
	wg        sync.WaitGroup
	closeOnce sync.Once
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
		cfg:      cfg,
		repo:     repo,
		pub:      pub,
		log:      cfg.Logger.With("component", "dispatch"),
		bucketMs: repo.TimeBucket().Milliseconds(),
		wake:     make(chan struct{}, 1),
		done:     make(chan struct{}),
	}
	d.mu.topics = make(map[uint64]*topic)
	d.mu.flights = make(map[keys.Key]*flight)
	d.mu.canceled = make(map[keys.Key]struct{})
	d.mu.held = make(map[*topic]struct{})
	d.mu.limits.gen = 1 // a new topic's rule (generation 0) is stale
	d.mu.unsent = make(map[keys.Key]uint32)
	d.mu.ahead = make(map[keys.Key]aheadPlan)
	d.mu.aheadNext = make(map[keys.Key]keys.Key)
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

	// NB: before the first pass, so that nothing paused goes out.
	if err := d.ReloadLimits(); err != nil {
		return err
	}
	d.del = newDeleter(d.repo, d.cfg.MaxPendingDeletes, d.cfg.AttemptWriteDelay, d.log, d.committed)
	now := d.nowNs()
	d.mu.Lock()
	d.mu.wakeBy = now
	// NB: no topic is loaded: the first pass reads the due index from its
	// start, so start-up costs what is due, not one seek per subject.
	d.mu.frontierNext = now
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
// deletes and attempt counts still queued. It is safe to call twice.
func (d *Dispatcher) Close() error {
	d.closeOnce.Do(func() {
		d.mu.Lock()
		d.mu.closed = true
		d.mu.Unlock()
		close(d.done)
		d.wg.Wait()
		if d.del != nil {
			d.del.close()
		}
	})
	return nil
}

// Stats returns the counters.
func (d *Dispatcher) Stats() Stats {
	d.mu.Lock()
	inFlight, topics, limited, paused := len(d.mu.flights), len(d.mu.topics), len(d.mu.held)-d.mu.paused, d.mu.paused
	d.mu.Unlock()
	c := &d.stats
	return Stats{
		Delivered: c.delivered.Load(), Redelivered: c.redelivered.Load(), Acked: c.acked.Load(),
		Nacked: c.nacked.Load(), Progress: c.progress.Load(), Termed: c.termed.Load(),
		Failed:       c.failed.Load(),
		DeadLettered: c.deadLettered.Load(), Expired: c.expired.Load(), Canceled: c.canceled.Load(),
		NoResponders: c.noResponders.Load(), Undeliverable: c.undeliverable.Load(), Evicted: c.evicted.Load(), Skipped: c.skipped.Load(),
		PlannedAhead: c.plannedAhead.Load(), PlannedOnDelivery: c.plannedOnDelivery.Load(),
		Withdrawn: c.withdrawn.Load(), Fenced: c.fenced.Load(), InFlight: uint64(inFlight), Topics: uint64(topics), Limited: uint64(limited), Paused: uint64(paused),
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
	return len(d.mu.flights) > 0 || len(d.mu.topics) > 0 || d.mu.passStart != 0 ||
		d.mu.wakeBy != 0 && d.mu.wakeBy <= after(now, within)
}

// Attempt is the number of the last delivery of k known to have reached a
// subscriber, while k is in flight, and 0 otherwise. The count in the store
// may lag it by up to Config.AttemptWriteDelay.
func (d *Dispatcher) Attempt(k keys.Key) uint32 {
	d.mu.Lock()
	defer d.mu.Unlock()
	if f := d.mu.flights[k]; f != nil {
		return f.counted
	}
	return d.mu.unsent[k]
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

// topicLocked returns the state of hash, creating it. mu must be held.
func (d *Dispatcher) topicLocked(hash uint64) *topic {
	t := d.mu.topics[hash]
	if t == nil {
		t = &topic{hash: hash, next: never, idx: -1, rule: rule{maxInFlight: d.cfg.SubjectMaxInFlight}}
		d.mu.topics[hash] = t
	}
	return t
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
	if s.HasReplaced {
		// NB: pubMu, as in Cancel, so that no publish of the replaced
		// message can follow the reply that tells its publisher it was
		// replaced: a pass checks and publishes under it.
		d.pubMu.Lock()
		defer d.pubMu.Unlock()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if s.HasReplaced {
		if f := d.mu.flights[s.Replaced]; f != nil {
			d.forgetLocked(f)
		}
		// NB: a scan under way may have read the replaced message before
		// this commit; the mark keeps it from delivering it after the
		// publisher is told it was replaced. The delete is committed
		// already, so the mark goes at the start of the next pass, as for
		// the deleter's commits.
		d.mu.canceled[s.Replaced] = struct{}{}
		d.mu.committed = append(d.mu.committed, s.Replaced)
		d.withdrawAheadLocked(s.Replaced)
	}
	at := d.scannableAt(s.Key, fireAtNs)
	if s.Key.Bucket() >= d.mu.scannedUpTo {
		// Past every range scanned so far, so past the frontier too: the
		// due index brings it to its topic when it is due, and until then
		// its subject costs nothing here. Only the wake-up time moves.
		if at < d.mu.frontierNext {
			d.mu.frontierNext = at
			d.signal()
		}
		return
	}
	t := d.topicLocked(s.Key.TopicHash())
	t.rewindLocked(s.Key)
	if t.limited {
		return // its cursor is at it or before; room brings it back
	}
	at = max(at, t.blockedUntil)
	if at < t.next {
		d.mu.due.schedule(t, at)
		if t.idx == 0 {
			d.signal()
		}
	}
}

// rewindLocked makes the next scan of t start at k or before it, also when
// a scan is under way. mu must be held.
func (t *topic) rewindLocked(k keys.Key) {
	if t.cursor != nil && bytes.Compare(k[:], t.cursor) < 0 {
		t.cursor = k.Bytes()
	}
	if t.rewind == nil || bytes.Compare(k[:], t.rewind) < 0 {
		t.rewind = k.Bytes()
	}
}

// forgetLocked drops f. If that makes room in a full in-flight window, it
// wakes the loop, which does not wait for due topics while the window is
// full (see untilNext). mu must be held.
func (d *Dispatcher) forgetLocked(f *flight) {
	d.mu.timers.unschedule(f)
	if d.mu.flights[f.key] != f {
		return
	}
	delete(d.mu.flights, f.key)
	if f.topic.flights--; f.topic.flights == 0 {
		d.mu.idle = append(d.mu.idle, f.topic)
	}
	d.roomFreedLocked(f.topic)
	if len(d.mu.flights) == d.cfg.MaxInFlight-1 && (len(d.mu.due) > 0 || d.mu.frontierNext != never) {
		d.signal()
	}
}

// waitingLongLocked is told that f now waits until its deadline. If that
// is longer than the ack wait, f may be evicted from a full window, so the
// next pass looks again; it reports whether the loop should be woken for
// that (the window is full and topics wait for room). mu must be held.
func (d *Dispatcher) waitingLongLocked(f *flight, now int64) bool {
	if f.state != stateRetry || f.deadline <= after(now, d.cfg.AckWait) {
		return false
	}
	d.mu.evictCheckAt = 0
	return len(d.mu.flights) >= d.cfg.MaxInFlight && len(d.mu.due) > 0
}

// evictLongWaitsLocked makes room in a full in-flight window for the
// first deliveries of due topics, so that flights waiting a long time (a
// -NAK with a long delay, a long back-off, a parked message) cannot hold
// every slot and freeze every other subject. It evicts up to a quarter of
// the window, furthest deadline first, from the flights waiting longer
// than the ack wait, and returns how many. An evicted flight's message
// stays in the store, and its topic is held back until the flight's
// deadline and rewound to it: the message goes out again at its deadline,
// never before, ahead of its topic's later messages, which wait with it.
// Finding candidates reads every flight, so with none to evict it is not
// tried again for a tenth of the ack wait. mu must be held.
func (d *Dispatcher) evictLongWaitsLocked(now int64) int {
	if now < d.mu.evictCheckAt {
		return 0
	}
	horizon := after(now, d.cfg.AckWait)
	var long []*flight
	for _, f := range d.mu.timers {
		if f.state == stateRetry && f.deadline > horizon {
			long = append(long, f)
		}
	}
	if len(long) == 0 {
		d.mu.evictCheckAt = after(now, d.cfg.AckWait/10)
		return 0
	}
	slices.SortFunc(long, func(a, b *flight) int { return cmp.Compare(b.deadline, a.deadline) })
	long = long[:min(len(long), max(1, d.cfg.MaxInFlight/4))]
	for _, f := range long {
		if f.parked {
			// Behind its topic's cursor, out of memory, it stays parked
			// until a restart scans the topic from the start.
			d.forgetLocked(f)
			continue
		}
		t := f.topic
		t.blockedUntil = max(t.blockedUntil, f.deadline)
		d.unsendLocked(f)
		d.rescheduleLocked(t, t.blockedUntil)
	}
	d.stats.evicted.Add(uint64(len(long)))
	// NB: at most one line per 10 s; the counter has every eviction.
	d.mu.evictedUnlogged += len(long)
	if now >= d.mu.evictLogAt {
		d.log.Warn("in-flight window full: evicted the longest-waiting deliveries, whose subjects wait with them",
			"evicted", d.mu.evictedUnlogged, "max_in_flight", d.cfg.MaxInFlight)
		d.mu.evictedUnlogged, d.mu.evictLogAt = 0, after(now, 10*time.Second)
	}
	return len(long)
}

// dropIdleLocked forgets the topics that lost their last flight since the
// last pass, and those that scans found empty, if they still have nothing
// to do: no flight, not in the due heap, no probe, no back-off. A message
// committed later makes a new topic, whose first scan starts at the
// subject's first key; that is safe, since a topic without flights has
// nothing below its cursor but settled messages. It runs at the start of
// a pass, when no scan is under way. mu must be held.
func (d *Dispatcher) dropIdleLocked(now int64) {
	for _, t := range d.mu.idle {
		if t.flights == 0 && t.idx < 0 && !t.limited && !t.probing && !t.probeOpen && t.blockedUntil <= now && d.mu.topics[t.hash] == t {
			delete(d.mu.topics, t.hash)
		}
	}
	d.mu.idle = emptied(d.mu.idle)
	d.mu.topics = shrunk(d.mu.topics, &d.mu.peaks.topics)
	d.mu.flights = shrunk(d.mu.flights, &d.mu.peaks.flights)
	d.mu.unsent = shrunk(d.mu.unsent, &d.mu.peaks.unsent)
	d.mu.canceled = shrunk(d.mu.canceled, &d.mu.peaks.canceled)
	// NB: the heaps clear the slots they give up, so only their arrays
	// are left over from a burst.
	if len(d.mu.due) == 0 && cap(d.mu.due) > keptCap {
		d.mu.due = nil
	}
	if len(d.mu.timers) == 0 && cap(d.mu.timers) > keptCap {
		d.mu.timers = nil
	}
}

// notePeaksLocked records how many entries the maps hold, at the start of
// a pass, before it forgets what was settled since the last: a burst of
// ACKs fills canceled between passes and the pass empties it, so shrunk,
// which runs after, would not see how large it grew. mu must be held.
func (d *Dispatcher) notePeaksLocked() {
	p := &d.mu.peaks
	p.topics = max(p.topics, len(d.mu.topics))
	p.flights = max(p.flights, len(d.mu.flights))
	p.unsent = max(p.unsent, len(d.mu.unsent))
	p.canceled = max(p.canceled, len(d.mu.canceled))
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

// committed is the deleter's callback: these keys are gone from the store.
func (d *Dispatcher) committed(ks []keys.Key) {
	d.mu.Lock()
	d.mu.committed = append(d.mu.committed, ks...)
	d.mu.Unlock()
	d.signal()
}

// fenceRetry is how often a fenced dispatcher looks at its fence again: a
// leader whose lease renewal was slow holds it again within a round trip.
const fenceRetry = 5 * time.Millisecond

// fenceHeld reports whether the dispatcher may publish now (see
// Config.Fence).
func (d *Dispatcher) fenceHeld() bool { return d.cfg.Fence == nil || d.cfg.Fence() }

// fenced is the loop's turn while the fence is down: nothing is done, and
// the loop looks again soon. It counts as a wait the loop wakes from, for
// Health.
func (d *Dispatcher) fenced() time.Duration {
	now := d.nowNs()
	d.mu.Lock()
	d.mu.passStart = 0
	d.mu.wakeBy = after(now, fenceRetry)
	d.mu.Unlock()
	d.signaledAt.Store(0)
	return fenceRetry
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

// pass does what is due now and returns how long to sleep.
func (d *Dispatcher) pass() time.Duration {
	d.signaledAt.Store(0)
	now := d.nowNs()
	d.advanceFrontier(now)
	d.mu.Lock()
	pass := d.beginPassLocked(now)
	// NB: a redelivery needs no room in the in-flight window: its flight
	// holds a slot already. Only first deliveries wait for room, so a
	// window full of NAKed or unanswered deliveries still redelivers them.
	budget := d.cfg.PassLimit
	room := d.cfg.MaxInFlight - len(d.mu.flights)
	if room <= 0 && len(d.mu.due) > 0 && d.mu.due[0].next <= now {
		room += d.evictLongWaitsLocked(now)
	}
	redeliver, deadLetter := d.expiredTimersLocked(now, &budget)
	d.mu.Unlock()

	out := d.redeliveries(redeliver, now)
	for _, f := range deadLetter {
		d.deadLetter(f.key, nil, f.attempt, "max-deliver", nil)
	}
	probed := d.scanDue(now, pass, min(budget, room), &out)
	if len(out) > 0 { // a probe is always among out
		d.publish(out, now, pass, probed)
	}
	return d.untilNext()
}

// beginPassLocked starts pass number d.mu.pass+1 at now and returns its
// number: it forgets the flights whose deletes committed since the last
// pass, and the topics with nothing left. mu must be held.
func (d *Dispatcher) beginPassLocked(now int64) uint64 {
	d.mu.passStart = now
	d.mu.pass++
	d.notePeaksLocked()
	for _, k := range d.mu.committed {
		if f := d.mu.flights[k]; f != nil && f.state == stateSettling {
			d.forgetLocked(f)
		}
		delete(d.mu.canceled, k)
		delete(d.mu.unsent, k)
	}
	d.mu.committed = emptied(d.mu.committed) // a burst of deletes gives its memory back
	d.dropIdleLocked(now)
	return d.mu.pass
}

// expiredTimersLocked takes the flights whose deadlines passed by now:
// those to deliver again, at most *budget of them (spent from it), and
// those at their Delay-Max-Deliver, to dead-letter. A flight whose topic
// is blocked, paused or backing off gets a new deadline instead. mu must
// be held.
func (d *Dispatcher) expiredTimersLocked(now int64, budget *int) (redeliver, deadLetter []*flight) {
	for len(d.mu.timers) > 0 && d.mu.timers[0].deadline <= now {
		f := d.mu.timers[0]
		switch f.state {
		case stateSent:
			// The ack wait ran out: this attempt failed.
			if f.maxDeliver > 0 && f.attempt >= f.maxDeliver {
				d.mu.timers.unschedule(f)
				f.state = stateSettling
				deadLetter = append(deadLetter, f)
				continue
			}
			if b := d.backoffAfter(f.attempt); b > 0 {
				f.state = stateRetry
				d.mu.timers.schedule(f, after(now, b))
				d.waitingLongLocked(f, now)
				continue
			}
			fallthrough
		case stateRetry:
			if f.maxDeliver > 0 && f.attempt >= f.maxDeliver {
				// NB: a NAKed delivery counts as an attempt, as in
				// JetStream, and a NAK comes here without passing the
				// ack-wait check above, so the limit is checked again
				// before delivering once more.
				d.mu.timers.unschedule(f)
				f.state = stateSettling
				deadLetter = append(deadLetter, f)
				continue
			}
			if t := f.topic; t.blockedUntil > now {
				f.state = stateRetry
				d.mu.timers.schedule(f, t.blockedUntil)
				continue
			}
			if d.ruleOfLocked(f.topic).paused {
				// Paused: not redelivered either. ReloadLimits brings it
				// back at a resume; until then it looks again every ack
				// wait, which no eviction takes for a long wait.
				f.state, f.pausedWait = stateRetry, true
				d.mu.timers.schedule(f, after(now, d.cfg.AckWait))
				continue
			}
			if *budget <= 0 {
				// This pass is full; it stays due, so the next pass starts
				// at once and takes it.
				f.state = stateRetry
				return redeliver, deadLetter
			}
			*budget--
			d.mu.timers.unschedule(f)
			f.state = stateRetry
			redeliver = append(redeliver, f)
		default:
			d.mu.timers.unschedule(f)
		}
	}
	return redeliver, deadLetter
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
			d.mu.timers.schedule(f, after(now, d.cfg.NoRespondersBackoff))
			d.mu.Unlock()
			continue
		case expired(msg, now):
			d.mu.Lock()
			f.state = stateSettling
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
// NB: due topics are taken one at a time, and only while there is budget:
// the rest stay in the heap as they are, so a pass costs what it delivers,
// not what is due. With the window full it takes none, and untilNext does
// not count them; the flight that frees room wakes the loop.
func (d *Dispatcher) scanDue(now int64, pass uint64, budget int, out *[]outgoing) []*topic {
	var probed []*topic
	for budget > 0 {
		d.mu.Lock()
		if len(d.mu.due) == 0 || d.mu.due[0].next > now || d.mu.due[0].scanPass == pass {
			// Nothing more due, or only topics scanned in this pass and put
			// back as due still: the next pass, at once, takes them.
			d.mu.Unlock()
			break
		}
		t := d.mu.due[0]
		d.mu.due.unschedule(t)
		t.next = never // lets Notify schedule it again during the scan
		if t.probeOpen {
			// NB: one probe at a time: its flush puts the topic back.
			d.mu.Unlock()
			continue
		}
		room := d.roomOfLocked(t)
		if room <= 0 {
			d.holdLocked(t, now)
			t.heldAt = now
			d.mu.Unlock()
			continue
		}
		d.unholdLocked(t)
		tokens, notBefore := d.tokensLocked(t, now)
		if tokens == 0 {
			t.heldAt = now
			d.rescheduleLocked(t, notBefore) // its rate allows none yet
			d.mu.Unlock()
			continue
		}
		t.scanPass = pass
		d.mu.Unlock()
		n, probe := d.scan(t, now, pass, min(budget, d.cfg.TopicPassLimit, room, tokens), out)
		d.mu.Lock()
		d.spendLocked(t, now, n)
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

// untilNext is the sleep until the earliest topic or timer. While the
// in-flight window is full no topic can be scanned, so only timers count:
// the flight whose end makes room wakes the loop (see forgetLocked).
func (d *Dispatcher) untilNext() time.Duration {
	now := d.nowNs()
	d.mu.Lock()
	defer d.mu.Unlock()
	next := int64(never)
	scannable := len(d.mu.due) > 0 && len(d.mu.flights) < d.cfg.MaxInFlight
	if scannable {
		next = d.mu.due[0].next
	}
	if len(d.mu.timers) > 0 {
		next = min(next, d.mu.timers[0].deadline)
	}
	if len(d.mu.flights) < d.cfg.MaxInFlight && d.dueNowLocked(now, d.frontierCap()) < d.frontierCap() {
		// NB: not while the window is full, as for due topics: the
		// flight that makes room wakes the loop (see forgetLocked).
		next = min(next, d.mu.frontierNext)
	}
	if !scannable && len(d.mu.due) > 0 && d.mu.due[0].next <= now {
		// Full, with topics due: look for flights to evict when that is
		// allowed again (at once, if a flight began a long wait).
		next = min(next, max(d.mu.evictCheckAt, now))
		if next <= now {
			next = now
		}
	}
	wait := time.Hour // nothing known to be due: look again in an hour
	switch {
	case len(d.mu.committed) > 0 || next <= now:
		wait = 0
	case next != never:
		wait = max(time.Duration(next-now), 0)
	}
	d.mu.passStart = 0
	d.mu.wakeBy = after(now, wait)
	return wait
}
