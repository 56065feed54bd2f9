package bridge

import (
	"encoding/json"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/micro"

	"natsdelay/delaystore"
	"natsdelay/dispatch"
)

// ingestRequest is one accepted message waiting for the group commit.
type ingestRequest struct {
	msg *delaystore.StoredMessage
	req micro.Request
}

// scheduleReply is the body of a successful ingest reply.
type scheduleReply struct {
	Tag     string `json:"tag"`
	Subject string `json:"subject"`
	FireAt  string `json:"fire_at"`
}

// writer is the group commit: ingest handlers hand it messages, and it
// drains whatever is waiting, commits it in one synced batch, tells the
// dispatcher, then answers every publisher. Throughput grows with the number
// of concurrent publishers while latency stays about one fsync.
type writer struct {
	repo     *delaystore.Repository
	disp     *dispatch.Dispatcher
	log      *slog.Logger
	maxBatch int
	observe  func(batch int, took time.Duration, err error)

	// reqs is bounded: when it is full the ingest handler blocks, and NATS
	// holds further requests in the subscription's pending queue.
	reqs chan ingestRequest
	wg   sync.WaitGroup
}

func newWriter(repo *delaystore.Repository, disp *dispatch.Dispatcher, maxBatch int, log *slog.Logger, observe func(int, time.Duration, error)) *writer {
	w := &writer{repo: repo, disp: disp, log: log, maxBatch: maxBatch, observe: observe, reqs: make(chan ingestRequest, maxBatch)}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		w.run()
	}()
	return w
}

// close commits and answers what was handed over, then stops. Nothing may
// be handed over after close.
func (w *writer) close() {
	close(w.reqs)
	w.wg.Wait()
}

func (w *writer) run() {
	batch := make([]ingestRequest, 0, w.maxBatch)
	for {
		r, ok := <-w.reqs
		if !ok {
			return
		}
		batch = append(batch[:0], r)
	drain:
		for len(batch) < w.maxBatch {
			select {
			case r, ok := <-w.reqs:
				if !ok {
					break drain
				}
				batch = append(batch, r)
			default:
				break drain
			}
		}
		w.commit(batch)
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
		body, _ := json.Marshal(scheduleReply{Tag: res[i].Key.Tag(), Subject: msgs[i].Subject, FireAt: formatTime(msgs[i].FireAtNs)})
		_ = r.req.Respond(body)
	}
}
