package fleet

import (
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge/wire"
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
//
// A batch to a cell that is a cluster (batch.go) keeps each publisher's
// reply, so the owner answers each publisher directly, and the batch
// carries the router's reply only so that NATS tells the router when
// nobody takes it: then the router answers each publisher of the batch
// with the 503. The owner sends nothing back for a batch it takes (only
// a 400 for one it refuses whole, handed to each publisher): the
// relayed answer was a fourth message through NATS for each forwarded
// request, and a wait for the router's CPU before the publisher had its
// answer (performance.md, "The owner answers forwarded publishers"). The
// router learns that the server handed a batch to a subscriber without a
// word from it: NATS answers no-responders at once, in order with what
// the server delivers to the router, so once a marker the router
// published to its own relay subject after the batch comes back, no
// no-responders for it will follow, and the router forgets it (see
// markRelay). What it does not answer for is a batch handed to a node
// that then never answers it (killed, or paused, with the batch in
// hand): its publishers time out and send again, as for what such a node
// took on the ingest itself.
type relay struct {
	// sendMu orders each note with its publish, so that a marker's
	// token is above each batch published before it and below each
	// published after.
	sendMu  sync.Mutex
	mu      sync.Mutex
	next    uint64
	waiting map[uint64]relayed
	// batches is how many batches wait.
	batches int
}

// relayKind says what a router waits for on a relay subject.
type relayKind uint8

const (
	// relayAnswer: a single forward's answer, handed to its publisher.
	relayAnswer relayKind = iota
	// relayBatch: nothing, unless nobody took the batch (no-responders)
	// or its owner refused it whole.
	relayBatch
	// relayMarker: the router's own marker, after which the batches
	// published before it are forgotten.
	relayMarker
)

// relayed is a forwarded message or batch, or a marker, the router waits
// for.
type relayed struct {
	kind relayKind
	// waiters are the publishers of what was forwarded: one for a
	// message, each that asked for an answer for a batch.
	waiters []waiter
	cell    string // the owner it was sent to
	at      time.Time
}

// waiter is a publisher waiting for the answer to a forwarded message.
type waiter struct {
	reply string // the publisher's
	part  int
}

// add notes w and returns the token of its relay subject.
func (r *relay) add(w relayed) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.waiting == nil {
		r.waiting = map[uint64]relayed{}
	}
	r.next++
	r.waiting[r.next] = w
	if w.kind == relayBatch {
		r.batches++
	}
	return r.next
}

// take removes and returns what waits on token, if it still waits.
func (r *relay) take(token uint64) (relayed, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	w, ok := r.waiting[token]
	if ok && w.kind == relayBatch {
		r.batches--
	}
	delete(r.waiting, token)
	return w, ok
}

// passed forgets the batches published before the marker of token.
func (r *relay) passed(marker uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for t, w := range r.waiting {
		if t < marker && w.kind == relayBatch {
			delete(r.waiting, t)
			r.batches--
		}
	}
}

// batchesWaiting is how many batches wait.
func (r *relay) batchesWaiting() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.batches
}

// expire removes and returns what was forwarded before deadline (all of
// it, for a zero deadline).
func (r *relay) expire(deadline time.Time) []relayed {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []relayed
	for t, w := range r.waiting {
		if deadline.IsZero() || w.at.Before(deadline) {
			out = append(out, w)
			delete(r.waiting, t)
			if w.kind == relayBatch {
				r.batches--
			}
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
	if m.Reply != "" && n.clustered(cell) {
		return n.publishRelayed(out, relayed{kind: relayAnswer, cell: cell, waiters: []waiter{{reply: m.Reply, part: p}}})
	}
	return n.nc.PublishMsg(out)
}

// publishRelayed publishes out with a reply subject of the relay's for w.
func (n *Node) publishRelayed(out *nats.Msg, w relayed) error {
	n.relay.sendMu.Lock()
	defer n.relay.sendMu.Unlock()
	w.at = time.Now()
	token := n.relay.add(w)
	if w.kind == relayMarker {
		out.Subject = n.relaySubject() + "." + strconv.FormatUint(token, 10)
	} else {
		out.Reply = n.relaySubject() + "." + strconv.FormatUint(token, 10)
	}
	err := n.nc.PublishMsg(out)
	if err != nil {
		n.relay.take(token)
	}
	return err
}

// markRelay publishes a marker to this router's relay subject, while
// batches wait: when it comes back, NATS has said no-responders for
// every batch published before it that nobody took, and the rest are
// forgotten (see relay). The loop sends one each heartbeat.
func (n *Node) markRelay() {
	if n.relay.batchesWaiting() == 0 {
		return
	}
	_ = n.publishRelayed(&nats.Msg{}, relayed{kind: relayMarker})
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
// subjects, answers the publisher with a retryable 503; for a batch, each
// of its publishers. A batch the owner refused whole has that answer
// handed to each; a marker forgets the batches published before it.
func (n *Node) handleRelay(m *nats.Msg) {
	token, err := strconv.ParseUint(m.Subject[strings.LastIndexByte(m.Subject, '.')+1:], 10, 64)
	if err != nil {
		return
	}
	w, ok := n.relay.take(token)
	switch {
	case !ok:
		// answered with a 503 already, when it timed out
	case w.kind == relayMarker:
		n.relay.passed(token)
	case noResponders(m):
		for _, p := range w.waiters {
			answerError(n.nc, &nats.Msg{Reply: p.reply}, 503, "cell %q, the owner of partition %d, has no node serving it now (no leader, or starting or stopping): try again", w.cell, p.part)
		}
	case w.kind == relayBatch && m.Header.Get(wire.HeaderServiceErrorCode) == "":
		// not an answer of this protocol's: the owner answers each publisher
	default:
		for _, p := range w.waiters {
			_ = n.nc.PublishMsg(&nats.Msg{Subject: p.reply, Header: m.Header, Data: m.Data})
		}
	}
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
	why := "did not answer within " + n.cfg.ForwardTimeout.String()
	if stopping {
		why = "had not answered when the node that forwarded it stopped"
	}
	for _, w := range n.relay.expire(deadline) {
		for _, p := range w.waiters {
			answerError(n.nc, &nats.Msg{Reply: p.reply}, 503, "cell %q, the owner of partition %d, %s: the message may have been stored: try again, with the same Delay-Id", w.cell, p.part, why)
		}
	}
}
