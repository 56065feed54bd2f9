package dispatch

import (
	"log/slog"
	"sync"
	"time"

	"natsdelay/delaystore"
	"natsdelay/keys"
)

// deleteDone is told, once the delete it waited for was committed, whether
// a pending message was actually removed.
type deleteDone func(applied bool, err error)

// pendingOp is the latest write queued for one key. A delete supersedes an
// update, so a message ACKed soon after delivery costs one write, not two.
type pendingOp struct {
	msg     *delaystore.StoredMessage // nil means delete
	waiters []deleteDone
}

// deleter batches deletes and attempt-count updates and commits them without
// fsync: a lost delete or count only causes a redelivery. It is the second
// of the two places (with ingest) that write to the store.
type deleter struct {
	repo        *delaystore.Repository
	log         *slog.Logger
	max         int
	onCommitted func([]keys.Key) // called after each successful commit, without locks

	mu struct {
		sync.Mutex
		ops     map[keys.Key]*pendingOp
		order   []keys.Key
		closed  bool
		flushes []chan struct{} // closed once everything queued before them is committed
	}
	notFull *sync.Cond // signalled when the queue is taken
	kick    chan struct{}
	done    chan struct{}
	wg      sync.WaitGroup
}

func newDeleter(repo *delaystore.Repository, max int, log *slog.Logger, onCommitted func([]keys.Key)) *deleter {
	dl := &deleter{repo: repo, max: max, log: log, onCommitted: onCommitted, kick: make(chan struct{}, 1), done: make(chan struct{})}
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
	dl.enqueue(k, nil, done)
}

// update queues a rewrite of the pending message k, dropped at commit if k
// is no longer pending or a delete of k is queued.
func (dl *deleter) update(k keys.Key, msg *delaystore.StoredMessage) {
	dl.enqueue(k, msg, nil)
}

func (dl *deleter) enqueue(k keys.Key, msg *delaystore.StoredMessage, done deleteDone) {
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
	case op == nil:
		op = &pendingOp{msg: msg}
		dl.mu.ops[k] = op
		dl.mu.order = append(dl.mu.order, k)
	case msg == nil:
		op.msg = nil
	case op.msg != nil:
		op.msg = msg
	}
	if done != nil {
		op.waiters = append(op.waiters, done)
	}
	dl.mu.Unlock()
	select {
	case dl.kick <- struct{}{}:
	default:
	}
}

// flush returns a channel closed once everything queued so far is committed
// (or given up at close).
func (dl *deleter) flush() <-chan struct{} {
	ch := make(chan struct{})
	dl.mu.Lock()
	if dl.mu.closed && len(dl.mu.ops) == 0 {
		dl.mu.Unlock()
		close(ch)
		return ch
	}
	dl.mu.flushes = append(dl.mu.flushes, ch)
	dl.mu.Unlock()
	select {
	case dl.kick <- struct{}{}:
	default:
	}
	return ch
}

// close commits what is queued and stops. Later writes fail with ErrClosed.
func (dl *deleter) close() {
	dl.mu.Lock()
	if dl.mu.closed {
		dl.mu.Unlock()
		dl.wg.Wait()
		return
	}
	dl.mu.closed = true
	dl.notFull.Broadcast()
	dl.mu.Unlock()
	close(dl.done)
	dl.wg.Wait()
}

func (dl *deleter) run() {
	retry := time.Duration(0)
	for {
		closing := false
		select {
		case <-dl.kick:
		case <-dl.done:
			closing = true
		}
		for {
			n, err := dl.commitOnce()
			if err == nil {
				retry = 0
				if n == 0 {
					break
				}
				continue
			}
			// NB: the ops were put back; the store may recover (a full
			// disk, a transient fault), so keep retrying with backoff, but
			// give up at close so shutdown cannot hang.
			retry = min(max(2*retry, 10*time.Millisecond), time.Second)
			dl.log.Warn("committing deletes failed; retrying", "err", err, "ops", n, "retry_in", retry)
			if closing {
				dl.failAll(err)
				return
			}
			select {
			case <-time.After(retry):
			case <-dl.done:
				closing = true
			}
		}
		if closing {
			dl.releaseFlushes()
			return
		}
	}
}

// commitOnce takes the whole queue and commits it in one batch. It returns
// how many ops it took.
func (dl *deleter) commitOnce() (int, error) {
	dl.mu.Lock()
	if len(dl.mu.order) == 0 {
		flushes := dl.mu.flushes
		dl.mu.flushes = nil
		dl.mu.Unlock()
		for _, ch := range flushes {
			close(ch)
		}
		return 0, nil
	}
	order, ops := dl.mu.order, dl.mu.ops
	flushes := dl.mu.flushes
	dl.mu.order, dl.mu.ops, dl.mu.flushes = nil, make(map[keys.Key]*pendingOp, len(ops)), nil
	dl.notFull.Broadcast()
	dl.mu.Unlock()

	batch := make([]delaystore.Op, len(order))
	for i, k := range order {
		batch[i] = delaystore.Op{Key: k, Msg: ops[k].msg}
	}
	applied, err := dl.repo.Apply(batch, delaystore.NoSync)
	if err != nil {
		dl.putBack(order, ops, flushes)
		return len(order), err
	}
	for i, k := range order {
		for _, w := range ops[k].waiters {
			w(applied[i], nil)
		}
	}
	dl.onCommitted(order)
	for _, ch := range flushes {
		close(ch)
	}
	return len(order), nil
}

// putBack requeues ops that failed to commit, in front of anything queued
// since; a delete queued meanwhile still wins over an older update.
func (dl *deleter) putBack(order []keys.Key, ops map[keys.Key]*pendingOp, flushes []chan struct{}) {
	dl.mu.Lock()
	defer dl.mu.Unlock()
	for _, k := range dl.mu.order {
		newer := dl.mu.ops[k]
		if old, ok := ops[k]; ok {
			if newer.msg == nil || old.msg != nil {
				old.msg = newer.msg
			}
			old.waiters = append(old.waiters, newer.waiters...)
			continue
		}
		ops[k] = newer
		order = append(order, k)
	}
	dl.mu.order, dl.mu.ops = order, ops
	dl.mu.flushes = append(flushes, dl.mu.flushes...)
}

// failAll tells every waiter that its write was not committed.
func (dl *deleter) failAll(err error) {
	dl.mu.Lock()
	order, ops, flushes := dl.mu.order, dl.mu.ops, dl.mu.flushes
	dl.mu.order, dl.mu.ops, dl.mu.flushes = nil, map[keys.Key]*pendingOp{}, nil
	dl.mu.Unlock()
	for _, k := range order {
		for _, w := range ops[k].waiters {
			w(false, err)
		}
	}
	for _, ch := range flushes {
		close(ch)
	}
}

func (dl *deleter) releaseFlushes() {
	dl.mu.Lock()
	flushes := dl.mu.flushes
	dl.mu.flushes = nil
	dl.mu.Unlock()
	for _, ch := range flushes {
		close(ch)
	}
}
