package fleet

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/delaystore"
)

// A partition moves with the records it keeps beside its pending
// messages: its dead letters, so that DEAD.GET by tag, which the fleet
// routes to the partition's owner, finds them there, and the duplicate
// window's records of its subjects, so that a resend of a message
// answered before the move is answered as a duplicate by the target. They
// follow the messages in IN requests marked with recordsHeader, are
// stored once however often they are sent, and are deleted at the source
// with its copies of the messages.

// recordsHeader, on an IN request, says its body holds dead letters and
// duplicate records (see readSideChunk), not messages.
const recordsHeader = "Natsdelay-Move-Records"

// copySide sends the partitions' dead letters and duplicate records to
// the target, in chunks, until the deadline, and returns how many.
func (n *Node) copySide(mv Move, deadline time.Time) (int, error) {
	keep := n.keepOf(mv.Partitions)
	limit := n.chunkLimit()
	var after []byte
	sent := 0
	for {
		body, last, count, err := n.readSideChunk(after, keep, limit)
		if err != nil || count == 0 {
			return sent, err
		}
		if err := n.sendIn(mv, body, true, deadline); err != nil {
			return sent, err
		}
		sent += count
		after = last
	}
}

// readSideChunk reads the records after after that keep accepts, encoded
// one after another as their key's length as a uvarint, their key, their
// value's length and their value, up to limit bytes, and returns them,
// the last one's key and how many.
func (n *Node) readSideChunk(after []byte, keep func(uint64) bool, limit int) ([]byte, []byte, int, error) {
	var body, last []byte
	count := 0
	var tooLarge error
	err := n.mover.ScanSideRecords(after, keep, func(r delaystore.SideRecord) bool {
		size := 2*binary.MaxVarintLen64 + len(r.Key) + len(r.Value)
		if count > 0 && len(body)+size > limit {
			return false
		}
		if size > limit {
			tooLarge = fmt.Errorf("%w: the record %q is %d bytes stored, more than one request may carry (%d): it cannot be moved", wire.ErrConflict, r.Key, size, limit)
			return false
		}
		body = binary.AppendUvarint(body, uint64(len(r.Key)))
		body = append(body, r.Key...)
		body = binary.AppendUvarint(body, uint64(len(r.Value)))
		body = append(body, r.Value...)
		last, count = r.Key, count+1
		return true
	})
	if err == nil {
		err = tooLarge
	}
	return body, last, count, err
}

// decodeSideChunk reads the records of an IN request's body (see
// readSideChunk).
func decodeSideChunk(b []byte) ([]delaystore.SideRecord, error) {
	var out []delaystore.SideRecord
	next := func() ([]byte, bool) {
		size, w := binary.Uvarint(b)
		if w <= 0 || uint64(len(b)-w) < size {
			return nil, false
		}
		v := b[w : w+int(size)]
		b = b[w+int(size):]
		return v, true
	}
	for len(b) > 0 {
		k, ok := next()
		var v []byte
		if ok {
			v, ok = next()
		}
		if !ok || len(k) == 0 {
			return nil, fmt.Errorf("a chunk of records cut short after %d", len(out))
		}
		out = append(out, delaystore.SideRecord{Key: k, Value: v})
	}
	return out, nil
}
