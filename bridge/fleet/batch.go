package fleet

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// A router sends what one burst of its ingest forwards to a cell as one
// NATS message, a batch, on $DELAY.CELL.<owner>.FWD.<router> (one token
// after FWD, where a single forward has the subject after the router):
// the hop's cost is mostly NATS's work per message (a write for the
// router's flusher, a read, a parse and a wake-up of the owner's
// handler; performance.md, "Batched forwards, before and after"), not
// the bytes. Each publish in it keeps its own subject, reply subject,
// headers and payload, so the owner answers each publisher directly, as
// it answers a single forward.
//
// A batch's payload is a version byte, batchVersion, then each publish:
//
//	str(subject) str(reply) uvarint(count) count*(str(key) str(value)) str(payload)
//
// where str(s) is uvarint(len(s)) then s. A header with several values
// has a pair for each.
const batchVersion = 1

// maxBatchBytes bounds a batch's payload below the server's max_payload:
// large enough that a burst of small publishes goes as one, small enough
// that a batch's first publish does not wait long behind its last.
const maxBatchBytes = 256 << 10

// errBatch is the error of a batch that cannot be read.
var errBatch = errors.New("malformed forwarded batch")

// forwarded is a publish a router forwards, or a receiver read from a
// batch: the message as the router took it and its target subject.
type forwarded struct {
	msg    *nats.Msg
	target string
	part   int
}

// encodedSize is at most the bytes f takes in a batch.
func (f forwarded) encodedSize() int {
	n := 4*binary.MaxVarintLen32 + len(f.target) + len(f.msg.Reply) + len(f.msg.Data)
	for k, vs := range f.msg.Header {
		for _, v := range vs {
			n += 2*binary.MaxVarintLen32 + len(k) + len(v)
		}
	}
	return n
}

// appendForwarded appends f, with reply as its reply subject, to a
// batch's payload b.
func appendForwarded(b []byte, f forwarded, reply string) []byte {
	b = appendStr(b, f.target)
	b = appendStr(b, reply)
	count := 0
	for _, vs := range f.msg.Header {
		count += len(vs)
	}
	b = binary.AppendUvarint(b, uint64(count))
	for k, vs := range f.msg.Header {
		for _, v := range vs {
			b = appendStr(b, k)
			b = appendStr(b, v)
		}
	}
	return append(binary.AppendUvarint(b, uint64(len(f.msg.Data))), f.msg.Data...)
}

func appendStr(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// decodeBatch reads every publish of a batch's payload, or returns an
// error wrapping errBatch that says where it went wrong; nothing of a
// batch with an error is to be taken.
//
// What the publishes of a batch share is allocated once a batch, not
// once a publish: their messages, one string of their subjects, reply
// subjects and header names and values (which keeps those bytes alive,
// not the batch), and one slice of their header values. A publish's
// header map is its own, and its payload stays a part of the batch's,
// which NATS handed over as a buffer of its own. The owner paid for
// about seven allocations a publish forwarded to it beside what NATS's
// client allocates for the batch and for the publish at its router
// (performance.md, "A forwarded batch's allocations shared").
func decodeBatch(b []byte) ([]forwarded, error) {
	var d batchDecoder
	return d.decode(b)
}

// batchDecoder reads batches into slices it keeps for the next: what it
// returns is good until its next decode, which writes over it; the
// messages it points to are the batch's own. Its caller clears what it
// returns once taken, so that no message outlives its use for it.
type batchDecoder struct {
	ps    []publishSpans
	pairs []span
	out   []forwarded
}

// decode is decodeBatch, into d's slices.
func (d *batchDecoder) decode(b []byte) ([]forwarded, error) {
	if len(b) == 0 {
		return nil, fmt.Errorf("%w: empty", errBatch)
	}
	if b[0] != batchVersion {
		return nil, fmt.Errorf("%w: version %d, want %d", errBatch, b[0], batchVersion)
	}
	r := batchReader{all: b, b: b[1:], pairs: d.pairs[:0]}
	ps := d.ps[:0]
	defer func() { d.ps, d.pairs = ps[:0], r.pairs[:0] }()
	for len(r.b) > 0 {
		p, err := r.publish()
		if err != nil {
			return nil, fmt.Errorf("%w: publish %d: %v", errBatch, len(ps)+1, err)
		}
		ps = append(ps, p)
	}
	if len(ps) == 0 {
		return nil, fmt.Errorf("%w: no publish", errBatch)
	}
	out, err := r.build(ps, d.out[:0])
	d.out = out[:0]
	return out, err
}

// batchReader reads a batch's payload all, b being what is left of it.
type batchReader struct {
	all, b []byte
	// pairs are the spans of every header name and value read, in
	// order: publishSpans.pairs indexes them.
	pairs []span
}

// span is where a string of a publish lies in the batch's payload.
type span struct{ off, n int }

// publishSpans is where the parts of a publish lie in its batch.
type publishSpans struct {
	subject, reply span
	// pairs are the publish's header names and values, each pair's
	// name then value, at batchReader.pairs[pairs.off:][:2*pairs.n].
	pairs   span
	payload span
}

// publish reads where the next publish's parts lie.
func (r *batchReader) publish() (publishSpans, error) {
	var p publishSpans
	var err error
	if p.subject, err = r.span("subject"); err != nil {
		return p, err
	}
	if p.reply, err = r.span("reply subject"); err != nil {
		return p, err
	}
	count, err := r.uvarint("header count")
	if err != nil {
		return p, err
	}
	if count > uint64(len(r.b)/2) {
		return p, fmt.Errorf("%d headers in %d bytes", count, len(r.b))
	}
	p.pairs = span{off: len(r.pairs), n: int(count)}
	for range count {
		k, err := r.span("header name")
		if err != nil {
			return p, err
		}
		v, err := r.span("header value")
		if err != nil {
			return p, err
		}
		r.pairs = append(r.pairs, k, v)
	}
	p.payload, err = r.span("payload")
	return p, err
}

// build appends to out the forwarded publishes ps, read from r's batch,
// with what they share allocated once (see decodeBatch).
func (r *batchReader) build(ps []publishSpans, out []forwarded) ([]forwarded, error) {
	size := 0
	for _, p := range ps {
		size += p.subject.n + p.reply.n
	}
	for _, s := range r.pairs {
		size += s.n
	}
	var sb strings.Builder
	sb.Grow(size)
	for _, p := range ps {
		sb.Write(r.bytesAt(p.subject))
		sb.Write(r.bytesAt(p.reply))
		for _, s := range r.pairs[p.pairs.off:][:2*p.pairs.n] {
			sb.Write(r.bytesAt(s))
		}
	}
	strs, at := sb.String(), 0
	next := func(s span) string {
		at += s.n
		return strs[at-s.n : at]
	}
	msgs := make([]nats.Msg, len(ps))
	vals := make([]string, len(r.pairs)/2)
	for i, p := range ps {
		target := next(p.subject)
		if !literalSubject(target) {
			clear(out) // the kept slice holds no message of a refused batch
			return nil, fmt.Errorf("%w: publish %d: subject %q is not a subject one can publish to", errBatch, i+1, target)
		}
		m := &msgs[i]
		m.Reply = next(p.reply)
		if p.pairs.n > 0 {
			m.Header = make(nats.Header, p.pairs.n)
			for j, s := 0, r.pairs[p.pairs.off:][:2*p.pairs.n]; j < len(s); j += 2 {
				k, v := next(s[j]), next(s[j+1])
				if vs, ok := m.Header[k]; ok {
					m.Header[k] = append(vs, v)
					continue
				}
				vi := (p.pairs.off + j) / 2
				vals[vi] = v
				m.Header[k] = vals[vi : vi+1 : vi+1]
			}
		}
		m.Data = r.bytesAt(p.payload)
		out = append(out, forwarded{msg: m, target: target})
	}
	return out, nil
}

// bytesAt is the bytes of the batch at s, capped at their end.
func (r *batchReader) bytesAt(s span) []byte { return r.all[s.off : s.off+s.n : s.off+s.n] }

// span reads a str(s) and returns where s lies.
func (r *batchReader) span(what string) (span, error) {
	b, err := r.bytes(what)
	return span{off: len(r.all) - len(r.b) - len(b), n: len(b)}, err
}

func (r *batchReader) uvarint(what string) (uint64, error) {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		return 0, fmt.Errorf("%s: truncated or overlong length", what)
	}
	r.b = r.b[n:]
	return v, nil
}

func (r *batchReader) bytes(what string) ([]byte, error) {
	n, err := r.uvarint(what)
	if err != nil {
		return nil, err
	}
	if n > uint64(len(r.b)) {
		return nil, fmt.Errorf("%s: %d bytes, %d left", what, n, len(r.b))
	}
	b := r.b[:n:n]
	r.b = r.b[n:]
	return b, nil
}

// literalSubject reports whether s is a subject a message can be
// published to: tokens not empty, no wildcard, no whitespace.
func literalSubject(s string) bool {
	if s == "" || strings.ContainsAny(s, " \t\r\n") {
		return false
	}
	for rest, more := s, true; more; {
		var t string
		t, rest, more = strings.Cut(rest, ".")
		if t == "" || t == "*" || t == ">" {
			return false
		}
	}
	return true
}

// outbox holds what serveIn forwards, by owner, and what it takes for
// this node's own cell, until NATS has nothing more for it: a burst goes
// as one batch a cell, and a lone publish at once, as a single forward,
// with no wait added. Only serveIn touches it.
type outbox struct {
	// cells are the owners forwarded to, in the order of their first
	// forward since the outbox was last sent.
	cells []string
	by    map[string]*queued
	// local are the messages for this node's own cell, in order.
	local []micro.Request
	// buf is the last batch's payload, which the next is written over.
	buf []byte
}

// queued are the forwards to one cell not sent yet, and at most the
// bytes their batch takes.
type queued struct {
	fs   []forwarded
	size int
	// listed is whether the cell is in outbox.cells.
	listed bool
}

// queue adds f, for cell, to the outbox. A cell's batch that f would make
// larger than a batch may be goes first; a publish too large for any
// batch goes alone, after what was queued for its cell before it.
func (n *Node) queue(f forwarded, cell string) {
	q := n.out.by[cell]
	if q == nil {
		if n.out.by == nil {
			n.out.by = map[string]*queued{}
		}
		q = &queued{}
		n.out.by[cell] = q
	}
	if !q.listed {
		q.listed = true
		n.out.cells = append(n.out.cells, cell)
	}
	size, limit := f.encodedSize(), n.batchLimit()
	if q.size+size > limit {
		n.sendQueued(cell, q)
		if size > limit {
			n.forwardAlone(f, cell)
			return
		}
	}
	q.fs = append(q.fs, f)
	q.size += size
}

// sendOutbox sends what the outbox holds: the forwards first, so that
// the owners start on them, then this cell's own messages to its
// service.
func (n *Node) sendOutbox() {
	for _, c := range n.out.cells {
		q := n.out.by[c]
		n.sendQueued(c, q)
		q.listed = false
	}
	n.out.cells = n.out.cells[:0]
	n.sendLocal()
}

// maxLocal bounds the messages for this node's own cell that the outbox
// holds: a burst that does not end is handed over in parts of this many,
// and none waits behind more than that.
const maxLocal = 256

// queueLocal adds r, a message for this node's own cell, to the outbox.
func (n *Node) queueLocal(r *request) {
	n.out.local = append(n.out.local, r)
	if len(n.out.local) >= maxLocal {
		n.sendLocal()
	}
}

// sendLocal hands the outbox's messages for this node's own cell to its
// service, and empties it.
func (n *Node) sendLocal() {
	n.ingestAll(n.out.local)
	clear(n.out.local) // the messages are not kept past their hand-over
	n.out.local = n.out.local[:0]
}

// batchLimit is the largest batch payload this router sends.
func (n *Node) batchLimit() int {
	return min(int(n.nc.MaxPayload()), maxBatchBytes) - 1
}

// sendQueued sends q to cell: a single forward for one publish, a batch
// for more, and empties it.
func (n *Node) sendQueued(cell string, q *queued) {
	switch len(q.fs) {
	case 0:
	case 1:
		n.forwardAlone(q.fs[0], cell)
	default:
		n.sendBatch(cell, q.fs, q.size)
	}
	clear(q.fs) // the messages are not kept past their send
	q.fs, q.size = q.fs[:0], 0
}

// forwardAlone forwards f to cell as a single forward.
func (n *Node) forwardAlone(f forwarded, cell string) {
	if err := n.forward(f.msg, cell, f.part, f.target, n.id); err != nil {
		answerError(n.nc, f.msg, 503, "forwarding to cell %q: %v", cell, err)
	}
}

// sendBatch publishes fs to cell as one batch of at most size bytes.
func (n *Node) sendBatch(cell string, fs []forwarded, size int) {
	b, tokens, batch := n.encodeBatch(cell, fs, size)
	out := &nats.Msg{Subject: forwardPrefix(cell) + "." + n.id, Data: b}
	if len(tokens) > 0 {
		// NB: for NATS's no-responders, and an owner's refusal of the
		// whole batch; the owner answers each publish on its own reply.
		out.Reply = n.relaySubject() + ".b" + strconv.FormatUint(batch, 10)
	}
	err := n.nc.PublishMsg(out)
	// NB: PublishMsg copied b into the connection's buffer: the next
	// batch is written over it, so that a router's forwards leave no
	// garbage of their size behind for the collector.
	n.out.buf = b[:0]
	if err == nil {
		return
	}
	for _, t := range tokens {
		n.relay.take(t)
	}
	for _, f := range fs {
		answerError(n.nc, f.msg, 503, "forwarding to cell %q: %v", cell, err)
	}
}

// encodeBatch is the payload of the batch fs, of at most size bytes, for
// cell, in the outbox's buffer, the relay's tokens it took and the
// batch's number with the relay (0 for a single-node cell). As
// forward does for one, it gives a publish to a cell that is a cluster
// the router's reply subject, so that the relay answers for the owner.
func (n *Node) encodeBatch(cell string, fs []forwarded, size int) ([]byte, []uint64, uint64) {
	clustered := n.clustered(cell)
	var tokens []uint64
	var batch uint64
	if clustered {
		batch = n.relay.newBatch()
	}
	now := time.Now()
	b := slices.Grow(n.out.buf[:0], 1+size)
	b = append(b, batchVersion)
	for _, f := range fs {
		reply := f.msg.Reply
		if reply != "" && clustered {
			token := n.relay.add(reply, cell, f.part, now, batch)
			tokens = append(tokens, token)
			reply = n.relaySubject() + "." + strconv.FormatUint(token, 10)
		}
		b = appendForwarded(b, f, reply)
	}
	return b, tokens, batch
}
