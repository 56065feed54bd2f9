package dispatch

import (
	"cmp"
	"log/slog"
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
	timers flightTimers
	// canceled marks keys settled (ACKed, canceled, replaced) whose
	// deletes have not committed yet, so no scan that read the message
	// before can deliver it again. A key with a flight carries the mark
	// on its flight instead (flight.canceled) until the flight is
	// dropped: most marks are an ACK's, on a flight forgotten when its
	// delete commits, and a map entry for each was an insert and a
	// delete for every message delivered.
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

	// What it is told: the size of the window (Config.MaxInFlight) and
	// the ack wait (Config.AckWait); where evictions are logged.
	maxInFlight int
	ackWait     time.Duration
	log         *slog.Logger
}

// unflushedMove is a message moved without sync: its move is committed
// once committed is set, and s and fireAtNs are then its new key and time.
type unflushedMove struct {
	committed bool
	s         delaystore.Scheduled
	fireAtNs  int64
}

func newFlightTable(cfg Config, log *slog.Logger) flightTable {
	return flightTable{
		byKey:       make(map[keys.Key]*flight),
		canceled:    make(map[keys.Key]struct{}),
		unsent:      make(map[keys.Key]uint32),
		unflushed:   make(map[uint64]*unflushedMove),
		maxInFlight: cfg.MaxInFlight,
		ackWait:     cfg.AckWait,
		log:         log,
	}
}

// full reports whether the in-flight window is full: first deliveries
// wait for room.
func (ft *flightTable) full() bool { return len(ft.byKey) >= ft.maxInFlight }

// add takes f, a message just read to deliver, in flight.
func (ft *flightTable) add(f *flight) {
	ft.byKey[f.key] = f
	f.topic.flights++
}

// drop takes f out of the table, and reports whether it was in it. A
// mark f carried stays, on its key (see canceled).
func (ft *flightTable) drop(f *flight) bool {
	ft.timers.unschedule(f)
	if ft.byKey[f.key] != f {
		return false
	}
	delete(ft.byKey, f.key)
	if f.canceled {
		ft.canceled[f.key] = struct{}{}
	}
	return true
}

// cancel marks k settled (see canceled), and uncancel takes the mark
// back.
func (ft *flightTable) cancel(k keys.Key) { ft.cancelFlight(k, ft.byKey[k]) }

func (ft *flightTable) uncancel(k keys.Key) {
	delete(ft.canceled, k)
	if f := ft.byKey[k]; f != nil {
		f.canceled = false
	}
}

// cancelFlight is cancel of k, whose flight is f, or nil if it has none.
func (ft *flightTable) cancelFlight(k keys.Key, f *flight) {
	if f != nil {
		f.canceled = true
		return
	}
	ft.canceled[k] = struct{}{}
}

// busy reports whether a scan must skip k: in flight, marked settled, or
// moved without sync and not yet flushed.
func (ft *flightTable) busy(k keys.Key) bool {
	if _, ok := ft.byKey[k]; ok {
		return true
	}
	return ft.isCanceled(k) || ft.held(k)
}

// nextDeadline is the earliest deadline of a flight, never if none.
func (ft *flightTable) nextDeadline() int64 {
	if f := ft.timers.first(); f != nil {
		return f.deadline
	}
	return never
}

// settling notes that f's delete is queued: it waits for no deadline
// any more, and is forgotten once that commits.
func (ft *flightTable) settling(f *flight) {
	f.state = stateSettling
	ft.timers.unschedule(f)
}

// isCanceled reports whether k is marked settled (see canceled).
func (ft *flightTable) isCanceled(k keys.Key) bool {
	if _, ok := ft.canceled[k]; ok {
		return true
	}
	f := ft.byKey[k]
	return f != nil && f.canceled
}

// settled reports whether k is being settled: marked settled, or its
// flight settling (a dead letter at Delay-Max-Deliver or at expiry, an
// ACK-less delivery that went out), with its delete queued or on its way.
func (ft *flightTable) settled(k keys.Key) bool {
	if f := ft.byKey[k]; f != nil && f.state == stateSettling {
		return true
	}
	return ft.isCanceled(k)
}

// markSettling marks k so that no scan, redelivery or publish sends it
// again, from now until its delete commits: a scan may have read the
// message before the answer that settles it arrived. It returns k's
// flight, if any.
func (ft *flightTable) markSettling(k keys.Key) *flight {
	f := ft.byKey[k]
	ft.markSettlingFlight(k, f)
	return f
}

// markSettlingFlight is markSettling of k, whose flight is f, or nil if
// it has none.
func (ft *flightTable) markSettlingFlight(k keys.Key, f *flight) {
	ft.cancelFlight(k, f)
	if f != nil {
		ft.settling(f)
	}
}

// sent notes that f's delivery by pass is going out at now: it waits for
// an answer until the ack wait is over.
func (ft *flightTable) sent(f *flight, pass uint64, now int64) {
	f.state = stateSent
	f.pass = pass
	ft.timers.schedule(f, after(now, ft.ackWait))
}

// retryAt makes f wait until at to be delivered again.
func (ft *flightTable) retryAt(f *flight, at int64) {
	f.state = stateRetry
	ft.timers.schedule(f, at)
}

// unsend keeps the counted attempts of f, whose delivery reached nobody,
// for the flight its message makes at its next scan (see takeCounted).
func (ft *flightTable) unsend(f *flight) {
	f.lostPass = f.pass
	if f.counted > 0 {
		ft.unsent[f.key] = f.counted
	}
}

// takeCounted is the attempts of k known to have reached a subscriber,
// from those stored (the store's count, which may lag) and those its
// last flight counted.
func (ft *flightTable) takeCounted(k keys.Key, stored uint32) uint32 {
	if c, ok := ft.unsent[k]; ok {
		delete(ft.unsent, k)
		return max(stored, c)
	}
	return stored
}

// settleCommitted drops what it keeps of the keys whose deletes
// committed since the last pass, handing forget each one's flight still
// settling.
func (ft *flightTable) settleCommitted(forgotten func(*flight)) {
	for _, k := range ft.committed {
		switch f := ft.byKey[k]; {
		case f == nil:
		case f.state == stateSettling:
			// As drop, but its mark goes with it: the delete committed.
			ft.timers.unschedule(f)
			delete(ft.byKey, k)
			forgotten(f)
		default:
			f.canceled = false
		}
		delete(ft.canceled, k)
		delete(ft.unsent, k)
	}
	ft.committed = emptied(ft.committed) // a burst of deletes gives its memory back
}

// resumePaused makes the flights waiting for their subjects' pause to
// end due at now: the pass checks their pause again.
func (ft *flightTable) resumePaused(now int64) {
	var waiting []*flight
	ft.timers.each(func(f *flight) {
		if f.pausedWait {
			waiting = append(waiting, f)
		}
	})
	for _, f := range waiting {
		f.pausedWait = false
		ft.timers.schedule(f, now)
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
	// The timers clear the slots they give up, so only their arrays
	// are left over from a burst.
	ft.timers.release(keptCap)
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
	// those without a client id, which no new message can replace, and
	// occurrences once they go out planned (see plannedPending).
	pending *delaystore.StoredMessage
	// group is the group of a grouped limit it counts in, if any.
	group *group
	// about is what Config.Lifecycle is told of it; nil without one.
	about    *about
	pass     uint64 // the pass that published it
	deadline int64  // Unix ns; meaning depends on state
	// idx is its place in the timers' heap, -1 when not in it; queued is
	// one more than its place in their queue, 0 when not in it (see
	// flightTimers).
	idx    int
	queued int
	// answer is the consumer's last answer to a delivery of it (see
	// Ack.String), empty while none came; it goes into its dead letter.
	answer string
	// canceled is its key's mark while it is in the table (see
	// flightTable.canceled).
	canceled bool
	// lostPass is the pass whose delivery of it reached nobody (bounced,
	// or failed to publish or flush), so that pass's flush does not count
	// it as delivered.
	lostPass uint64
}

// pendingFlight is a flight and the message its pending points to, in
// one allocation: most first deliveries keep one.
type pendingFlight struct {
	flight
	pending delaystore.StoredMessage
}

// pendingTerm is a +TERM waiting for its flight's pass to flush.
type pendingTerm struct {
	reason string
	answer string
	done   func(error)
}

// waitsLong is told that f now waits until its deadline, and reports
// whether that is longer than the ack wait: f may then be evicted from a
// full window, so the next pass looks again.
func (ft *flightTable) waitsLong(f *flight, now int64) bool {
	if f.state != stateRetry || f.deadline <= after(now, ft.ackWait) {
		return false
	}
	ft.evictCheckAt = 0
	return true
}

// longWaits picks the flights to evict from a full window at now (see
// Dispatcher.evictLongWaitsLocked): up to a quarter of the window,
// furthest deadline first, of those waiting longer than the ack wait.
// Finding them reads every flight, so when there are none it does not
// look again for a tenth of the ack wait.
func (ft *flightTable) longWaits(now int64) []*flight {
	if now < ft.evictCheckAt {
		return nil
	}
	horizon := after(now, ft.ackWait)
	var long []*flight
	ft.timers.each(func(f *flight) {
		if f.state == stateRetry && f.deadline > horizon {
			long = append(long, f)
		}
	})
	if len(long) == 0 {
		ft.evictCheckAt = after(now, ft.ackWait/10)
		return nil
	}
	slices.SortFunc(long, func(a, b *flight) int { return cmp.Compare(b.deadline, a.deadline) })
	return long[:min(len(long), max(1, ft.maxInFlight/4))]
}

// evicted logs n evictions at now, at most one line per 10 s; the counter
// has every eviction.
func (ft *flightTable) evicted(n int, now int64) {
	ft.evictedUnlogged += n
	if now >= ft.evictLogAt {
		ft.log.Warn("in-flight window full: evicted the longest-waiting deliveries, whose subjects wait with them",
			"evicted", ft.evictedUnlogged, "max_in_flight", ft.maxInFlight)
		ft.evictedUnlogged, ft.evictLogAt = 0, after(now, 10*time.Second)
	}
}

// expire takes the flights whose deadlines passed by now: those to
// deliver again, at most *budget of them (spent from it), and those at
// their Delay-Max-Deliver, to dead-letter. A flight whose topic is
// blocked or paused, or that backs off (backoff gives the back-off after
// an attempt), gets a new deadline instead.
func (ft *flightTable) expire(now int64, budget *int, backoff func(uint32) time.Duration, paused func(*topic) bool) (redeliver, deadLetter []*flight) {
	for f := ft.timers.first(); f != nil && f.deadline <= now; f = ft.timers.first() {
		switch f.state {
		case stateSent:
			// The ack wait ran out: this attempt failed.
			if f.maxDeliver > 0 && f.attempt >= f.maxDeliver {
				ft.settling(f)
				deadLetter = append(deadLetter, f)
				continue
			}
			if b := backoff(f.attempt); b > 0 {
				ft.retryAt(f, after(now, b))
				ft.waitsLong(f, now)
				continue
			}
			fallthrough
		case stateRetry:
			if f.maxDeliver > 0 && f.attempt >= f.maxDeliver {
				// A NAKed delivery counts as an attempt, as in
				// JetStream, and a NAK comes here without passing the
				// ack-wait check above, so the limit is checked again
				// before delivering once more.
				ft.settling(f)
				deadLetter = append(deadLetter, f)
				continue
			}
			if t := f.topic; t.blockedUntil > now {
				ft.retryAt(f, t.blockedUntil)
				continue
			}
			if paused(f.topic) {
				// Paused: not redelivered either. ReloadLimits brings it
				// back at a resume; until then it looks again every ack
				// wait, which no eviction takes for a long wait.
				f.pausedWait = true
				ft.retryAt(f, after(now, ft.ackWait))
				continue
			}
			if *budget <= 0 {
				// This pass is full; it stays due, so the next pass starts
				// at once and takes it.
				f.state = stateRetry
				return redeliver, deadLetter
			}
			*budget--
			ft.timers.unschedule(f)
			f.state = stateRetry
			redeliver = append(redeliver, f)
		default:
			ft.timers.unschedule(f)
		}
	}
	return redeliver, deadLetter
}

// committed is the deleter's callback: these keys are gone from the store.
func (d *Dispatcher) committed(ks []keys.Key) {
	d.mu.Lock()
	d.mu.flights.committed = append(d.mu.flights.committed, ks...)
	d.mu.Unlock()
	d.signal()
}
