package bridge

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// Bounds of the answerer's queue.
const (
	// answerQueue is how many answers may wait to be published: more
	// than a group commit's batch of replies, or a deleter's batch of
	// +OKs, so that a burst never waits for room.
	answerQueue = 8192
	// answerWait is how long a hand-over waits for room in a full queue
	// before it drops the answer. A dropped answer makes its requester
	// time out and retry (a publisher schedules again, a consumer's
	// AckSync asks again), so a full queue is waited on first; but only
	// once per congestion: while the queue stays full after a wait timed
	// out, further answers are dropped at once, so that the writer and
	// the deleter are held up by at most answerWait each time the
	// connection stops taking answers, however many answers they hand
	// over meanwhile.
	answerWait = time.Second
)

// answerConn is what the answerer publishes on: the service's NATS
// connection.
type answerConn interface {
	Publish(subject string, data []byte) error
	PublishMsg(m *nats.Msg) error
}

// answer is one reply to a request the service took: data, or, when err
// is not nil, the error reply for err.
type answer struct {
	reply string
	data  []byte
	err   error
	// buf, if set, holds data and goes back to replyBufs once published.
	buf *[]byte
}

// replyBufs are buffers for the answers to schedules, one for every
// message taken in: the answerer gives each back once nats.go has copied
// the answer out. Made per answer, they were 4% of what the end-to-end
// bench allocated in serve.
var replyBufs = sync.Pool{New: func() any { return new([]byte) }}

// answerer publishes the service's answers to ingest requests (from the
// group commit's goroutine) and to consumers' answers to deliveries (+OK,
// from the dispatcher's deleter): those goroutines hand an answer over
// and go on, and one goroutine of the Service's publishes them in the
// order handed over, so answers to one requester keep their order. A
// connection that stops taking them (a blocked socket) holds up the
// commits and deletes by at most answerWait; see answerWait for what
// happens when the queue is full.
type answerer struct {
	conn answerConn
	wait time.Duration

	queue chan answer
	// closed is set by Close; stopped by the goroutine once it has
	// drained the queue after Close: an answer queued after it is
	// dropped by its hand-over.
	closed, stopped atomic.Bool
	// congested is set when a hand-over gave up waiting for room, and
	// cleared by the next answer that finds room.
	congested atomic.Bool

	sent, full, failed, late atomic.Uint64

	closeOnce sync.Once
	done      chan struct{}
	wg        sync.WaitGroup
}

// answererStats are the answerer's counters.
type answererStats struct {
	Sent   uint64 // handed to the connection
	Full   uint64 // dropped: the queue stayed full for answerWait
	Failed uint64 // refused by the connection (closed, or reconnecting with its buffer full)
	Late   uint64 // dropped: handed over after Close
	Queued int    // waiting in the queue now
}

// newAnswerer starts an answerer that publishes on conn, holding at most
// size answers and waiting at most wait for room. Close stops it.
func newAnswerer(conn answerConn, size int, wait time.Duration) *answerer {
	a := &answerer{conn: conn, wait: wait, queue: make(chan answer, size), done: make(chan struct{})}
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		a.run()
	}()
	return a
}

// reply hands data over to be published to the subject reply.
func (a *answerer) reply(reply string, data []byte) { a.hand(answer{reply: reply, data: data}) }

// replyBuf hands over the reply in *buf, a buffer of replyBufs, to be
// published to reply; the buffer goes back once it is.
func (a *answerer) replyBuf(reply string, buf *[]byte) {
	a.hand(answer{reply: reply, data: *buf, buf: buf})
}

// fail hands the error reply for err over to be published to reply.
func (a *answerer) fail(reply string, err error) { a.hand(answer{reply: reply, err: err}) }

// hand queues ans. It waits for room only while the queue is full, for
// at most a.wait, and not at all while the queue is congested.
func (a *answerer) hand(ans answer) {
	if a.closed.Load() {
		a.late.Add(1)
		return
	}
	select {
	case a.queue <- ans:
		a.congested.Store(false)
	default:
		if !a.waitForRoom(ans) {
			return
		}
	}
	if a.stopped.Load() {
		// NB: Close ran between the check of closed above and the send,
		// and the goroutine has already drained the queue: nothing would
		// publish this answer, so it is dropped and counted here.
		a.dropQueued()
	}
}

// waitForRoom queues ans once the queue has room, waiting at most a.wait;
// it reports whether ans was queued, and counts it dropped if not.
func (a *answerer) waitForRoom(ans answer) bool {
	if a.congested.Load() {
		a.full.Add(1)
		return false
	}
	t := time.NewTimer(a.wait)
	defer t.Stop()
	select {
	case a.queue <- ans:
		return true
	case <-t.C:
		a.congested.Store(true)
		a.full.Add(1)
		return false
	}
}

// dropQueued takes every answer left in the queue and counts it late.
func (a *answerer) dropQueued() {
	for {
		select {
		case <-a.queue:
			a.late.Add(1)
		default:
			return
		}
	}
}

// Stats returns the counters.
func (a *answerer) Stats() answererStats {
	return answererStats{Sent: a.sent.Load(), Full: a.full.Load(), Failed: a.failed.Load(), Late: a.late.Load(), Queued: len(a.queue)}
}

// Close publishes what is queued, stops the goroutine and waits for it.
// The Service calls it once nothing hands answers over any more: the
// core has stopped and the ack subscriptions are drained. It is safe to
// call twice.
func (a *answerer) Close() {
	a.closeOnce.Do(func() {
		a.closed.Store(true)
		close(a.done)
	})
	a.wg.Wait()
}

func (a *answerer) run() {
	for {
		select {
		case ans := <-a.queue:
			a.publish(ans)
		case <-a.done:
			// NB: what was queued before Close is published. A hand-over
			// that found a open before Close may still queue its answer:
			// if it does before stopped is set, the second drain
			// publishes it; if after, that hand-over sees stopped and
			// drops it.
			a.drain()
			a.stopped.Store(true)
			a.drain()
			return
		}
	}
}

// drain publishes the answers in the queue until it is empty.
func (a *answerer) drain() {
	for {
		select {
		case ans := <-a.queue:
			a.publish(ans)
		default:
			return
		}
	}
}

func (a *answerer) publish(ans answer) {
	var err error
	if ans.err != nil {
		err = a.conn.PublishMsg(errorMsg(ans.reply, ans.err))
	} else {
		err = a.conn.Publish(ans.reply, ans.data)
	}
	if ans.buf != nil {
		// nats.go has copied the answer to its buffer by now.
		*ans.buf = ans.data[:0]
		replyBufs.Put(ans.buf)
	}
	if err != nil {
		a.failed.Add(1)
		return
	}
	a.sent.Add(1)
}
