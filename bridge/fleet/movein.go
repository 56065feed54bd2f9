package fleet

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/keys"
)

// The target's side of a move (see move.go). Its steps run on the
// subscription's goroutine, one at a time.

// receiveIn stores a chunk of a move's messages (step 2), first recording
// the move as In if it is new.
func (n *Node) receiveIn(m *nats.Msg) {
	var step moveStep
	if err := json.Unmarshal([]byte(m.Header.Get(stepHeader)), &step); err != nil || step.From == "" || step.Epoch == 0 {
		answerError(n.nc, m, 400, "IN: want the move in the %s header", stepHeader)
		return
	}
	if se := n.canMove(); se != nil {
		answerError(n.nc, m, se.Code, "%s", se.Description)
		return
	}
	var store func() (int, error)
	if m.Header.Get(recordsHeader) != "" {
		recs, err := decodeSideChunk(m.Data)
		if err != nil {
			answerError(n.nc, m, 400, "IN: %v", err)
			return
		}
		store = func() (int, error) { return n.mover.ImportSideRecords(recs) }
	} else {
		msgs, err := decodeChunk(m.Data)
		if err != nil {
			answerError(n.nc, m, 400, "IN: %v", err)
			return
		}
		store = func() (int, error) { return n.mover.Import(msgs) }
	}
	if code, err := n.stage(step); err != nil {
		answerError(n.nc, m, code, "%v", err)
		return
	}
	n.lastIn.Store(time.Now().UnixNano())
	stored, err := store()
	if err != nil {
		answerError(n.nc, m, 503, "IN: %v", err)
		return
	}
	n.step("imported")
	if m.Reply != "" {
		b, _ := json.Marshal(map[string]int{"stored": stored})
		_ = n.nc.Publish(m.Reply, b)
	}
}

// stage records step as this cell's In, if it is not already: it
// refuses partitions the cell owns, and a move while another is coming
// in, unless that one is an earlier try of the same source's, whose
// staged messages it drops first. It returns the error code of a refusal.
func (n *Node) stage(step moveStep) (int, error) {
	mv := &Move{Partitions: ranges(set(step.Partitions, n.rec.Partitions)), Peer: step.From, Epoch: step.Epoch}
	rec := n.Record()
	if mv.same(rec.In) && rec.In.Peer == step.From {
		return 0, nil
	}
	if owned := Subtract(mv.Partitions, Subtract(mv.Partitions, rec.Owned, rec.Partitions), rec.Partitions); len(owned) > 0 {
		return 409, fmt.Errorf("cell %q owns partitions %s already", rec.Cell, FormatRanges(owned))
	}
	if in := rec.In; in != nil {
		if in.Peer != step.From || in.Epoch >= step.Epoch {
			return 409, fmt.Errorf("cell %q is receiving partitions %s from cell %q: try again once that move ends", rec.Cell, FormatRanges(in.Partitions), in.Peer)
		}
		if err := n.dropStaged(*in); err != nil {
			return 503, err
		}
	}
	if _, err := n.update(func(r *Record) error { r.In = mv; return nil }); err != nil {
		return 503, err
	}
	n.log.Info("receiving partitions", "partitions", FormatRanges(mv.Partitions), "from", step.From, "epoch", step.Epoch)
	n.step("in-recorded")
	return 0, nil
}

// commitIn makes the cell own the partitions of its In (step 3), and
// answers with its status; a commit asked again once it owns them is
// answered the same.
func (n *Node) commitIn(m *nats.Msg) {
	var step moveStep
	if err := json.Unmarshal(m.Data, &step); err != nil {
		answerError(n.nc, m, 400, "COMMIT: the request is not JSON: %v", err)
		return
	}
	mv := &Move{Partitions: ranges(set(step.Partitions, n.rec.Partitions)), Peer: step.From, Epoch: step.Epoch}
	rec := n.Record()
	switch {
	case mv.same(rec.In) && rec.In.Peer == step.From:
		var err error
		rec, err = n.update(func(r *Record) error {
			r.Owned = Union(r.Owned, mv.Partitions, r.Partitions)
			r.Epoch = max(r.Epoch, mv.Epoch)
			r.In = nil
			return nil
		})
		if err != nil {
			answerError(n.nc, m, 503, "COMMIT: %v", err)
			return
		}
		n.log.Info("partitions moved here: serving them", "partitions", FormatRanges(mv.Partitions), "from", step.From, "epoch", rec.Epoch)
		n.step("owned")
	case len(Subtract(mv.Partitions, rec.Owned, rec.Partitions)) == 0 && rec.Epoch >= step.Epoch:
		// Committed before; the answer was lost.
	default:
		answerError(n.nc, m, 409, "COMMIT: cell %q has no move of partitions %s from cell %q at epoch %d under way", rec.Cell, FormatRanges(mv.Partitions), step.From, step.Epoch)
		return
	}
	if m.Reply != "" {
		b, _ := json.Marshal(n.status())
		_ = n.nc.Publish(m.Reply, b)
	}
}

// abortIn drops what the cell staged of a move its source called off.
func (n *Node) abortIn(m *nats.Msg) {
	var step moveStep
	if err := json.Unmarshal(m.Data, &step); err != nil {
		return
	}
	mv := &Move{Partitions: ranges(set(step.Partitions, n.rec.Partitions)), Epoch: step.Epoch}
	if rec := n.Record(); mv.same(rec.In) && rec.In.Peer == step.From {
		if err := n.dropStaged(*rec.In); err != nil {
			n.log.Warn("dropping what a move called off staged here", "err", err)
		}
	}
}

// dropStaged drops the messages staged of in, a move into this cell that
// will not commit, and forgets it.
func (n *Node) dropStaged(in Move) error {
	ctx, cancel := n.stopContext()
	defer cancel()
	rec := n.Record()
	keep := n.keepOf(Subtract(in.Partitions, rec.Owned, rec.Partitions))
	dropped, err := n.mover.DropTopics(ctx, keep)
	if err == nil {
		_, err = n.mover.DropSideRecords(ctx, keep)
	}
	if err != nil {
		return fmt.Errorf("dropping the messages staged of a move called off: %w", err)
	}
	if _, err := n.update(func(r *Record) error {
		if r.In.same(&in) {
			r.In = nil
		}
		return nil
	}); err != nil {
		return err
	}
	n.log.Info("a move here was called off: its messages dropped", "partitions", FormatRanges(in.Partitions), "from", in.Peer, "dropped", dropped)
	return nil
}

// answerStatus tells the target of this cell's move whether the move is
// still on.
func (n *Node) answerStatus(m *nats.Msg) {
	var step moveStep
	if err := json.Unmarshal(m.Data, &step); err != nil || m.Reply == "" {
		return
	}
	mv := &Move{Partitions: ranges(set(step.Partitions, n.rec.Partitions)), Epoch: step.Epoch}
	out := n.Record().Out
	b, _ := json.Marshal(map[string]bool{"on": mv.same(out) && out.Peer == step.From})
	_ = n.nc.Publish(m.Reply, b)
}

// watchIn asks, each MoveTimeout, the source of a move into this cell
// that has sent nothing for as long whether the move is on, and drops
// what it staged once the source says it is not.
func (n *Node) watchIn() {
	t := time.NewTicker(n.cfg.MoveTimeout)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
		}
		in := n.Record().In
		if in == nil || time.Since(time.Unix(0, n.lastIn.Load())) < n.cfg.MoveTimeout || !n.svc.Leader() {
			continue
		}
		step, _ := json.Marshal(moveStep{From: n.rec.Cell, Partitions: in.Partitions, Epoch: in.Epoch})
		var st struct {
			On bool `json:"on"`
		}
		err := n.request(&nats.Msg{Subject: movePrefix(in.Peer) + "." + stepStatus, Data: step}, 2*time.Second, &st)
		if err == nil && !st.On {
			if err := n.dropStaged(*in); err != nil {
				n.log.Warn("dropping what a move called off staged here", "err", err)
			}
		}
	}
}

// decodeChunk reads the messages of an IN request's body (see readChunk).
func decodeChunk(b []byte) ([]delaystore.Imported, error) {
	var out []delaystore.Imported
	for len(b) > 0 {
		if len(b) < keys.Len {
			return nil, fmt.Errorf("a chunk cut short after %d messages", len(out))
		}
		k := keys.Key(b[:keys.Len])
		size, w := binary.Uvarint(b[keys.Len:])
		rest := b[keys.Len:]
		if w <= 0 || uint64(len(rest)-w) < size {
			return nil, fmt.Errorf("a chunk cut short after %d messages", len(out))
		}
		m := new(delaystore.StoredMessage)
		if err := proto.Unmarshal(rest[w:w+int(size)], m); err != nil {
			return nil, fmt.Errorf("message %d of the chunk: %v", len(out)+1, err)
		}
		out = append(out, delaystore.Imported{Key: k, Msg: m})
		b = rest[w+int(size):]
	}
	return out, nil
}
