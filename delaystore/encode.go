package delaystore

import (
	"fmt"
	"github.com/natsdelay/natsdelay/keys"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// Field numbers of StoredMessage and Header, as in storedmessage.proto.
const (
	fieldSubject       protowire.Number = 1
	fieldPayload       protowire.Number = 2
	fieldHeaders       protowire.Number = 3
	fieldEnqueuedAtNs  protowire.Number = 4
	fieldFireAtNs      protowire.Number = 5
	fieldTTLNs         protowire.Number = 6
	fieldExpireAtNs    protowire.Number = 7
	fieldClientID      protowire.Number = 8
	fieldAckPolicy     protowire.Number = 9
	fieldMaxDeliver    protowire.Number = 10
	fieldAttempt       protowire.Number = 11
	fieldEventID       protowire.Number = 12
	fieldRecurrence    protowire.Number = 13
	fieldMovedBy       protowire.Number = 14
	fieldWrittenOnce   protowire.Number = 15
	fieldDebounceFirst protowire.Number = 20
	fieldDebounceMax   protowire.Number = 21
	fieldThrottle      protowire.Number = 22

	fieldHeaderName   protowire.Number = 1
	fieldHeaderValues protowire.Number = 2
)

// appendMessage appends the wire encoding of m with its event id set to
// eventID and its written_once to once to dst: the same bytes as
// proto.Marshal, fields in number order and unknown fields last. Taking
// the id and the flag separately lets Apply store the key's id without
// writing to a message its caller may be reading, and leaves whether a
// key was written once to the repository, never to a caller's copy.
//
// It exists because the profile of Schedule showed the reflection-driven
// proto.Marshal costing about as much as the engine's commit of a batch to
// its memtable. A test checks it against proto.Marshal and fails when the
// schema gains a field this function does not know.
//
// It returns an error wrapping ErrInvalidMessage for a string that is not
// UTF-8, which proto3 refuses.
func appendMessage(dst []byte, m *StoredMessage, eventID uint64, once bool) ([]byte, error) {
	var err error
	if dst, err = appendString(dst, fieldSubject, "subject", m.Subject); err != nil {
		return dst, err
	}
	if len(m.Payload) > 0 {
		dst = protowire.AppendTag(dst, fieldPayload, protowire.BytesType)
		dst = protowire.AppendBytes(dst, m.Payload)
	}
	for _, h := range m.Headers {
		dst = protowire.AppendTag(dst, fieldHeaders, protowire.BytesType)
		dst = protowire.AppendVarint(dst, uint64(headerSize(h)))
		if h == nil {
			continue // encoded as an empty header, as proto.Marshal does
		}
		if dst, err = appendString(dst, fieldHeaderName, "header name", h.GetName()); err != nil {
			return dst, err
		}
		for _, v := range h.GetValues() {
			if !utf8.ValidString(v) {
				return dst, fmt.Errorf("%w: header %q value %q is not valid UTF-8", ErrInvalidMessage, keys.Clip(h.GetName()), keys.Clip(v))
			}
			dst = protowire.AppendTag(dst, fieldHeaderValues, protowire.BytesType)
			dst = protowire.AppendString(dst, v)
		}
		dst = append(dst, h.unknownFields...)
	}
	dst = appendVarint(dst, fieldEnqueuedAtNs, uint64(m.EnqueuedAtNs))
	dst = appendVarint(dst, fieldFireAtNs, uint64(m.FireAtNs))
	dst = appendVarint(dst, fieldTTLNs, uint64(m.TtlNs))
	dst = appendVarint(dst, fieldExpireAtNs, uint64(m.ExpireAtNs))
	if dst, err = appendString(dst, fieldClientID, "client id", m.ClientId); err != nil {
		return dst, err
	}
	// An enum is an int32, sign-extended to 64 bits on the wire.
	dst = appendVarint(dst, fieldAckPolicy, uint64(int64(m.AckPolicy)))
	dst = appendVarint(dst, fieldMaxDeliver, uint64(m.MaxDeliver))
	dst = appendVarint(dst, fieldAttempt, uint64(m.Attempt))
	dst = appendVarint(dst, fieldEventID, eventID)
	if m.Recurrence != nil {
		// Occurrences of recurring schedules are few next to one-off
		// messages, so the reflection-driven encoding is fine here.
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m.Recurrence)
		if err != nil {
			return dst, fmt.Errorf("%w: recurrence: %w", ErrInvalidMessage, err)
		}
		dst = protowire.AppendTag(dst, fieldRecurrence, protowire.BytesType)
		dst = protowire.AppendBytes(dst, b)
	}
	if dst, err = appendString(dst, fieldMovedBy, "moved by", m.MovedBy); err != nil {
		return dst, err
	}
	if once {
		dst = appendVarint(dst, fieldWrittenOnce, 1)
	}
	dst = appendVarint(dst, fieldDebounceFirst, uint64(m.DebounceFirstNs))
	dst = appendVarint(dst, fieldDebounceMax, uint64(m.DebounceMaxNs))
	dst = appendVarint(dst, fieldThrottle, uint64(m.ThrottleNs))
	return append(dst, m.unknownFields...), nil
}

// appendVarint appends a varint field unless it is zero, which proto3 leaves
// out.
func appendVarint(dst []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return dst
	}
	dst = protowire.AppendTag(dst, num, protowire.VarintType)
	return protowire.AppendVarint(dst, v)
}

// appendString appends a string field unless it is empty; what names it in
// the error for a string that is not UTF-8.
func appendString(dst []byte, num protowire.Number, what, s string) ([]byte, error) {
	if s == "" {
		return dst, nil
	}
	if !utf8.ValidString(s) {
		return dst, fmt.Errorf("%w: %s %q is not valid UTF-8", ErrInvalidMessage, what, keys.Clip(s))
	}
	dst = protowire.AppendTag(dst, num, protowire.BytesType)
	return protowire.AppendString(dst, s), nil
}

// headerSize is the encoded size of h without its own tag and length.
func headerSize(h *Header) int {
	if h == nil {
		return 0
	}
	n := 0
	if name := h.GetName(); name != "" {
		n += protowire.SizeTag(fieldHeaderName) + protowire.SizeBytes(len(name))
	}
	for _, v := range h.GetValues() {
		n += protowire.SizeTag(fieldHeaderValues) + protowire.SizeBytes(len(v))
	}
	return n + len(h.unknownFields)
}
