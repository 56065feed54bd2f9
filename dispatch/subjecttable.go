package dispatch

import (
	"bytes"
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
	// puts back only what it can take (see readmitReleasedLocked), so a
	// resume of a pattern with thousands of subjects due does not put
	// them all before a subject that falls due after it.
	released        []*topic
	limitLogAt      int64
	limitedUnlogged int
	// limits are the limits set by pattern (see limits.go).
	limits limitTable
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
}

func newSubjectTable() subjectTable {
	st := subjectTable{
		byHash: make(map[uint64]*topic),
		held:   make(map[*topic]struct{}),
		spent:  make(map[uint64]spentBucket),
	}
	st.limits.gen = 1 // a new topic's rule (generation 0) is stale
	return st
}

// topic returns the state of hash, creating it with the default share of
// the in-flight window, maxInFlight.
func (st *subjectTable) topic(hash uint64, maxInFlight int) *topic {
	t := st.byHash[hash]
	if t == nil {
		t = &topic{hash: hash, next: never, idx: -1, rule: rule{maxInFlight: maxInFlight}}
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
