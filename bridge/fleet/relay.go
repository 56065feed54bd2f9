package fleet

import (
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// relay keeps the messages a router forwarded and still waits for an
// answer to. A forward to a cell that is a cluster carries the router's
// reply subject, not the publisher's, so that what the publisher gets is
// always an answer of the fleet: the owner's, handed on; or a 503 when
// NATS says nobody takes the owner's subjects (a cell between leaders,
// or with no quorum, whose nodes hold none of its subscriptions), or when
// the owner has not answered within Config.ForwardTimeout. Forwarded
// with the publisher's own reply, the first would reach the publisher as
// NATS's no-responders and the second as its own timeout.
//
// A forward to a single-node cell keeps the publisher's reply: such a
// cell serves for as long as it runs (no lease to lapse, no election),
// so the relay's second leg, about 3 µs of CPU a message in the cells
// phase (performance.md), would buy it nothing; a single node that is
// gone is told by its silence a second later, as before.
type relay struct {
	mu        sync.Mutex
	next      uint64
	nextBatch uint64
	waiting   map[uint64]relayed
}

// relayed is a forwarded message waiting for its owner's answer.
type relayed struct {
	reply string // the publisher's
	cell  string // the owner it was sent to
	part  int
	at    time.Time
	batch uint64 // the batch it went in (see newBatch), or 0
}

// add notes a message forwarded to cell for the publisher's reply, alone
// (batch 0) or in batch, and returns the token of the reply subject it is
// forwarded with.
func (r *relay) add(reply, cell string, part int, now time.Time, batch uint64) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.waiting == nil {
		r.waiting = map[uint64]relayed{}
	}
	r.next++
	r.waiting[r.next] = relayed{reply: reply, cell: cell, part: part, at: now, batch: batch}
	return r.next
}

// newBatch returns the number of a batch to a cell that is a cluster.
// The batch itself goes with the reply subject relaySubject() + ".b" +
// that number: only NATS answers it, when nobody takes the owner's
// subjects, or the owner, when it refuses the batch whole.
func (r *relay) newBatch() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.nextBatch++
	return r.nextBatch
}

// takeBatch removes and returns the messages of batch still waiting.
// NB: a walk of every message waiting, for the rare answer to a batch
// as a whole, rather than an index of batches kept for every batch.
func (r *relay) takeBatch(batch uint64) []relayed {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []relayed
	for t, w := range r.waiting {
		if w.batch == batch {
			out = append(out, w)
			delete(r.waiting, t)
		}
	}
	return out
}

// take removes and returns the message of token, if it still waits.
func (r *relay) take(token uint64) (relayed, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	w, ok := r.waiting[token]
	delete(r.waiting, token)
	return w, ok
}

// expire removes and returns the messages forwarded before deadline
// (every one for a zero deadline).
func (r *relay) expire(deadline time.Time) []relayed {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []relayed
	for t, w := range r.waiting {
		if deadline.IsZero() || w.at.Before(deadline) {
			out = append(out, w)
			delete(r.waiting, t)
		}
	}
	return out
}

// relaySubject is the reply subject of this router's forwarded messages:
// relaySubject() + "." + token.
func (n *Node) relaySubject() string { return RelayPrefix + "." + n.id }

// forward publishes m, a message to schedule for target in partition p,
// to cell; from names the router in the subject. A message with a reply
// subject to a cell that is a cluster goes with the router's, and its
// answer comes back through handleRelay.
func (n *Node) forward(m *nats.Msg, cell string, p int, target, from string) error {
	out := &nats.Msg{Subject: forwardPrefix(cell) + "." + from + "." + target, Reply: m.Reply, Header: m.Header, Data: m.Data}
	var token uint64
	if m.Reply != "" && n.clustered(cell) {
		token = n.relay.add(m.Reply, cell, p, time.Now(), 0)
		out.Reply = n.relaySubject() + "." + strconv.FormatUint(token, 10)
	}
	err := n.nc.PublishMsg(out)
	if err != nil && token != 0 {
		n.relay.take(token)
	}
	return err
}

// clustered reports whether cell, as last heard, is a cluster: this
// node's own cell as it was configured, another as it says in its
// heartbeats.
func (n *Node) clustered(cell string) bool {
	if cell == n.rec.Cell {
		return n.cfg.Clustered
	}
	h, ok := n.table.heardOf(cell)
	return ok && h.status.Clustered
}

// handleRelay hands the owner's answer to a forwarded message to its
// publisher, or, where NATS answered that nobody takes the owner's
// subjects, answers the publisher with a retryable 503.
func (n *Node) handleRelay(m *nats.Msg) {
	last := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
	if b, ok := strings.CutPrefix(last, "b"); ok {
		n.handleBatchAnswer(m, b)
		return
	}
	token, err := strconv.ParseUint(last, 10, 64)
	if err != nil {
		return
	}
	w, ok := n.relay.take(token)
	if !ok {
		return // answered with a 503 already, when it timed out
	}
	n.relayAnswer(m, w)
}

// handleBatchAnswer hands an answer to a batch as a whole, numbered
// batch: NATS's no-responders or the owner's refusal, to each publisher
// of the batch still waiting. Without it, a batch that nobody took left
// its publishers waiting for ForwardTimeout, where a single forward got
// the 503 at once.
func (n *Node) handleBatchAnswer(m *nats.Msg, batch string) {
	id, err := strconv.ParseUint(batch, 10, 64)
	if err != nil {
		return
	}
	for _, w := range n.relay.takeBatch(id) {
		n.relayAnswer(m, w)
	}
}

// relayAnswer hands m, the answer to w's forward, to w's publisher: the
// owner's answer as it is, or a 503 where NATS answered that nobody takes
// the owner's subjects.
func (n *Node) relayAnswer(m *nats.Msg, w relayed) {
	if noResponders(m) {
		answerError(n.nc, &nats.Msg{Reply: w.reply}, 503, "cell %q, the owner of partition %d, has no node serving it now (no leader, or starting or stopping): try again", w.cell, w.part)
		return
	}
	_ = n.nc.PublishMsg(&nats.Msg{Subject: w.reply, Header: m.Header, Data: m.Data})
}

// noResponders reports whether m is NATS's answer that no subscription
// took the request: a status 503 with no payload.
func noResponders(m *nats.Msg) bool {
	return len(m.Data) == 0 && m.Header.Get("Status") == "503"
}

// expireRelayed answers the publishers of the forwarded messages whose
// owner has not answered within ForwardTimeout (all of them, when the
// node stops) with a 503: the message may have been stored, so a retry
// with the same Delay-Id is safe.
func (n *Node) expireRelayed(stopping bool) {
	deadline := time.Now().Add(-n.cfg.ForwardTimeout)
	if stopping {
		deadline = time.Time{}
	}
	for _, w := range n.relay.expire(deadline) {
		why := "did not answer within " + n.cfg.ForwardTimeout.String()
		if stopping {
			why = "had not answered when the node that forwarded it stopped"
		}
		answerError(n.nc, &nats.Msg{Reply: w.reply}, 503, "cell %q, the owner of partition %d, %s: the message may have been stored: try again, with the same Delay-Id", w.cell, w.part, why)
	}
}
