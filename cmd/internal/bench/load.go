package bench

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge/wire"
)

// replyOK tells whether a reply acknowledges the message it answers.
type replyOK func(*nats.Msg) bool

// delayOK accepts natsdelay's ingest reply: an error carries the micro
// error header.
func delayOK(m *nats.Msg) bool {
	return wire.ParseError(m.Header, m.Data) == nil && len(m.Data) > 0
}

// jsOK accepts a JetStream PubAck; an error is a JSON body with "error".
func jsOK(m *nats.Msg) bool {
	return len(m.Data) > 0 && !bytes.Contains(m.Data, []byte(`"error"`))
}

// anyOK accepts every reply: the core baseline's responder cannot fail.
func anyOK(*nats.Msg) bool { return true }

// pipelined publishes n messages built by msg on nc, each with the same
// reply inbox, keeping at most outstanding unanswered, and waits for every
// reply. It is the wire pattern of js.PublishMsgAsync (publish with a reply
// inbox, PubAck on it), used for all three systems so that only the server
// side differs. done counts the replies, for a progress bar.
func pipelined(nc *nats.Conn, n, outstanding int, timeout time.Duration, msg func(i int) *nats.Msg, ok replyOK, done *atomic.Int64) (elapsed time.Duration, failed int, err error) {
	// sem bounds the messages in flight: a publish blocks until a reply
	// frees a slot. The run fails once no reply came for a whole timeout
	// (checked every timeout, so after one to two of them): a fill of
	// millions takes far longer than one, but never stalls that long.
	sem := make(chan struct{}, outstanding)
	all := make(chan struct{})
	var bad atomic.Int64
	var got atomic.Int64
	inbox := nc.NewRespInbox()
	sub, err := nc.Subscribe(inbox, func(m *nats.Msg) {
		if !ok(m) {
			bad.Add(1)
		}
		<-sem
		done.Add(1)
		if got.Add(1) == int64(n) {
			close(all)
		}
	})
	if err != nil {
		return 0, 0, fmt.Errorf("bench: subscribe to replies: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	_ = sub.SetPendingLimits(-1, -1)
	if err := nc.Flush(); err != nil {
		return 0, 0, fmt.Errorf("bench: flush: %w", err)
	}
	if n == 0 {
		return 0, 0, nil
	}
	tick := time.NewTicker(timeout)
	defer tick.Stop()
	seen := int64(-1)
	stalled := func() bool {
		g := got.Load()
		if g == seen {
			return true
		}
		seen = g
		return false
	}
	start := time.Now()
	for i := 0; i < n; {
		select {
		case sem <- struct{}{}:
		case <-tick.C:
			if stalled() {
				return 0, 0, fmt.Errorf("bench: %d of %d replies, none for %v", got.Load(), n, timeout)
			}
			continue
		}
		m := msg(i)
		m.Reply = inbox
		if err := nc.PublishMsg(m); err != nil {
			return 0, 0, fmt.Errorf("bench: publish %d: %w", i, err)
		}
		i++
	}
	for finished := false; !finished; {
		select {
		case <-all:
			finished = true
		case <-tick.C:
			if stalled() {
				return 0, 0, fmt.Errorf("bench: %d of %d replies, none for %v", got.Load(), n, timeout)
			}
		}
	}
	return time.Since(start), int(bad.Load()), nil
}

// requesters sends n requests built by msg from r concurrent synchronous
// requesters spread over conns, and waits for them all.
func requesters(conns []*nats.Conn, n, r int, timeout time.Duration, msg func(i int) *nats.Msg, ok replyOK, done *atomic.Int64) (elapsed time.Duration, failed int, err error) {
	var next, bad, errs atomic.Int64
	var firstErr atomic.Pointer[error]
	var wg sync.WaitGroup
	start := time.Now()
	for w := range r {
		nc := conns[w%len(conns)]
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				rep, err := nc.RequestMsg(msg(int(i)), timeout)
				done.Add(1)
				switch {
				case errors.Is(err, nats.ErrNoResponders):
					// NB: a cluster between leaders has no node
					// subscribed: a refusal, as its 503 is, and as a
					// pipelined run counts the same status reply.
					bad.Add(1)
				case err != nil:
					errs.Add(1)
					firstErr.CompareAndSwap(nil, &err)
				case !ok(rep):
					bad.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if p := firstErr.Load(); p != nil {
		return 0, 0, fmt.Errorf("bench: %d of %d requests failed, first: %w", errs.Load(), n, *p)
	}
	return time.Since(start), int(bad.Load()), nil
}
