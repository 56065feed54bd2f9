package dispatch

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/keys"
)

// deleteDone is told, once the delete it waited for was committed, whether
// a pending message was actually removed.
type deleteDone func(applied bool, err error)

// keyedOp is an op with its key: queued, waiting, or taken by a commit.
type keyedOp struct {
	k  keys.Key
	op *pendingOp
}

// pendingOp is the latest write queued for one key. A delete supersedes an
// update, so a message ACKed soon after delivery costs one write, not two.
type pendingOp struct {
	msg *delaystore.StoredMessage // nil means delete
	// pending, on a delete, is the message as the dispatcher knows it is
	// pending, so the commit need not read it (see delaystore.Op.Pending).
	pending *delaystore.StoredMessage
	// dead, on a delete, keeps the message as a dead letter in the same
	// commit (see delaystore.Op.Dead).
	dead    *delaystore.Dead
	waiters []deleteDone
	// first holds the waiters until there are two: most ops have one, an
	// ACK's, and a slice of its own was an allocation for each.
	first [1]deleteDone
	// queued is when the first update still pending was queued; an update
	// is written once it is older than the deleter's updateDelay.
	queued time.Time
	// out is set once the op is no longer its key's in ops: taken by a
	// commit, or merged into an older one put back (see putBack). The
	// queue's entries of an op out are stale; the flag saves looking
	// each entry's key up again.
	out bool
}

// deleter batches deletes and attempt-count updates and commits them without
// fsync: a lost delete or count only causes a redelivery. It is the second
// of the two places (with ingest) that write to the store.
//
// Deletes are committed at once. An attempt-count update waits updateDelay
// first: most deliveries are ACKed well within it, and the ACK's delete then
// replaces the update, which saves rewriting the whole message only to
// delete it a moment later. Close writes every update still
// waiting, so a clean restart keeps every count; a crash loses at most the
// counts of the last updateDelay, as it may lose any NoSync write.
type deleter struct {
	repo        *delaystore.Repository
	log         *slog.Logger
	max         int
	updateDelay time.Duration
	onCommitted func([]keys.Key) // called after each successful commit, without locks
	// burst is waited for before a commit (see burstHold).
	burst *burstHold

	mu struct {
		sync.Mutex
		ops map[keys.Key]*pendingOp
		// opsPeak is the most ops held since ops was last copied; see
		// shrunk.
		opsPeak int
		// due lists, in queue order, the ops to write at the next commit:
		// deletes, and updates that failed to commit once. An entry whose
		// op is out is stale and skipped.
		due []keyedOp
		// waiting lists updates in the order they were queued, which is
		// the order they fall due. An entry whose op has since become a
		// delete, or been written, is stale and skipped.
		waiting []keyedOp
		closed  bool
	}
	notFull *sync.Cond // signalled when the queue is taken
	kick    chan struct{}
	done    chan struct{}
	wg      sync.WaitGroup
	// closeErr is why the writes queued at close were not committed; run
	// sets it before it returns.
	closeErr error

	// taken and batch are commitOnce's, reused from one commit to the
	// next: only run commits, and a commit holds at most maxCommitOps.
	taken []keyedOp
	batch []delaystore.Op
}

func newDeleter(repo *delaystore.Repository, max int, updateDelay time.Duration, log *slog.Logger, onCommitted func([]keys.Key), burst *burstHold) *deleter {
	dl := &deleter{repo: repo, max: max, updateDelay: updateDelay, log: log, onCommitted: onCommitted, burst: burst, kick: make(chan struct{}, 1), done: make(chan struct{})}
	dl.mu.ops = make(map[keys.Key]*pendingOp)
	dl.notFull = sync.NewCond(&dl.mu.Mutex)
	dl.wg.Add(1)
	go func() {
		defer dl.wg.Done()
		dl.run()
	}()
	return dl
}

// delete queues a delete of k; done, if not nil, is called once it is
// committed. It blocks while the queue is full.
func (dl *deleter) delete(k keys.Key, done deleteDone) {
	dl.enqueue(k, nil, nil, nil, done)
}

// deleteDead is delete of k that keeps it as the dead letter dead, in
// the same commit.
func (dl *deleter) deleteDead(k keys.Key, dead *delaystore.Dead, done deleteDone) {
	dl.enqueue(k, nil, nil, dead, done)
}

// deletePending is delete of a message the caller knows is pending, as
// pending, which saves the commit reading it; see delaystore.Op.Pending.
func (dl *deleter) deletePending(k keys.Key, pending *delaystore.StoredMessage, done deleteDone) {
	dl.enqueue(k, nil, pending, nil, done)
}

// update queues a rewrite of the pending message k, dropped at commit if k
// is no longer pending or a delete of k is queued.
func (dl *deleter) update(k keys.Key, msg *delaystore.StoredMessage) {
	dl.enqueue(k, msg, nil, nil, nil)
}

func (dl *deleter) enqueue(k keys.Key, msg, pending *delaystore.StoredMessage, dead *delaystore.Dead, done deleteDone) {
	dl.mu.Lock()
	for !dl.mu.closed && len(dl.mu.ops) >= dl.max && dl.mu.ops[k] == nil {
		dl.notFull.Wait()
	}
	if dl.mu.closed {
		dl.mu.Unlock()
		if done != nil {
			done(false, ErrClosed)
		}
		return
	}
	op := dl.mu.ops[k]
	switch {
	case op == nil && msg == nil:
		op = &pendingOp{pending: pending, dead: dead}
		dl.mu.ops[k] = op
		dl.mu.due = append(dl.mu.due, keyedOp{k, op})
	case op == nil:
		op = &pendingOp{msg: msg, queued: time.Now()}
		dl.mu.ops[k] = op
		dl.mu.waiting = append(dl.mu.waiting, keyedOp{k, op})
	case msg == nil:
		if op.msg != nil && !op.queued.IsZero() {
			// The update was waiting; the delete is due now.
			dl.mu.due = append(dl.mu.due, keyedOp{k, op})
			op.queued = time.Time{}
		}
		op.msg = nil
		// Both deletes are of the same message, not yet deleted.
		op.pending = cmp.Or(op.pending, pending)
		// NB: a delete that keeps a dead letter wins over one that does
		// not: either removes the message, and the dead letter must not
		// be lost to a plain delete queued first.
		op.dead = cmp.Or(op.dead, dead)
	case op.msg != nil:
		op.msg = msg
	}
	if done != nil {
		if op.waiters == nil {
			op.waiters = op.first[:0]
		}
		op.waiters = append(op.waiters, done)
	}
	// NB: the peak is noted here, where the map grows, not only at
	// commits, which see it after they took their ops: a burst that a
	// commit keeps up with must give its memory back too.
	dl.mu.opsPeak = max(dl.mu.opsPeak, len(dl.mu.ops))
	dl.mu.Unlock()
	select {
	case dl.kick <- struct{}{}:
	default:
	}
}

// close commits what is queued and stops. Later writes fail with
// ErrClosed. It returns the error of the last commit if what was queued
// could not be committed.
func (dl *deleter) close() error {
	dl.mu.Lock()
	if dl.mu.closed {
		dl.mu.Unlock()
		dl.wg.Wait()
		return dl.closeErr
	}
	dl.mu.closed = true
	dl.notFull.Broadcast()
	dl.mu.Unlock()
	close(dl.done)
	dl.wg.Wait()
	return dl.closeErr
}

func (dl *deleter) run() {
	retry := time.Duration(0)
	wake := time.NewTimer(time.Hour)
	defer wake.Stop()
	for {
		closing := false
		select {
		case <-dl.kick:
		case <-wake.C:
		case <-dl.done:
			closing = true
		}
		if !closing {
			dl.burst.wait(dl.done)
		}
		for {
			n, next, err := dl.commitOnce(closing)
			if err == nil {
				retry = 0
				if n == 0 {
					// The only ops left are updates younger than
					// updateDelay; come back when the oldest is due.
					wake.Reset(max(next, time.Millisecond))
					break
				}
				continue
			}
			// The ops were put back; the store may recover (a full
			// disk, a transient fault), so keep retrying with backoff, but
			// give up at close so shutdown cannot hang.
			retry = min(max(2*retry, 10*time.Millisecond), time.Second)
			dl.log.Warn("committing deletes failed; retrying", "err", err, "ops", n, "retry_in", retry)
			if closing {
				dl.closeAfterFailure(n, err)
				return
			}
			select {
			case <-time.After(retry):
			case <-dl.done:
				closing = true
			}
		}
		if closing {
			return
		}
	}
}

// maxCommitOps bounds the ops of one commit; the loop in run commits the
// rest at once, in further batches.
const maxCommitOps = 256

// commitOnce takes the queue, up to maxCommitOps, and commits it in one
// batch: what is due, and the updates that waited updateDelay, or every
// update when all is set or the queue is half full. It returns how many ops it took
// and, when it took none, how long until the oldest update left is due.
func (dl *deleter) commitOnce(all bool) (int, time.Duration, error) {
	dl.mu.Lock()
	all = all || len(dl.mu.ops) >= dl.max/2
	cutoff := time.Now().Add(-dl.updateDelay)
	// NB: taken is reused, not made per commit: sized by the queue, as it
	// was, it allocated for every op queued while it took maxCommitOps.
	taken := dl.taken[:0]
	take := func(t keyedOp) {
		taken = append(taken, t)
		delete(dl.mu.ops, t.k)
		t.op.out = true
	}
	// A commit reads what it deletes or updates while it holds the
	// repository's write lock, which ingest needs too; bounding it keeps
	// one commit of large messages from holding up ingest for seconds.
	d := 0
	for ; d < len(dl.mu.due) && len(taken) < maxCommitOps; d++ {
		if t := dl.mu.due[d]; !t.op.out {
			take(t)
		}
	}
	clear(dl.mu.due[:d])
	dl.mu.due = dl.mu.due[d:]
	if len(dl.mu.due) == 0 {
		dl.mu.due = dl.mu.due[:0:0]
	}
	n := 0
	for _, w := range dl.mu.waiting {
		if w.op.out || w.op.queued.IsZero() {
			n++ // stale: written already, or became a delete
			continue
		}
		if !all && w.op.queued.After(cutoff) || len(taken) >= maxCommitOps {
			break
		}
		take(w)
		n++
	}
	clear(dl.mu.waiting[:n])
	dl.mu.waiting = dl.mu.waiting[n:]
	if len(dl.mu.waiting) == 0 {
		dl.mu.waiting = nil // let the backing array go
	}

	dl.taken = taken
	if len(taken) == 0 {
		next := time.Hour
		if len(dl.mu.waiting) > 0 {
			next = time.Until(dl.mu.waiting[0].op.queued.Add(dl.updateDelay))
		}
		dl.mu.Unlock()
		return 0, next, nil
	}
	dl.mu.ops = shrunk(dl.mu.ops, &dl.mu.opsPeak)
	dl.notFull.Broadcast()
	dl.mu.Unlock()
	err := dl.apply(taken)
	clear(taken)
	return len(taken), 0, err
}

// apply commits the ops taken in one batch and tells their waiters, or
// puts them back if the commit failed.
func (dl *deleter) apply(taken []keyedOp) error {
	batch := dl.batch[:0]
	for _, t := range taken {
		op := delaystore.Op{Key: t.k, Msg: t.op.msg, Pending: t.op.pending}
		if t.op.msg == nil {
			op.Dead = t.op.dead
		}
		batch = append(batch, op)
	}
	applied, err := dl.repo.Apply(batch, delaystore.NoSync)
	// The messages are the store's now, or put back: drop them from the
	// reused array either way.
	clear(batch)
	dl.batch = batch[:0]
	if err != nil {
		dl.putBack(taken)
		return err
	}
	order := make([]keys.Key, len(taken))
	for i, t := range taken {
		order[i] = t.k
	}
	// NB: the dispatcher learns of the commit before any waiter is told:
	// an ACK's answer may reach a client that at once sends a FIRE, and
	// Move must then find the key committed (gone), not still in flight.
	dl.onCommitted(order)
	for i, t := range taken {
		for _, w := range t.op.waiters {
			w(applied[i], nil)
		}
	}
	return nil
}

// putBack requeues ops that failed to commit, due at once and in front of
// anything queued since; a delete queued meanwhile still wins over an older
// update.
func (dl *deleter) putBack(taken []keyedOp) {
	dl.mu.Lock()
	defer dl.mu.Unlock()
	order := make([]keyedOp, len(taken))
	for i, t := range taken {
		k, old := t.k, t.op
		order[i] = t
		old.queued = time.Time{}
		old.out = false
		if newer := dl.mu.ops[k]; newer != nil {
			if newer.msg == nil || old.msg != nil {
				old.msg = newer.msg
			}
			old.dead = cmp.Or(old.dead, newer.dead)
			old.waiters = append(old.waiters, newer.waiters...)
			newer.out = true // its entries in the queue are stale
		}
		dl.mu.ops[k] = old
	}
	dl.mu.due = append(order, dl.mu.due...)
}

// failAll tells every waiter that its write was not committed.
func (dl *deleter) failAll(err error) {
	dl.mu.Lock()
	ops := dl.mu.ops
	dl.mu.ops, dl.mu.due, dl.mu.waiting = map[keys.Key]*pendingOp{}, nil, nil
	dl.mu.Unlock()
	for _, op := range ops {
		for _, w := range op.waiters {
			w(false, err)
		}
	}
}

// queued reports whether a write of k is queued and not yet committed.
func (dl *deleter) queued(k keys.Key) bool {
	dl.mu.Lock()
	defer dl.mu.Unlock()
	return dl.mu.ops[k] != nil
}

// closeAfterFailure ends the writes queued at close that could not commit:
// each is told err. A node of a cluster that no longer leads cannot
// commit them, and need not: the messages stay pending in the replicated
// store and the leader delivers them again, so that is no failure of
// Close. Any other error is.
func (dl *deleter) closeAfterFailure(n int, err error) {
	if errors.Is(err, delaystore.ErrNotLeader) {
		dl.log.Info("writes queued at close not committed: this node no longer leads, and the leader delivers their messages again", "ops", n)
	} else {
		dl.closeErr = fmt.Errorf("dispatch: committing %d writes queued at close: %w", n, err)
	}
	dl.failAll(err)
}
