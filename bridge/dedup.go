package bridge

import (
	"crypto/sha256"
	"encoding/binary"
	"hash"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/keys"
)

// maxMsgIDLen bounds a Nats-Msg-Id that ingest keeps a duplicate record
// of: the id is part of the record's key.
const maxMsgIDLen = maxClientIDLen

// onceOf is msg, parsed from the header h, with what tells a resend of it
// from a new message (see delaystore.Once): its Nats-Msg-Id, and, with a
// Delay-Id, a digest of the message as it was sent. It refuses a
// Nats-Msg-Id given twice, longer than maxMsgIDLen, or with a control
// character.
func onceOf(msg *delaystore.StoredMessage, h nats.Header) (delaystore.Once, error) {
	o := delaystore.Once{Msg: msg}
	switch ids := h[headerMsgID]; {
	case len(ids) > 1:
		return o, badRequest("%s given %d times: want at most one", headerMsgID, len(ids))
	case len(ids) == 1 && ids[0] != "":
		if err := checkMsgID(ids[0]); err != nil {
			return o, err
		}
		o.MsgID = ids[0]
	}
	// Each publish of a debounce is news, the same text included: it
	// moves the fire time, so none is a resend of the one before. So is
	// each of a throttle: the one before may be delivered, and this one
	// is the next delivery.
	if msg.ClientId != "" && msg.DebounceFirstNs == 0 && msg.ThrottleNs == 0 {
		o.Sum = sentSum(msg, h)
	}
	return o, nil
}

// checkMsgID is checkClientID for a Nats-Msg-Id, which nats-server takes
// as sent: an empty one names no message and is not checked.
func checkMsgID(id string) error {
	if len(id) > maxMsgIDLen {
		return badRequest("%s is %d bytes: the limit is %d, as it keys the duplicate window", headerMsgID, len(id), maxMsgIDLen)
	}
	for _, r := range id {
		if r < ' ' || r == 0x7f {
			return badRequest("%s %q contains a control character", headerMsgID, keys.Clip(id))
		}
	}
	return nil
}

// sentSum digests what defines msg as its publisher sent it: the target
// subject, the payload, the headers passed on, and every control header
// as written but Delay-Id, which with the subject names the record. The
// times the service computed from them (fire time, expiry, first
// occurrence) are left out: a resend computes them anew, later.
func sentSum(msg *delaystore.StoredMessage, h nats.Header) delaystore.DedupSum {
	var ctl controls
	readControls(h, &ctl)
	d := sha256.New()
	var n [8]byte
	field := func(b []byte) {
		d.Write(binary.BigEndian.AppendUint64(n[:0], uint64(len(b))))
		d.Write(b)
	}
	field([]byte(msg.Subject))
	field(msg.Payload)
	for i, name := range controlHeaders {
		if name == wire.HeaderID {
			continue
		}
		d.Write(binary.BigEndian.AppendUint64(n[:0], uint64(ctl.count[i])))
		field([]byte(ctl.first[i]))
	}
	writeHeaders(d, msg.Headers, field)
	var sum delaystore.DedupSum
	copy(sum[:], d.Sum(nil))
	return sum
}

// writeHeaders adds the passed headers, in the name order they are
// stored in, to d.
func writeHeaders(d hash.Hash, hs []*delaystore.Header, field func([]byte)) {
	var n [8]byte
	d.Write(binary.BigEndian.AppendUint64(n[:0], uint64(len(hs))))
	for _, kv := range hs {
		field([]byte(kv.Name))
		d.Write(binary.BigEndian.AppendUint64(n[:0], uint64(len(kv.Values))))
		for _, v := range kv.Values {
			field([]byte(v))
		}
	}
}
