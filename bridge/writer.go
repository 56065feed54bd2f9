package bridge

import (
	"encoding/json"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/micro"

	"natsdelay/bridge/wire"
	"natsdelay/delaystore"
	"natsdelay/dispatch"
)

// ingestRequest is one accepted message waiting for the group commit.
type ingestRequest struct {
	msg  *delaystore.StoredMessage
	req  micro.Request
	size int // messageSize, set by submit
}

// writer is the group commit: ingest handlers hand it messages, and it
// drains whatever is waiting, commits it in one synced batch, tells the
// dispatcher, then answers every publisher. Throughput grows with the number
// of concurrent publishers while latency stays about one fsync.
//
// Both the messages and the bytes it holds are bounded, so that large
// payloads from many publishers at once cannot grow a batch (and the
// service's memory) without limit: a batch ends at maxBatch messages or
// before the message that would take it past maxBatchBytes, and submit
// blocks while twice maxBatchBytes wait (one batch committing, one
// filling). NATS then holds further requests in the subscription's pending
// queue, and past its limit drops them: those publishers time out, and
// nothing of theirs was stored or acknowledged.
type writer struct {
	repo          *delaystore.Repository
	disp          *dispatch.Dispatcher
	log           *slog.Logger
	maxBatch      int
	maxBatchBytes int
	observe       func(batch int, took time.Duration, err error)

	reqs chan ingestRequest
	// queued is the bytes handed over and not yet answered; submit waits
	// on room while it is at the limit.
	mu     sync.Mutex
	room   *sync.Cond
	queued int
	wg     sync.WaitGroup
}

func newWriter(repo *delaystore.Repository, disp *dispatch.Dispatcher, maxBatch, maxBatchBytes int, log *slog.Logger, observe func(int, time.Duration, error)) *writer {
	w := &writer{repo: repo, disp: disp, log: log, maxBatch: maxBatch, maxBatchBytes: maxBatchBytes, observe: observe, reqs: make(chan ingestRequest, maxBatch)}
	w.room = sync.NewCond(&w.mu)
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		w.run()
	}()
	return w
}

// submit hands r to the writer, first waiting while the bytes queued are
// at the limit. A message larger than the limit alone waits for an empty
// queue.
func (w *writer) submit(r ingestRequest) {
	r.size = messageSize(r.msg)
	w.mu.Lock()
	for w.queued > 0 && w.queued+r.size > 2*w.maxBatchBytes {
		w.room.Wait()
	}
	w.queued += r.size
	w.mu.Unlock()
	w.reqs <- r
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
	batch := make([]ingestRequest, 0, w.maxBatch)
	// carry is a request taken from reqs that did not fit the last batch.
	var carry *ingestRequest
	for {
		var r ingestRequest
		if carry != nil {
			r, carry = *carry, nil
		} else {
			var ok bool
			if r, ok = <-w.reqs; !ok {
				return
			}
		}
		batch = append(batch[:0], r)
		bytes := r.size
	drain:
		for len(batch) < w.maxBatch {
			select {
			case r, ok := <-w.reqs:
				if !ok {
					break drain
				}
				if bytes+r.size > w.maxBatchBytes {
					carry = &r
					break drain
				}
				batch = append(batch, r)
				bytes += r.size
			default:
				break drain
			}
		}
		w.commit(batch)
		w.release(bytes)
	}
}

func (w *writer) commit(batch []ingestRequest) {
	msgs := make([]*delaystore.StoredMessage, len(batch))
	for i, r := range batch {
		msgs[i] = r.msg
	}
	start := time.Now()
	res, err := w.repo.Schedule(msgs, delaystore.Sync)
	if w.observe != nil {
		w.observe(len(batch), time.Since(start), err)
	}
	if err != nil {
		w.log.Error("committing scheduled messages", "err", err, "messages", len(batch))
		for _, r := range batch {
			respondError(r.req, unavailable("storage failing: %v", err))
		}
		return
	}
	for i, s := range res {
		w.disp.Notify(s, msgs[i].FireAtNs)
	}
	for i, r := range batch {
		if r.req.Reply() == "" {
			continue
		}
		body, _ := json.Marshal(wire.ScheduleReply{Tag: res[i].Key.Tag(), Subject: msgs[i].Subject, FireAt: formatTime(msgs[i].FireAtNs)})
		_ = r.req.Respond(body)
	}
}
