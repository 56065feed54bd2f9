package fleet

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// refwd marks the router token of a message a receiver forwarded on: its
// receiver forwards it no further.
const refwd = "~"

// subscribe takes the subscriptions of a serving node. Ingest and the
// forwarded messages may come in bursts, as the service's own ingest
// endpoint does.
func (n *Node) subscribe() error {
	type route struct {
		subject, queue string
		h              nats.MsgHandler
	}
	// NB: the forwards go to the channel the ingest fills, so that one
	// goroutine takes both (see serveIn).
	fwd, err := n.nc.ChanQueueSubscribe(n.forwardedTo+">", "natsdelay.cell."+n.rec.Cell, n.in)
	if err != nil {
		return fmt.Errorf("fleet: subscribe %s>: %w", n.forwardedTo, err)
	}
	n.serving = append(n.serving, fwd)
	routes := []route{
		{n.cfg.APIPrefix + ".>", QueueGroup, n.routeAPI},
		{n.cfg.AckPrefix, QueueGroup, n.routeAckHeader},
		{n.cfg.AckPrefix + ".>", QueueGroup, n.routeAckSubject},
		{CellsSubject, "", n.answerCells},
		{movePrefix(n.rec.Cell) + ".*", "natsdelay.cell." + n.rec.Cell, n.handleMove},
	}
	for _, r := range routes {
		sub, err := n.nc.QueueSubscribe(r.subject, r.queue, r.h)
		if err == nil {
			err = sub.SetPendingLimits(1<<20, 512<<20)
		}
		if err != nil {
			err = fmt.Errorf("fleet: subscribe %s: %w", r.subject, err)
			if uerr := n.unsubscribe(n.serving); uerr != nil {
				err = fmt.Errorf("%w; and unsubscribing: %v", err, uerr)
			}
			n.serving = nil
			return err
		}
		n.serving = append(n.serving, sub)
	}
	return n.nc.Flush()
}

// inQueue bounds the messages NATS may hold for serveIn, the fleet's
// ingest and the forwards to this cell together: past it nats.go drops
// them and reports a slow consumer, and their publishers time out and
// retry. It is nats.go's own bound on a channel it makes, 64 Ki
// messages; a channel has no bound in bytes, so each message is bounded
// by the server's max_payload alone (a forwarded batch by 256 KiB).
const inQueue = nats.DefaultMaxChanLen

// serveIn takes what the ingest subscription and the forwards to this
// cell bring, in the order NATS delivered them, until stopIn; then it
// takes what is left and stops. Everything for this cell's own service,
// what this node routed to it and what other nodes forwarded, waits in
// the outbox with the forwards until the channel is empty, so that a
// burst goes to each owner as one batch and to this cell's service as
// one hand-over, which its group commit writes as one commit (see
// batch.go). With a goroutine for each subscription, each handed its
// part over alone, and an owner's commits held about a fifth of the
// messages they hold now (docs/performance.md, "Ingest and forwards on
// one goroutine").
func (n *Node) serveIn() {
	defer close(n.inDone)
	for {
		select {
		case m := <-n.in:
			n.takeIn(m)
		case <-n.inStop:
			for {
				select {
				case m := <-n.in:
					n.takeIn(m)
				default:
					return
				}
			}
		}
	}
}

// stopIn stops serveIn once it has taken what NATS put in the channel,
// and waits for it. The subscriptions that fill it are drained first.
func (n *Node) stopIn() {
	n.inOnce.Do(func() { close(n.inStop) })
	<-n.inDone
}

// takeIn routes m, a publish or a forward to this cell, and sends the
// outbox once nothing more waits.
func (n *Node) takeIn(m *nats.Msg) {
	if strings.HasPrefix(m.Subject, n.forwardedTo) {
		n.receive(m)
	} else {
		n.routeIngest(m)
	}
	if len(n.in) == 0 {
		n.sendOutbox()
	}
}

// routeIngest takes a publish to <ingest prefix>.<subject> and sends it
// to the cell that owns the subject's partition: to this cell's service
// in process, or to the owner in one NATS hop. Both wait in the outbox
// (see serveIn).
func (n *Node) routeIngest(m *nats.Msg) {
	target := m.Subject[len(n.cfg.IngestPrefix)+1:]
	if n.reserved(target) {
		answerError(n.nc, m, 400, "target subject %q is inside the service's own prefixes", target)
		return
	}
	n.send(m, target, n.id, true)
}

// reserved reports whether target lies inside a prefix of the fleet's,
// where a delivery would come back as ingest or a request.
func (n *Node) reserved(target string) bool {
	for _, p := range [...]string{n.cfg.IngestPrefix, "$DELAY", n.cfg.AckPrefix, n.cfg.APIPrefix, "$SRV"} {
		// NB: not HasPrefix(target, p+"."), which built a string for
		// each prefix of each publish routed.
		if strings.HasPrefix(target, p) && (len(target) == len(p) || target[len(p)] == '.') {
			return true
		}
	}
	return false
}

// send hands m, a message to schedule for target, to the owner of its
// partition; from names the router in the forwarded subject. A forward,
// or a message for this cell's own service, goes to the outbox if queue
// (only serveIn may ask it), at once otherwise. A node whose own cell
// owns it but that does not lead it (a follower) forwards it to its cell
// like any other, so that whichever node serves the cell takes it, or
// the publisher gets the relay's 503.
func (n *Node) send(m *nats.Msg, target, from string, queue bool) {
	p := Partition(target, n.rec.Partitions)
	cell, at, ok := n.ownerOf(p)
	switch {
	case !ok:
		answerError(n.nc, m, 503, "partition %d of subject %q has no owner this node knows of yet: try again", p, target)
	case cell == n.rec.Cell && n.svc.Leads():
		r := &request{nc: n.nc, msg: m, subject: n.cellIngest + target}
		if queue {
			n.queueLocal(r)
		} else {
			n.svc.Ingest(r)
		}
	case time.Since(at) > n.cfg.Silence:
		answerError(n.nc, m, 503, "cell %q, the owner of partition %d, is unavailable: not heard from for %v: try again", cell, p, time.Since(at).Round(time.Millisecond))
	case queue:
		n.queue(forwarded{msg: m, target: target, part: p}, cell)
	default:
		if err := n.forward(m, cell, p, target, from); err != nil {
			answerError(n.nc, m, 503, "forwarding to cell %q: %v", cell, err)
		}
	}
}

// receive takes a message another node forwarded to this cell, or a
// batch of them (see batch.go). If this cell owns a message's partition,
// the service schedules it; otherwise the sender's map is stale: it is
// told, with this cell's record, once a message or batch, and the
// message goes on to the owner this node knows, once.
func (n *Node) receive(m *nats.Msg) {
	rest := m.Subject[len(n.forwardedTo):]
	from, target, single := strings.Cut(rest, ".")
	if !single {
		n.receiveBatch(m, from)
		return
	}
	if target == "" {
		answerError(n.nc, m, 400, "forwarded subject %q: want <router>.<subject>", m.Subject)
		return
	}
	told := false
	if n.take(m, target, from, &told) {
		n.queueLocal(&request{nc: n.nc, msg: m, subject: n.cellIngest + target})
	}
}

// receiveBatch takes each publish of the batch m from the router from, in
// order. A batch it cannot read is refused whole: its sender is told if
// it asked for an answer, and the node logs it. A router asks for one of
// a batch to a cell that is a cluster, and hands the refusal to each
// publisher; a batch to a single-node cell goes without, and its
// publishers retry after their timeout.
func (n *Node) receiveBatch(m *nats.Msg, from string) {
	fs, err := n.batches.decode(m.Data)
	if err != nil {
		n.log.Warn("a forwarded batch refused", "router", from, "err", err)
		answerError(n.nc, m, 400, "forwarded batch from router %q: %v", from, err)
		return
	}
	// NB: the batch's requests, and their subjects in one string, are
	// one allocation each, not one each a publish (see decodeBatch).
	reqs := make([]request, len(fs))
	subjects, at := n.cellSubjects(fs), 0
	told := false
	for i, f := range fs {
		subject := subjects[at : at+len(n.cellIngest)+len(f.target)]
		at += len(subject)
		if n.take(f.msg, f.target, from, &told) {
			reqs[i] = request{nc: n.nc, msg: f.msg, subject: subject}
			n.queueLocal(&reqs[i])
		}
	}
	clear(fs) // the decoder's, kept for the next batch
}

// cellSubjects is the subject of each of fs on this cell's service's
// ingest, one after another in one string.
func (n *Node) cellSubjects(fs []forwarded) string {
	size := 0
	for _, f := range fs {
		size += len(n.cellIngest) + len(f.target)
	}
	var sb strings.Builder
	sb.Grow(size)
	for _, f := range fs {
		sb.WriteString(n.cellIngest)
		sb.WriteString(f.target)
	}
	return sb.String()
}

// take reports whether this cell's service is to schedule m, forwarded
// by router from for target: whether this cell owns its partition. If
// not, it answered or forwarded m. told says whether the router was told
// its map is stale already, for this message or batch.
func (n *Node) take(m *nats.Msg, target, from string, told *bool) bool {
	if n.reserved(target) {
		answerError(n.nc, m, 400, "target subject %q is inside the service's own prefixes", target)
		return false
	}
	p := Partition(target, n.rec.Partitions)
	if Contains(n.Record().Owned, p) {
		return true
	}
	if !*told {
		*told = true
		b, _ := json.Marshal(n.status())
		_ = n.nc.Publish(StalePrefix+"."+strings.TrimPrefix(from, refwd), b)
	}
	if strings.HasPrefix(from, refwd) {
		answerError(n.nc, m, 503, "partition %d is moving between cells: try again", p)
		return false
	}
	n.send(m, target, refwd+n.id, false)
	return false
}

// ingestAll hands reqs, in order, to this cell's service: at once, where
// it takes several (see BatchIngester), else one by one.
func (n *Node) ingestAll(reqs []micro.Request) {
	switch {
	case len(reqs) == 0:
	case len(reqs) > 1 && n.batcher != nil:
		n.batcher.IngestBatch(reqs)
	default:
		for _, r := range reqs {
			n.svc.Ingest(r)
		}
	}
}
