package fleet

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/keys"
)

// Moving partitions between cells. The source carries a move out, step by
// step, each step persisted in its record before the next begins, so that
// a cell killed at any step goes on from it when it starts again:
//
//  1. The source records Out (the partitions, the target, the epoch e at
//     which the target will own them, above every epoch the fleet
//     knows), then freezes them: their ingest and requests get a 503,
//     their deliveries stop, answers to deliveries of theirs already out
//     are dropped (those deliveries count as unanswered).
//  2. It sends their messages, then their dead letters and duplicate records (see moveside.go), to the
//     target (IN), in chunks, under the same keys. The target records In
//     before it stores the first, keeps what it receives frozen (it does
//     not own them), and stores each message once however often it is
//     sent. If this takes longer than Config.MoveTimeout the source calls
//     the move off: it forgets Out, thaws the partitions and tells the
//     target to drop what it staged.
//  3. The source records Committing, then asks the target to COMMIT:
//     the target records that it owns the partitions at epoch e, thaws
//     them and serves them. From here the move is never called off: the
//     source asks until the target answers.
//  4. The source records that it no longer owns them (epoch e), drops its
//     copies (messages, dead letters, duplicate records), and forgets the
//     move.
//
// A target whose In is not carried on (its source called it off while the
// target was away) asks the source for its STATUS and drops what it
// staged once the source says the move is off.

// Mover is what a Node needs of its cell's service to move partitions (a
// *bridge.Service is one). A service that is not one cannot move them.
type Mover interface {
	// SetFrozen makes f say which topics are held still (see
	// bridge.Service.SetFrozen).
	SetFrozen(f func(topicHash uint64) bool) error
	// ScanEvents reads the pending messages of the topics keep accepts.
	ScanEvents(after *keys.Key, keep func(topicHash uint64) bool, yield func(keys.Key, *delaystore.StoredMessage) bool) error
	// Import stores messages handed over, under their keys, once.
	Import(in []delaystore.Imported) (int, error)
	// DropTopics deletes the pending messages of the topics keep accepts.
	DropTopics(ctx context.Context, keep func(topicHash uint64) bool) (int, error)
	// ScanSideRecords reads the dead letters and duplicate records of the
	// topics keep accepts (see moveside.go).
	ScanSideRecords(after []byte, keep func(topicHash uint64) bool, yield func(delaystore.SideRecord) bool) error
	// ImportSideRecords stores records handed over, under their keys,
	// once.
	ImportSideRecords(recs []delaystore.SideRecord) (int, error)
	// DropSideRecords deletes the records of the topics keep accepts.
	DropSideRecords(ctx context.Context, keep func(topicHash uint64) bool) (int, error)
}

// MoveRequest asks a cell, on MoveSubject(cell), to move partitions it
// owns to the cell To.
type MoveRequest struct {
	Partitions []Range `json:"partitions"`
	To         string  `json:"to"`
}

// MoveReply is the answer to a MoveRequest once the move is done.
type MoveReply struct {
	From       string  `json:"from"`
	To         string  `json:"to"`
	Partitions []Range `json:"partitions"`
	Epoch      uint64  `json:"epoch"`
	// Messages is how many pending messages the target received.
	Messages int `json:"messages"`
	// Records is how many dead letters and duplicate records it
	// received.
	Records int `json:"records"`
}

// moveStep is what names a move in the requests between its cells: the
// cell that sends it, and the move.
type moveStep struct {
	From       string  `json:"from"`
	Partitions []Range `json:"partitions"`
	Epoch      uint64  `json:"epoch"`
}

// stepHeader carries a moveStep in the header of an IN request, whose
// body is the messages.
const stepHeader = "Natsdelay-Move"

// Step subjects, after movePrefix(cell).
const (
	stepOut    = "OUT"
	stepIn     = "IN"
	stepCommit = "COMMIT"
	stepAbort  = "ABORT"
	stepStatus = "STATUS"
)

// handleMove takes a request to this cell's move subjects.
func (n *Node) handleMove(m *nats.Msg) {
	switch m.Subject[strings.LastIndexByte(m.Subject, '.')+1:] {
	case stepOut:
		n.startMove(m)
	case stepIn:
		n.receiveIn(m)
	case stepCommit:
		n.commitIn(m)
	case stepAbort:
		n.abortIn(m)
	case stepStatus:
		n.answerStatus(m)
	default:
		answerError(n.nc, m, 400, "%s: not a step of a move", m.Subject)
	}
}

// canMove returns why this cell cannot take part in a move, or nil.
func (n *Node) canMove() *wire.ServiceError {
	if n.mover == nil {
		return &wire.ServiceError{Code: 409, Description: fmt.Sprintf("cell %q cannot move partitions", n.rec.Cell)}
	}
	return nil
}

// startMove takes a MoveRequest and carries it out in a goroutine of the
// node's, which answers the requester once the move is done.
func (n *Node) startMove(m *nats.Msg) {
	var req MoveRequest
	if err := json.Unmarshal(m.Data, &req); err != nil {
		answerError(n.nc, m, 400, "MOVE: the request is not JSON: %v", err)
		return
	}
	if se := n.canMove(); se != nil {
		answerError(n.nc, m, se.Code, "%s", se.Description)
		return
	}
	n.moveWG.Add(1)
	go func() {
		defer n.moveWG.Done()
		rep, err := n.move(req)
		if err != nil {
			se := wire.NewServiceError(err)
			answerError(n.nc, m, se.Code, "%s", se.Description)
			return
		}
		if m.Reply != "" {
			b, _ := json.Marshal(rep)
			_ = n.nc.Publish(m.Reply, b)
		}
	}()
}

// move carries out req, one move of this cell's at a time.
func (n *Node) move(req MoveRequest) (MoveReply, error) {
	n.moving.Lock()
	defer n.moving.Unlock()
	mv, err := n.beginMove(req)
	if err != nil {
		return MoveReply{}, err
	}
	return n.carryOut(mv)
}

// beginMove checks req and records it as this cell's Out (step 1), or
// returns the Out under way when req asks for the same move again.
func (n *Node) beginMove(req MoveRequest) (Move, error) {
	rec := n.Record()
	if len(req.Partitions) == 0 || req.To == "" {
		return Move{}, moveError(wire.ErrBadRequest, "give the partitions to move and the cell to move them to")
	}
	if req.To == rec.Cell {
		return Move{}, moveError(wire.ErrBadRequest, "cell %q owns partitions %s already", rec.Cell, FormatRanges(req.Partitions))
	}
	parts := ranges(set(req.Partitions, rec.Partitions))
	if out := rec.Out; out != nil {
		if out.Peer == req.To && FormatRanges(out.Partitions) == FormatRanges(parts) {
			return *out, nil
		}
		return Move{}, moveError(wire.ErrConflict, "cell %q is moving partitions %s to cell %q: run that move again to finish it first", rec.Cell, FormatRanges(out.Partitions), out.Peer)
	}
	if notOwned := Subtract(parts, rec.Owned, rec.Partitions); len(notOwned) > 0 {
		return Move{}, moveError(wire.ErrConflict, "cell %q does not own partitions %s (it owns %s)", rec.Cell, FormatRanges(notOwned), FormatRanges(rec.Owned))
	}
	if h, ok := n.table.heardOf(req.To); !ok || time.Since(h.at) > n.cfg.Silence {
		return Move{}, moveError(wire.ErrUnavailable, "cell %q is not serving in the fleet: not heard from", req.To)
	}
	mv := Move{Partitions: parts, Peer: req.To, Epoch: max(n.table.maxEpoch(), rec.Epoch) + 1}
	if _, err := n.update(func(r *Record) error { r.Out = &mv; return nil }); err != nil {
		return Move{}, err
	}
	n.log.Info("moving partitions: frozen here until the move ends", "partitions", FormatRanges(parts), "to", req.To, "epoch", mv.Epoch)
	n.step("out-recorded")
	return mv, nil
}

// carryOut carries the move mv, recorded as this cell's Out, on from the
// step it is at.
func (n *Node) carryOut(mv Move) (MoveReply, error) {
	rep := MoveReply{From: n.rec.Cell, To: mv.Peer, Partitions: mv.Partitions, Epoch: mv.Epoch}
	if !mv.Committing && !mv.Committed {
		sent, records, err := n.copyOut(mv)
		if err != nil {
			return rep, n.callOff(mv, err)
		}
		rep.Messages, rep.Records = sent, records
		mv.Committing = true
		if _, err := n.update(func(r *Record) error { r.Out = &mv; return nil }); err != nil {
			return rep, err
		}
		n.step("committing")
	}
	if !mv.Committed {
		if err := n.commitOut(mv); err != nil {
			return rep, err
		}
		mv.Committed = true
		_, err := n.update(func(r *Record) error {
			r.Owned = Subtract(r.Owned, mv.Partitions, r.Partitions)
			r.Epoch = max(r.Epoch, mv.Epoch)
			r.Out = &mv
			return nil
		})
		if err != nil {
			return rep, err
		}
		n.step("released")
	}
	ctx, cancel := n.stopContext()
	defer cancel()
	dropped, err := n.mover.DropTopics(ctx, n.keepOf(mv.Partitions))
	if err == nil {
		_, err = n.mover.DropSideRecords(ctx, n.keepOf(mv.Partitions))
	}
	if err != nil {
		return rep, fmt.Errorf("%w: cell %q owns partitions %s now; dropping the copies here: %v (run the move again, or restart this cell, to finish)", wire.ErrUnavailable, mv.Peer, FormatRanges(mv.Partitions), err)
	}
	n.step("dropped")
	if _, err := n.update(func(r *Record) error { r.Out = nil; return nil }); err != nil {
		return rep, err
	}
	n.log.Info("partitions moved", "partitions", FormatRanges(mv.Partitions), "to", mv.Peer, "epoch", mv.Epoch, "sent", rep.Messages, "dropped_here", dropped)
	return rep, nil
}

// copyOut sends the partitions' messages, then their dead letters and
// duplicate records, to the target (step 2), within Config.MoveTimeout,
// and returns how many of each it sent. It sends one chunk of
// messages, empty, when there are none, so that the target records the
// move.
func (n *Node) copyOut(mv Move) (messages, records int, err error) {
	deadline := time.Now().Add(n.cfg.MoveTimeout)
	if messages, err = n.copyMessages(mv, deadline); err != nil {
		return messages, 0, err
	}
	records, err = n.copySide(mv, deadline)
	return messages, records, err
}

// copyMessages sends the partitions' messages to the target, in chunks,
// until the deadline.
func (n *Node) copyMessages(mv Move, deadline time.Time) (int, error) {
	keep := n.keepOf(mv.Partitions)
	limit := n.chunkLimit()
	var after *keys.Key
	sent := 0
	for {
		body, last, count, err := n.readChunk(after, keep, limit)
		if err != nil {
			return sent, err
		}
		if count == 0 && after != nil {
			return sent, nil
		}
		if err := n.sendIn(mv, body, false, deadline); err != nil {
			return sent, err
		}
		sent += count
		n.step("chunk-sent")
		if count == 0 {
			return sent, nil
		}
		after = &last
	}
}

// chunkLimit bounds the bytes of one IN request's body.
func (n *Node) chunkLimit() int {
	limit := max(int(n.nc.MaxPayload())-8<<10, 1<<10)
	if n.cfg.MoveChunk > 0 {
		limit = min(limit, n.cfg.MoveChunk)
	}
	return limit
}

// readChunk reads the messages after after that keep accepts, encoded one
// after another as their 24-byte key, their length as a uvarint and their
// encoding, up to limit bytes, and returns them, the last key read, and
// how many it read.
func (n *Node) readChunk(after *keys.Key, keep func(uint64) bool, limit int) (body []byte, last keys.Key, count int, err error) {
	var tooLarge error
	err = n.mover.ScanEvents(after, keep, func(k keys.Key, m *delaystore.StoredMessage) bool {
		b, err := proto.Marshal(m)
		if err != nil {
			tooLarge = err
			return false
		}
		size := keys.Len + binary.MaxVarintLen64 + len(b)
		if count > 0 && len(body)+size > limit {
			return false
		}
		if size > limit {
			tooLarge = fmt.Errorf("%w: message %s is %d bytes stored, more than one request may carry (%d): it cannot be moved", wire.ErrConflict, k.Tag(), len(b), limit)
			return false
		}
		body = append(body, k[:]...)
		body = binary.AppendUvarint(body, uint64(len(b)))
		body = append(body, b...)
		last, count = k, count+1
		return true
	})
	return body, last, count, errors.Join(err, tooLarge)
}

// sendIn sends one chunk to the target, again after a failure, until the
// deadline.
func (n *Node) sendIn(mv Move, body []byte, records bool, deadline time.Time) error {
	step, _ := json.Marshal(moveStep{From: n.rec.Cell, Partitions: mv.Partitions, Epoch: mv.Epoch})
	m := &nats.Msg{Subject: movePrefix(mv.Peer) + "." + stepIn, Header: nats.Header{}, Data: body}
	m.Header.Set(stepHeader, string(step))
	if records {
		m.Header.Set(recordsHeader, "1")
	}
	for {
		err := n.request(m, min(5*time.Second, time.Until(deadline)), nil)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, wire.ErrBadRequest):
			return err
		case time.Now().After(deadline):
			return fmt.Errorf("%w: cell %q did not take the messages within %v: %v", wire.ErrUnavailable, mv.Peer, n.cfg.MoveTimeout, err)
		}
		if !n.pause() {
			return fmt.Errorf("%w: the cell is stopping", wire.ErrUnavailable)
		}
	}
}

// commitOut asks the target to own the partitions (step 3) until it
// answers that it does; only the node's Close stops it.
func (n *Node) commitOut(mv Move) error {
	step, _ := json.Marshal(moveStep{From: n.rec.Cell, Partitions: mv.Partitions, Epoch: mv.Epoch})
	m := &nats.Msg{Subject: movePrefix(mv.Peer) + "." + stepCommit, Data: step}
	for warned := false; ; {
		var st Status
		err := n.request(m, 5*time.Second, &st)
		if err == nil {
			n.table.learn(st, time.Now())
			return nil
		}
		if !warned {
			n.log.Warn("the target of a move does not commit it yet: asking again until it does; the partitions stay frozen here", "to", mv.Peer, "partitions", FormatRanges(mv.Partitions), "err", err)
			warned = true
		}
		if !n.pause() {
			return fmt.Errorf("%w: the cell is stopping; the move goes on when it starts again", wire.ErrUnavailable)
		}
	}
}

// callOff forgets the move mv, which the target was never asked to
// commit, thaws its partitions here, and tells the target to drop what
// it staged; it returns cause, saying so.
func (n *Node) callOff(mv Move, cause error) error {
	if _, err := n.update(func(r *Record) error { r.Out = nil; return nil }); err != nil {
		return errors.Join(cause, err)
	}
	step, _ := json.Marshal(moveStep{From: n.rec.Cell, Partitions: mv.Partitions, Epoch: mv.Epoch})
	_ = n.nc.Publish(movePrefix(mv.Peer)+"."+stepAbort, step)
	n.log.Warn("move called off: the partitions stay here", "partitions", FormatRanges(mv.Partitions), "to", mv.Peer, "err", cause)
	return fmt.Errorf("move of partitions %s to cell %q called off, they stay on cell %q: %w", FormatRanges(mv.Partitions), mv.Peer, n.rec.Cell, cause)
}

// resumeMoves carries on, in the node's goroutines, the move out rec was
// at when the cell stopped, and watches the move in. A cluster cell's
// record is the replicated one, which its leader reads when it starts to
// serve (see takeOver): it carries the move on then.
func (n *Node) resumeMoves(rec Record) {
	if rec.Out != nil && n.canMove() == nil && n.keeper == nil {
		n.resumeOut(*rec.Out)
	}
	n.moveWG.Add(1)
	go func() {
		defer n.moveWG.Done()
		n.watchIn()
	}()
}

// resumeOut carries the move out mv on from the step the record is at,
// in a goroutine of the node's, unless it is over by the time no other
// move of this cell's is under way.
func (n *Node) resumeOut(mv Move) {
	n.moveWG.Add(1)
	go func() {
		defer n.moveWG.Done()
		n.moving.Lock()
		defer n.moving.Unlock()
		out := n.Record().Out
		if !mv.same(out) || out.Peer != mv.Peer {
			return // carried out meanwhile
		}
		n.log.Info("going on with a move under way when the cell stopped or its leader changed", "partitions", FormatRanges(out.Partitions), "to", out.Peer, "epoch", out.Epoch)
		if _, err := n.carryOut(*out); err != nil {
			n.log.Warn("the move under way when the cell stopped or its leader changed did not finish", "err", err)
		}
	}()
}

// update applies f to a copy of the cell's record, writes it (to the
// data dir, or in a cluster cell to the replicated store), and puts it in
// force (see install).
func (n *Node) update(f func(r *Record) error) (Record, error) {
	n.writeMu.Lock()
	defer n.writeMu.Unlock()
	r := n.Record()
	for _, m := range []**Move{&r.Out, &r.In} {
		if *m != nil {
			c := **m
			*m = &c
		}
	}
	if err := f(&r); err != nil {
		return r, err
	}
	if err := n.persist(r); err != nil {
		return r, fmt.Errorf("%w: %v", wire.ErrUnavailable, err)
	}
	return r, n.install(r)
}

// persist writes r where the cell keeps its record.
func (n *Node) persist(r Record) error {
	if n.keeper == nil {
		return saveRecord(n.cfg.DataDir, r)
	}
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return n.keeper.SetFleetRecord(b)
}

// install makes r the cell's record now: the table learns it and the
// service's frozen topics follow it. writeMu must be held.
func (n *Node) install(r Record) error {
	n.curMu.Lock()
	n.cur = r
	n.curMu.Unlock()
	n.table.learn(n.status(), time.Now())
	if err := n.freeze(r); err != nil {
		return fmt.Errorf("%w: %v", wire.ErrUnavailable, err)
	}
	return nil
}

// freeze has the service hold still the topics Frozen(rec) names.
func (n *Node) freeze(rec Record) error {
	if n.mover == nil {
		return nil
	}
	return n.mover.SetFrozen(Frozen(rec))
}

// Frozen says which topics, by hash, a cell whose record is rec holds
// still: those of every partition it does not own, and of those it is
// moving away.
func Frozen(rec Record) func(topicHash uint64) bool {
	frozen := set(rec.Owned, rec.Partitions)
	for p := range frozen {
		frozen[p] = !frozen[p]
	}
	if rec.Out != nil {
		for _, r := range rec.Out.Partitions {
			for p := max(r.From, 0); p <= min(r.To, rec.Partitions-1); p++ {
				frozen[p] = true
			}
		}
	}
	size := uint64(rec.Partitions)
	return func(h uint64) bool { return frozen[h%size] }
}

// keepOf accepts the topics of the partitions rs.
func (n *Node) keepOf(rs []Range) func(uint64) bool {
	s := set(rs, n.rec.Partitions)
	size := uint64(n.rec.Partitions)
	return func(h uint64) bool { return s[h%size] }
}

// request sends m and waits up to timeout for its answer, which it
// decodes into out if not nil; an error answer is returned as its error.
func (n *Node) request(m *nats.Msg, timeout time.Duration, out any) error {
	r, err := n.nc.RequestMsg(m, max(timeout, time.Millisecond))
	if err != nil {
		return fmt.Errorf("%w: %v", wire.ErrUnavailable, err)
	}
	if err := wire.ParseError(r.Header, r.Data); err != nil {
		return err
	}
	if out != nil {
		if err := json.Unmarshal(r.Data, out); err != nil {
			return fmt.Errorf("%w: the answer of %s: %v", wire.ErrUnavailable, m.Subject, err)
		}
	}
	return nil
}

// pause waits a heartbeat between two tries; false if the node stops.
func (n *Node) pause() bool {
	t := time.NewTimer(n.cfg.Heartbeat)
	defer t.Stop()
	select {
	case <-n.stop:
		return false
	case <-t.C:
		return true
	}
}

// stopContext is a context that ends when the node stops.
func (n *Node) stopContext() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-n.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// moveError is an error wrapping kind, one of wire's.
func moveError(kind error, format string, args ...any) error {
	return fmt.Errorf("%w: %s", kind, fmt.Sprintf(format, args...))
}

// step tells Config.StepHook, if any, that this cell is at step.
func (n *Node) step(step string) {
	if n.cfg.StepHook != nil {
		n.cfg.StepHook(step)
	}
}
