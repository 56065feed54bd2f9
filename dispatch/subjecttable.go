package dispatch

import (
	"bytes"
	"log/slog"
	"math"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/natsdelay/natsdelay/keys"
)

// subjectTable is the topics (subjects, by hash) with something to do:
// due, in flight, backing off or held by a limit, with the due heap that
// orders them and the limits that apply to them. Dispatcher.mu guards it.
type subjectTable struct {
	byHash map[uint64]*topic
	due    topicHeap // by when each is next due
	// idle are topics that may have nothing left to do; see
	// dropIdle.
	idle []*topic
	// held are the topics held at their in-flight limit (see
	// fairness.go), paused those of them held because paused;
	// limitLogAt is when the next of them may be logged, and
	// limitedUnlogged counts those since the last line.
	held   map[*topic]struct{}
	paused int
	// released are the topics a change of limits let go (a resume, a
	// larger max in flight) that wait to go back in the due heap: a pass
	// puts back only what it can take (see readmitReleased), so a
	// resume of a pattern with thousands of subjects due does not put
	// them all before a subject that falls due after it.
	released        []*topic
	limitLogAt      int64
	limitedUnlogged int
	// limits are the limits set by pattern (see limits.go), and groups
	// the groups of their grouped limits with work (see groups.go).
	limits limitTable
	groups map[groupKey]*group
	// spent are the rate buckets of topics dropped before their buckets
	// filled up again, by topic hash, until they would have: a topic made
	// again takes its bucket back, so a subject that runs out of due
	// messages between two gets no second burst (see keptBucket).
	// spentPruneAt is when they are next looked through for full ones.
	spent        map[uint64]spentBucket
	spentPruneAt int64
	// peak is the most topics byHash held since it was last copied (see
	// shrunk).
	peak int

	// What it is told: a topic's default share of the in-flight window
	// (Config.SubjectMaxInFlight), the topics a pass takes
	// (Config.PassLimit), the no-responders back-off
	// (Config.NoRespondersBackoff and NoRespondersMaxBackoff) and the
	// width of the keys' time buckets; the clock, and where the limits it
	// holds topics at are logged.
	maxInFlight         int
	passLimit           int
	backoff, maxBackoff time.Duration
	bucketMs            int64
	now                 func() int64
	log                 *slog.Logger
	// frozen is Config.Frozen: a topic it names is paused.
	frozen func(topicHash uint64) bool
	// dropped counts the topics dropped (see dropIdle, Dispatcher.Epoch).
	// It is read without the lock, so it is shared, not copied.
	dropped *atomic.Uint64
}

func newSubjectTable(cfg Config, bucketMs int64, now func() int64, log *slog.Logger) subjectTable {
	st := subjectTable{
		byHash:      make(map[uint64]*topic),
		held:        make(map[*topic]struct{}),
		spent:       make(map[uint64]spentBucket),
		maxInFlight: cfg.SubjectMaxInFlight,
		passLimit:   cfg.PassLimit,
		backoff:     cfg.NoRespondersBackoff,
		maxBackoff:  cfg.NoRespondersMaxBackoff,
		bucketMs:    bucketMs,
		now:         now,
		log:         log,
		frozen:      cfg.Frozen,
		dropped:     new(atomic.Uint64),
	}
	st.limits.gen = 1 // a new topic's rule (generation 0) is stale
	return st
}

// topic returns the state of hash, creating it with the default share of
// the in-flight window.
func (st *subjectTable) topic(hash uint64) *topic {
	t := st.byHash[hash]
	if t == nil {
		t = &topic{hash: hash, next: never, idx: -1, rule: rule{maxInFlight: st.maxInFlight}}
		if sb, ok := st.spent[hash]; ok {
			// NB: used before the topic knows its subject, and so its
			// rule: its first scan takes no more than the bucket holds.
			t.bucket = sb.bucket
			delete(st.spent, hash)
		}
		st.byHash[hash] = t
	}
	return t
}

// spentBucket is the rate bucket of a dropped topic, full again at fullAt.
type spentBucket struct {
	bucket *rate.Limiter
	fullAt int64
}

// keepSpent keeps t's rate bucket, as t is dropped at now, until it would
// be full again.
func (st *subjectTable) keepSpent(t *topic, now int64) {
	b := t.bucket
	if b == nil || b.Limit() <= 0 {
		return
	}
	missing := float64(b.Burst()) - b.TokensAt(time.Unix(0, now))
	if missing <= 0 {
		return
	}
	st.spent[t.hash] = spentBucket{bucket: b, fullAt: after(now, time.Duration(missing/float64(b.Limit())*float64(time.Second)))}
}

// pruneSpent forgets the buckets that are full again by now, at most once
// a second: a topic made again without one starts full, as they are.
func (st *subjectTable) pruneSpent(now int64) {
	if now < st.spentPruneAt {
		return
	}
	st.spentPruneAt = after(now, time.Second)
	if len(st.spent) == 0 {
		return
	}
	for h, sb := range st.spent {
		if sb.fullAt <= now {
			delete(st.spent, h)
		}
	}
	if len(st.spent) == 0 {
		st.spent = make(map[uint64]spentBucket) // a burst gives its memory back
	}
}

// dropIdle forgets the topics that lost their last flight since the last
// pass, and those that scans found empty, if they still have nothing to
// do: no flight, not in the due heap, no probe, no back-off. A message
// committed later makes a new topic, whose first scan starts at the
// subject's first key; that is safe, since a topic without flights has
// nothing below its cursor but settled messages. It runs at the start of
// a pass, when no scan is under way.
func (st *subjectTable) dropIdle(now int64) {
	for _, t := range st.idle {
		if t.flights == 0 && t.idx < 0 && !t.limited && !t.released && !t.probing && !t.probeOpen && t.blockedUntil <= now && st.byHash[t.hash] == t {
			delete(st.byHash, t.hash)
			st.dropped.Add(1)
			st.keepSpent(t, now)
		}
	}
	st.pruneSpent(now)
	st.idle = emptied(st.idle)
	st.byHash = shrunk(st.byHash, &st.peak)
	// The heap clears the slots it gives up, so only its array is
	// left over from a burst.
	if len(st.due) == 0 && cap(st.due) > keptCap {
		st.due = nil
	}
}

// idleNow notes that t may have nothing left to do.
func (st *subjectTable) idleNow(t *topic) { st.idle = append(st.idle, t) }

// reschedule puts t back in the due heap at next, unless something
// sooner scheduled it meanwhile, and never before its no-responders block
// ends.
func (st *subjectTable) reschedule(t *topic, next int64) {
	if t.idx >= 0 {
		next = min(next, t.next)
	}
	if next == never {
		return
	}
	st.due.schedule(t, max(next, t.blockedUntil))
}

// dueBy reports whether a topic is due at now.
func (st *subjectTable) dueBy(now int64) bool { return len(st.due) > 0 && st.due[0].next <= now }

// dueNow counts the topics in the due heap that are due at now, up to
// limit, visiting only those: by the heap order, the children of a topic
// not yet due are not due either. Topics backing off wait in the heap
// without counting, so subjects nobody listens to cannot stop the
// frontier.
func (st *subjectTable) dueNow(now int64, limit int) int {
	h := st.due
	n := 0
	var walk func(i int)
	walk = func(i int) {
		if i >= len(h) || n >= limit || h[i].next > now {
			return
		}
		n++
		walk(2*i + 1)
		walk(2*i + 2)
	}
	walk(0)
	return n
}

// nextDue takes the topic due first out of the due heap, if it is due at
// now and this pass has not scanned it yet, and returns it; nil if none.
// Its next is then never, which lets Notify schedule it again during its
// scan.
func (st *subjectTable) nextDue(now int64, pass uint64) *topic {
	if !st.dueBy(now) || st.due[0].scanPass == pass {
		// Nothing more due, or only topics scanned in this pass and put
		// back as due still: the next pass, at once, takes them.
		return nil
	}
	t := st.due[0]
	st.due.unschedule(t)
	t.next = never
	return t
}

// toScan is how many first deliveries t, taken from the due heap at now
// by nextDue, may have in its scan. None while its probe is out (its flush
// puts it back), nor while it is at its limit (it is then held) or its
// rate allows none yet (it is then due again when its rate does).
func (st *subjectTable) toScan(t *topic, now int64) int {
	if t.probeOpen {
		return 0 // one probe at a time
	}
	room := st.roomOf(t)
	if room <= 0 {
		st.hold(t, now)
		t.heldAt = now
		return 0
	}
	st.unhold(t)
	tokens, notBefore := st.tokens(t, now)
	if tokens == 0 {
		t.heldAt = now
		st.reschedule(t, notBefore)
		return 0
	}
	return min(room, tokens)
}

// scanned puts t back after a scan at now that took taken messages, with
// more due (full) or its next message due at next: a probe waits for its
// flush, a topic at its limit with more due is held, and any other goes
// back in the due heap at next. It reports whether the scan sent a probe.
func (st *subjectTable) scanned(t *topic, taken int, full bool, next, now int64) bool {
	probe := t.probing && taken > 0
	switch {
	case probe:
		t.probeOpen = true
	case full && st.roomOf(t) <= 0:
		st.hold(t, now)
	default:
		st.reschedule(t, next)
	}
	if t.idx < 0 && t.flights == 0 {
		st.idleNow(t)
	}
	return probe
}

// block backs topic t off after a delivery bounced, unless it is backing
// off already, and schedules it for when the back-off ends: the bounced
// message is due, so that is when t is due again, however much later its
// next message is.
func (st *subjectTable) block(t *topic, now int64) {
	if t.blockedUntil <= now {
		t.backoff = min(max(t.backoff+min(t.backoff, math.MaxInt64-t.backoff), st.backoff), st.maxBackoff)
		t.blockedUntil = after(now, t.backoff)
		t.probing = true
	}
	// Not max(t.next, ...): the scan that delivered the bounced
	// message may have put t back at the time of the message after it.
	st.due.schedule(t, t.blockedUntil)
}

// closeProbes ends the probes of the topics probed by pass, flushed with
// err: a probe that got through ends its topic's back-off.
func (st *subjectTable) closeProbes(probed []*topic, pass uint64, err error, now int64) {
	for _, t := range probed {
		t.probeOpen = false
		if err == nil && t.probing && t.probePass == pass && t.noRespPass != pass {
			t.probing, t.backoff = false, 0
		}
		// After a bounce, block scheduled it for when its back-off
		// ends, and this keeps that.
		st.reschedule(t, now)
	}
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
	// subjectTable.dropIdle), so memory follows the subjects with work, not every
	// subject seen since the start.
	flights int
	// stoppedPass is the last pass in which a delivery of the topic did
	// not go out (fenced, or the publish failed): the topic's later
	// messages of that pass are held back behind it, in order.
	stoppedPass uint64
	// scanPass is the last pass that scanned it: a pass scans each topic
	// once, for fairness.
	scanPass uint64
	// limited is set while the topic is held out of the due heap at its
	// in-flight limit, with more due (see fairness.go).
	limited bool
	// released is set while the topic waits in subjectTable.released: as
	// for a held one, its cursor is at its first message not delivered,
	// and its return to the due heap brings it back there.
	released bool
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
	// waitingOn is the group it waits for, if any, and wokenBy the
	// group whose room woke it last (see groups.go); groupReadTo is the
	// last key read by the scan that left it waiting.
	waitingOn   *group
	wokenBy     *group
	groupReadTo keys.Key
	// groupResume is set while it is held for a group's room, and its
	// next scan may read on from groupReadTo (see groupResumeAt).
	groupResume bool
	// scanning is set while a scan of it is under way, between its
	// take from the due heap and its cursor's move; handedOut counts its
	// messages handed off and not yet taken by a pass (see handoff.go),
	// and staged its flights taken by staged passes not yet published
	// (see stage.go).
	scanning  bool
	handedOut int
	staged    int
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

// beginScan starts a scan of t by pass that may take up to limit
// messages: it returns where the scan starts, the key it reads alone when
// a point read does, and how many it may take (one for a probe).
func (t *topic) beginScan(pass uint64, limit int) (from []byte, single *keys.Key, n int) {
	from = t.cursor
	// A point read only while nothing but the entry can be in the
	// range: no message arrived or bounced below it since (rewind), and
	// the cursor is still at it.
	if t.single != nil && t.rewind == nil && bytes.Equal(from, t.single[:]) {
		single = t.single
	}
	t.single = nil
	t.rewind = nil
	if t.probing {
		limit = 1
		t.probePass = pass
	}
	return from, single, limit
}

// moveCursor moves t's cursor past what a scan from from read, as r says,
// but not past a message that arrived or bounced below it during the
// scan.
func (t *topic) moveCursor(from []byte, r dueRead) {
	cursor := from
	switch {
	case r.held != nil:
		cursor = r.held
	case r.passed:
		cursor = r.lastPassed.Successor()
	}
	if !bytes.Equal(t.cursor, from) && (t.cursor == nil || bytes.Compare(t.cursor, cursor) < 0) {
		// A sooner message arrived, or a delivery bounced, during the scan.
		cursor = t.cursor
	}
	if t.rewind != nil && cursor != nil && bytes.Compare(t.rewind, cursor) < 0 {
		// One arrived or bounced during the scan above its start but
		// below where the scan got to; the scan did not deliver it.
		cursor = t.rewind
	}
	t.rewind = nil
	t.cursor = cursor
}
