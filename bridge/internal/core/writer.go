package core

import (
	"bytes"
	"errors"
	"log/slog"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/dispatch"
	"github.com/natsdelay/natsdelay/keys"
)

// ScheduleFunc is told the outcome of one Schedule: the new message's key,
// or why it was not stored (an error wrapping wire.ErrUnavailable). It is
// called on the writer's goroutine, after the commit, and should not block:
// the next batch waits for it. A message that replaced a recurring
// schedule by its Delay-Id, whose next occurrence was planned ahead, is
// told once that occurrence is deleted too, on the dispatcher's deleter's
// goroutine (see writer.commit).
type ScheduleFunc func(k keys.Key, err error)

// OnceFunc is ScheduleFunc for ScheduleOnce: it is told the outcome,
// which may be a duplicate's first answer.
type OnceFunc func(res delaystore.Outcome, err error)

// scheduleRequest is one accepted message waiting for the group commit.
type scheduleRequest struct {
	once delaystore.Once
	done OnceFunc
	size int // messageSize, set by submit
}

// writer is the group commit: Schedule hands it messages, and it drains
// whatever is waiting, commits it in one synced batch, tells the
// dispatcher, then tells every caller. Throughput grows with the number of
// concurrent callers while latency stays about one fsync. A caller with
// several messages at once (a burst a cell of a fleet took) hands them
// over together: one at a time, the writer, woken by the first, would
// find some of them and commit those alone, a commit more for the same
// messages (performance.md, "Fewer, larger commits").
//
// Both the messages and the bytes it holds are bounded, so that large
// payloads from many publishers at once cannot grow a batch (and the
// service's memory) without limit: a batch ends at maxBatch messages or
// before the message that would take it past maxBatchBytes, and submit
// blocks while twice maxBatchBytes wait (one batch committing, one
// filling). The caller's transport then holds further requests (NATS, in
// the subscription's pending queue, and past its limit drops them).
type writer struct {
	repo          *delaystore.Repository
	disp          *dispatch.Dispatcher
	log           *slog.Logger
	maxBatch      int
	maxBatchBytes int
	observe       func(batch int, took time.Duration, err error)
	// window is the duplicate window (Config.DedupWindow), read on the
	// clock now.
	window time.Duration
	now    func() time.Time
	// order is the array of keyOrder, reused from batch to batch; later
	// the messages of a batch answered once what they withdrew is deleted.
	order, later []int

	// reqs are the hand-overs, each of one or more requests; at most
	// maxBatch wait, and submit blocks when it is full.
	reqs chan handover
	// queued is the bytes handed over and not yet answered; submit waits
	// on room while it is at the limit.
	mu     sync.Mutex
	room   *sync.Cond
	queued int
	wg     sync.WaitGroup
}

func newWriter(repo *delaystore.Repository, disp *dispatch.Dispatcher, maxBatch, maxBatchBytes int, log *slog.Logger, observe func(int, time.Duration, error)) *writer {
	w := &writer{repo: repo, disp: disp, log: log, maxBatch: maxBatch, maxBatchBytes: maxBatchBytes, observe: observe, reqs: make(chan handover, maxBatch)}
	w.room = sync.NewCond(&w.mu)
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		w.run()
	}()
	return w
}

// handover is what one caller hands the writer: a request alone in one,
// or several in many. One request travels by value: a slice of one was
// an allocation for every message published.
type handover struct {
	one    scheduleRequest
	many   []scheduleRequest
	single bool // one holds the request
}

// len is how many requests h holds.
func (h handover) len() int {
	if h.single {
		return 1
	}
	return len(h.many)
}

// empty reports whether h holds no request.
func (h handover) empty() bool { return h.len() == 0 }

// submitOne hands r alone to the writer, as submit does.
func (w *writer) submitOne(r scheduleRequest) {
	r.size = messageSize(r.once.Msg)
	w.await(r.size)
	w.reqs <- handover{one: r, single: true}
}

// submit hands rs, one request or several, to the writer, first waiting
// while the bytes queued are at the limit. Requests larger than the limit
// together wait for an empty queue.
func (w *writer) submit(rs []scheduleRequest) {
	size := 0
	for i := range rs {
		rs[i].size = messageSize(rs[i].once.Msg)
		size += rs[i].size
	}
	w.await(size)
	w.reqs <- handover{many: rs}
}

// await waits while size more bytes would take the queue past its limit,
// then counts them queued.
func (w *writer) await(size int) {
	w.mu.Lock()
	for w.queued > 0 && w.queued+size > 2*w.maxBatchBytes {
		w.room.Wait()
	}
	w.queued += size
	w.mu.Unlock()
}

// release gives back the bytes of answered requests.
func (w *writer) release(n int) {
	w.mu.Lock()
	w.queued -= n
	w.mu.Unlock()
	w.room.Broadcast()
}

// messageSize is about what m takes in a batch and in memory.
func messageSize(m *delaystore.StoredMessage) int {
	n := 64 + len(m.Subject) + len(m.Payload) + len(m.ClientId)
	for _, h := range m.Headers {
		n += len(h.Name)
		for _, v := range h.Values {
			n += len(v)
		}
	}
	return n
}

// close commits and answers what was handed over, then stops. Nothing may
// be handed over after close.
func (w *writer) close() {
	close(w.reqs)
	w.wg.Wait()
}

func (w *writer) run() {
	b := batchFill{max: w.maxBatch, maxBytes: w.maxBatchBytes, reqs: make([]scheduleRequest, 0, w.maxBatch)}
	// carry are the requests of a hand-over that did not fit the last
	// batch.
	var carry handover
	var pace commitPace
	for {
		if carry.empty() {
			var ok bool
			if carry, ok = <-w.reqs; !ok {
				return
			}
		}
		b.reqs, b.bytes = b.reqs[:0], 0
		carry = b.take(carry)
		handovers := 1
		closed := false
	drain:
		for carry.empty() && len(b.reqs) < w.maxBatch {
			select {
			case rs, ok := <-w.reqs:
				if !ok {
					closed = true
					break drain
				}
				carry = b.take(rs)
				handovers++
			default:
				break drain
			}
		}
		if !closed && carry.empty() {
			carry, handovers = pace.await(w, &b, handovers)
		}
		w.commit(b.reqs)
		pace.committed(handovers)
		w.release(b.bytes)
		// NB: the array is reused, and its entries past the next batch's
		// length would otherwise keep messages and their requests alive
		// after they were answered: up to a whole batch of them, after
		// traffic stopped.
		clear(b.reqs)
	}
}

// keyOrder returns in order, reusing its array, the indexes of the
// messages res stored (not the resends), in the order of their keys.
func keyOrder(res []delaystore.Outcome, order []int) []int {
	order = order[:0]
	for i, o := range res {
		if !o.Duplicate {
			order = append(order, i)
		}
	}
	slices.SortFunc(order, func(a, b int) int { return bytes.Compare(res[a].Key[:], res[b].Key[:]) })
	return order
}

// batchFill is the batch the writer fills: at most max requests, and
// past maxBytes only with its first.
type batchFill struct {
	max, maxBytes int
	reqs          []scheduleRequest
	bytes         int
}

// take adds the requests of h that fit, in order, and returns the rest.
func (b *batchFill) take(h handover) handover {
	if h.single {
		if !b.fits(h.one) {
			return h
		}
		b.add(h.one)
		return handover{}
	}
	for i, r := range h.many {
		if !b.fits(r) {
			return handover{many: h.many[i:]}
		}
		b.add(r)
	}
	return handover{}
}

// fits reports whether r may join the batch.
func (b *batchFill) fits(r scheduleRequest) bool {
	return len(b.reqs) < b.max && (len(b.reqs) == 0 || b.bytes+r.size <= b.maxBytes)
}

func (b *batchFill) add(r scheduleRequest) {
	b.reqs = append(b.reqs, r)
	b.bytes += r.size
}

// duplicates counts the resends in res, which stored nothing.
func duplicates(res []delaystore.Outcome) int {
	n := 0
	for _, o := range res {
		if o.Duplicate {
			n++
		}
	}
	return n
}

func (w *writer) commit(batch []scheduleRequest) {
	in := make([]delaystore.Once, len(batch))
	earliest := int64(math.MaxInt64)
	for i, r := range batch {
		in[i] = r.once
		// NB: a debounce or a throttle may move a fire time sooner,
		// never before the publish.
		earliest = min(earliest, r.once.Msg.FireAtNs, r.once.Msg.EnqueuedAtNs)
	}
	// NB: before the commit: a pass may take a message, settle it and
	// drop its topic between the commit and NotifyMessage, which the
	// epoch then shows (see dispatch.Dispatcher.Epoch); and a pass that
	// reads a newer message's due entry meanwhile must not start its
	// subject's scan above an older one not yet told of (see
	// dispatch.Dispatcher.Ingesting), nor start above one that is below
	// its cursor (IngestingKeys).
	epoch, storing, told := w.disp.IngestingKeys(earliest)
	defer told()
	start := time.Now()
	res, err := w.repo.ScheduleOnceNoted(in, w.window, w.now().UnixNano(), delaystore.Sync, storing)
	if w.observe != nil {
		w.observe(len(batch)-duplicates(res), time.Since(start), err)
	}
	if errors.Is(err, delaystore.ErrNotLeader) {
		// Not a storage fault: this node lost its cluster's leadership
		// while the batch waited. The client asks again, and reaches the
		// leader (a NotLeaderError says which node that is).
		w.log.Warn("scheduled messages not committed: not the cluster leader", "err", err, "messages", len(batch))
		err = unavailable("%s", delaystore.NotLeaderText(err))
		for _, r := range batch {
			r.done(delaystore.Outcome{}, err)
		}
		return
	}
	if err != nil {
		w.log.Error("committing scheduled messages", "err", err, "messages", len(batch))
		err = unavailable("storage failing: %v", err)
		for _, r := range batch {
			r.done(delaystore.Outcome{}, err)
		}
		return
	}
	// NB: a message due now goes to the next pass as it is, with no read
	// back, when nothing of its subject is ahead of it; told one after
	// another, before the next batch commits, in key order, not commit
	// order (docs/architecture.md, "A message due at ingest"): a message
	// published later with a shorter delay has the smaller key, and told
	// after an older one of its subject that was handed off, it would go
	// out behind it.
	//
	// A message that replaced a recurring schedule by its Delay-Id
	// withdraws the occurrence the planner planned ahead for the schedule
	// replaced, if any, and is answered only once that occurrence's
	// delete is committed, on the deleter's goroutine: once answered,
	// nothing of the old schedule is left pending (see
	// dispatch.Dispatcher.NotifyMessageWithdrawing).
	w.order = keyOrder(res, w.order)
	w.later = w.later[:0]
	for _, i := range w.order {
		_, x, withdrawing := w.disp.NotifyMessageWithdrawing(res[i].Scheduled, res[i].FireAtNs, batch[i].once.Msg, epoch)
		if withdrawing {
			w.later = append(w.later, i)
			w.answerOnceDeleted(x, batch[i], res[i])
		}
	}
	for i, r := range batch {
		if !slices.Contains(w.later, i) {
			r.done(res[i], nil)
		}
	}
}

// answerOnceDeleted answers r, stored as o, once x, the occurrence
// planned ahead that o's replace withdrew, is deleted.
func (w *writer) answerOnceDeleted(x keys.Key, r scheduleRequest, o delaystore.Outcome) {
	w.disp.DeleteWithdrawn(x, func(err error) {
		if err != nil {
			w.log.Warn("deleting the occurrence planned ahead of a schedule replaced by its Delay-Id", "tag", x, "err", err)
		}
		r.done(o, nil)
	})
}
