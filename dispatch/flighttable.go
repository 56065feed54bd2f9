package dispatch

import (
	"cmp"
	"slices"
	"time"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/keys"
)

// flightTable is the deliveries this process has handed out and not yet
// settled, with their deadlines, and what it must remember of messages
// settled or taken back until the store has caught up. Dispatcher.mu
// guards it.
type flightTable struct {
	byKey  map[keys.Key]*flight
	timers flightHeap // by deadline
	// canceled marks keys settled (ACKed, canceled, replaced) whose
	// deletes have not committed yet, so no scan that read the message
	// before can deliver it again.
	canceled map[keys.Key]struct{}
	// unflushed holds the messages moved by commits without sync (see
	// Dispatcher.Move), by event ID, until Dispatcher.Flush has made
	// them durable: none goes out before, so a crash that undoes a move
	// never leaves a message delivered under its new key and pending
	// under its old one.
	unflushed map[uint64]*unflushedMove
	// unsent keeps the counted attempts of flights forgotten because
	// their delivery reached nobody, until a scan makes a flight of the
	// message again: its count in the store may lag (see
	// Config.AttemptWriteDelay).
	unsent map[keys.Key]uint32
	// committed holds keys whose deletes have committed; the loop forgets
	// their flights before its next scan, so no scan that started earlier
	// can see the key without its flight.
	committed []keys.Key
	// evictCheckAt is when evictLongWaitsLocked may look again after it
	// found nothing to evict; evictLogAt is when the next eviction may be
	// logged, and evictedUnlogged counts those since the last line.
	evictCheckAt    int64
	evictLogAt      int64
	evictedUnlogged int
	// peaks are the most entries each map held since it was last copied
	// (see shrunk).
	peaks struct{ byKey, unsent, canceled, unflushed int }
}

// unflushedMove is a message moved without sync: its move is committed
// once committed is set, and s and fireAtNs are then its new key and time.
type unflushedMove struct {
	committed bool
	s         delaystore.Scheduled
	fireAtNs  int64
}

func newFlightTable() flightTable {
	return flightTable{
		byKey:     make(map[keys.Key]*flight),
		canceled:  make(map[keys.Key]struct{}),
		unsent:    make(map[keys.Key]uint32),
		unflushed: make(map[uint64]*unflushedMove),
	}
}

// settledUncommitted marks k as settled by a delete that has committed
// already, so no scan under way delivers it; the mark goes at the start
// of the next pass, with those of the deleter's commits.
func (ft *flightTable) settledUncommitted(k keys.Key) {
	ft.canceled[k] = struct{}{}
	ft.committed = append(ft.committed, k)
}

// attempt is the last counted attempt of k, in flight or bounced.
func (ft *flightTable) attempt(k keys.Key) uint32 {
	if f := ft.byKey[k]; f != nil {
		return f.counted
	}
	return ft.unsent[k]
}

// held reports whether k is a message moved without sync whose move is
// not yet flushed: it must not go out.
func (ft *flightTable) held(k keys.Key) bool {
	_, ok := ft.unflushed[k.EventID()]
	return ok
}

// notePeaks records how large the maps are; see Dispatcher.notePeaksLocked.
func (ft *flightTable) notePeaks() {
	ft.peaks.byKey = max(ft.peaks.byKey, len(ft.byKey))
	ft.peaks.unsent = max(ft.peaks.unsent, len(ft.unsent))
	ft.peaks.canceled = max(ft.peaks.canceled, len(ft.canceled))
	ft.peaks.unflushed = max(ft.peaks.unflushed, len(ft.unflushed))
}

// shrink gives back the memory a burst left in the maps and the timer
// heap.
func (ft *flightTable) shrink() {
	ft.byKey = shrunk(ft.byKey, &ft.peaks.byKey)
	ft.unsent = shrunk(ft.unsent, &ft.peaks.unsent)
	ft.canceled = shrunk(ft.canceled, &ft.peaks.canceled)
	ft.unflushed = shrunk(ft.unflushed, &ft.peaks.unflushed)
	// The heap clears the slots it gives up, so only its array is
	// left over from a burst.
	if len(ft.timers) == 0 && cap(ft.timers) > keptCap {
		ft.timers = nil
	}
}

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
	pending *delaystore.StoredMessage
	// about is what Config.Lifecycle is told of it; nil without one.
	about    *about
	pass     uint64 // the pass that published it
	deadline int64  // Unix ns; meaning depends on state
	idx      int    // in the timer heap; -1 when not in it
	// answer is the consumer's last answer to a delivery of it (see
	// Ack.String), empty while none came; it goes into its dead letter.
	answer string
	// lostPass is the pass whose delivery of it reached nobody (bounced,
	// or failed to publish or flush), so that pass's flush does not count
	// it as delivered.
	lostPass uint64
}

// pendingTerm is a +TERM waiting for its flight's pass to flush.
type pendingTerm struct {
	reason string
	answer string
	done   func(error)
}

// forgetLocked drops f. If that makes room in a full in-flight window, it
// wakes the loop, which does not wait for due topics while the window is
// full (see untilNext). mu must be held.
func (d *Dispatcher) forgetLocked(f *flight) {
	d.mu.flights.timers.unschedule(f)
	if d.mu.flights.byKey[f.key] != f {
		return
	}
	delete(d.mu.flights.byKey, f.key)
	if f.topic.flights--; f.topic.flights == 0 {
		d.mu.subjects.idleNow(f.topic)
	}
	d.roomFreedLocked(f.topic)
	if len(d.mu.flights.byKey) == d.cfg.MaxInFlight-1 && (len(d.mu.subjects.due) > 0 || len(d.mu.subjects.released) > 0 || d.mu.frontier.next != never) {
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
	d.mu.flights.evictCheckAt = 0
	return len(d.mu.flights.byKey) >= d.cfg.MaxInFlight && len(d.mu.subjects.due) > 0
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
	if now < d.mu.flights.evictCheckAt {
		return 0
	}
	horizon := after(now, d.cfg.AckWait)
	var long []*flight
	for _, f := range d.mu.flights.timers {
		if f.state == stateRetry && f.deadline > horizon {
			long = append(long, f)
		}
	}
	if len(long) == 0 {
		d.mu.flights.evictCheckAt = after(now, d.cfg.AckWait/10)
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
	// At most one line per 10 s; the counter has every eviction.
	d.mu.flights.evictedUnlogged += len(long)
	if now >= d.mu.flights.evictLogAt {
		d.log.Warn("in-flight window full: evicted the longest-waiting deliveries, whose subjects wait with them",
			"evicted", d.mu.flights.evictedUnlogged, "max_in_flight", d.cfg.MaxInFlight)
		d.mu.flights.evictedUnlogged, d.mu.flights.evictLogAt = 0, after(now, 10*time.Second)
	}
	return len(long)
}

// committed is the deleter's callback: these keys are gone from the store.
func (d *Dispatcher) committed(ks []keys.Key) {
	d.mu.Lock()
	d.mu.flights.committed = append(d.mu.flights.committed, ks...)
	d.mu.Unlock()
	d.signal()
}
