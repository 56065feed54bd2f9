package delaystore

import (
	"errors"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// unmarshalMessage decodes v, a StoredMessage as appendMessage writes it,
// into a new message: the same message proto.Unmarshal makes, or the same
// error. It exists for the reads of the delivery path (the due scan reads
// back every message not handed off at ingest), where proto.Unmarshal's
// reflection and its allocation of each string, header and slice of
// values apart were most of the cost of a read. Here the strings of a
// message share one allocation (its payload has its own), and so do its
// headers and their values.
//
// Only a value as appendMessage writes it takes that path: any other
// (unknown fields, a field twice, a wrong wire type, invalid UTF-8, a
// truncated value) is decoded by proto.Unmarshal, which also reports the
// error. A test checks both against proto.Unmarshal, and fails when the
// schema gains a field this function does not know.
func unmarshalMessage(v []byte) (*StoredMessage, error) {
	var sh messageShape
	if sh.measure(v) {
		if m, ok := sh.decode(v); ok {
			return m, nil
		}
	}
	m := new(StoredMessage)
	if err := proto.Unmarshal(v, m); err != nil {
		return nil, err
	}
	return m, nil
}

// messageShape is what decode needs to know of a value before it fills
// a message: how many bytes of strings, headers and their values.
type messageShape struct {
	strBytes, headers, values int
	seen                      uint32 // bit n: field n (other than headers) was read
}

// errIrregular ends the fast decode of a value appendMessage did not
// write as it writes; proto.Unmarshal decodes it instead.
var errIrregular = errors.New("irregular value")

// measure walks v and reports whether it is a value decode takes: every
// field known, of its wire type, once (headers aside), and every string
// valid UTF-8.
func (sh *messageShape) measure(v []byte) bool {
	return walkMessage(v, func(num protowire.Number, b []byte, _ uint64) error {
		if num != fieldHeaders {
			if sh.seen&(1<<num) != 0 {
				return errIrregular
			}
			sh.seen |= 1 << num
		}
		switch num {
		case fieldSubject, fieldClientID, fieldMovedBy:
			if !utf8.Valid(b) {
				return errIrregular
			}
			sh.strBytes += len(b)
		case fieldHeaders:
			sh.headers++
			return walkHeader(b, func(_ protowire.Number, s []byte) error {
				if !utf8.Valid(s) {
					return errIrregular
				}
				sh.strBytes += len(s)
				return nil
			}, &sh.values)
		}
		return nil
	}) == nil
}

// decode fills a new message from v, which measure took, and reports
// whether it could: a recurrence that does not decode leaves the value
// to proto.Unmarshal.
func (sh *messageShape) decode(v []byte) (*StoredMessage, bool) {
	m := new(StoredMessage)
	// NB: grown once to hold every string, sb never moves what it
	// holds, and never changes what it wrote: each string is cut from
	// it as it is written, and all share its one array.
	var sb strings.Builder
	sb.Grow(sh.strBytes)
	addString := func(dst *string, b []byte) {
		start := sb.Len()
		sb.Write(b)
		*dst = sb.String()[start:]
	}
	var headers []Header
	var values []string
	if sh.headers > 0 {
		headers = make([]Header, sh.headers)
		m.Headers = make([]*Header, sh.headers)
		values = make([]string, sh.values)
	}
	h, val := 0, 0
	err := walkMessage(v, func(num protowire.Number, b []byte, x uint64) error {
		switch num {
		case fieldSubject:
			addString(&m.Subject, b)
		case fieldPayload:
			m.Payload = append(make([]byte, 0, len(b)), b...)
		case fieldHeaders:
			hd := &headers[h]
			m.Headers[h] = hd
			h++
			first := val
			_ = walkHeader(b, func(num protowire.Number, s []byte) error {
				if num == fieldHeaderName {
					addString(&hd.Name, s)
					return nil
				}
				addString(&values[val], s)
				val++
				return nil
			}, nil)
			if val > first {
				// Capped: an append to one header's values must not
				// write over the next header's.
				hd.Values = values[first:val:val]
			}
		case fieldClientID:
			addString(&m.ClientId, b)
		case fieldRecurrence:
			// Occurrences are few next to one-off messages: their
			// recurrence takes the reflection-driven decoding.
			m.Recurrence = new(Recurrence)
			return proto.Unmarshal(b, m.Recurrence)
		case fieldMovedBy:
			addString(&m.MovedBy, b)
		default:
			setVarintField(m, num, x)
		}
		return nil
	})
	if err != nil {
		return nil, false
	}
	return m, true
}

// setVarintField sets m's varint field num to x, as proto.Unmarshal
// reads it.
func setVarintField(m *StoredMessage, num protowire.Number, x uint64) {
	switch num {
	case fieldEnqueuedAtNs:
		m.EnqueuedAtNs = int64(x)
	case fieldFireAtNs:
		m.FireAtNs = int64(x)
	case fieldTTLNs:
		m.TtlNs = int64(x)
	case fieldExpireAtNs:
		m.ExpireAtNs = int64(x)
	case fieldAckPolicy:
		m.AckPolicy = AckPolicy(int32(x))
	case fieldMaxDeliver:
		m.MaxDeliver = uint32(x)
	case fieldAttempt:
		m.Attempt = uint32(x)
	case fieldEventID:
		m.EventId = x
	case fieldWrittenOnce:
		m.WrittenOnce = x != 0
	case fieldDebounceFirst:
		m.DebounceFirstNs = int64(x)
	case fieldDebounceMax:
		m.DebounceMaxNs = int64(x)
	case fieldThrottle:
		m.ThrottleNs = int64(x)
	}
}

// walkMessage calls field for each field of v: its number, its bytes
// for a length-delimited field, its value for a varint. It fails on a
// field unknown or of the wrong wire type, on what does not parse, and
// with field's error.
func walkMessage(v []byte, field func(num protowire.Number, b []byte, x uint64) error) error {
	for len(v) > 0 {
		num, typ, n := protowire.ConsumeTag(v)
		if n < 0 {
			return errIrregular
		}
		v = v[n:]
		want, known := messageWireType(num)
		if !known || typ != want {
			return errIrregular
		}
		var b []byte
		var x uint64
		if typ == protowire.BytesType {
			b, n = protowire.ConsumeBytes(v)
		} else {
			x, n = protowire.ConsumeVarint(v)
		}
		if n < 0 {
			return errIrregular
		}
		v = v[n:]
		if err := field(num, b, x); err != nil {
			return err
		}
	}
	return nil
}

// walkHeader calls str for the name and each value of the header h, and
// counts its values into values if not nil. It fails as walkMessage does.
func walkHeader(h []byte, str func(num protowire.Number, s []byte) error, values *int) error {
	named := false
	for len(h) > 0 {
		num, typ, n := protowire.ConsumeTag(h)
		if n < 0 || typ != protowire.BytesType || (num != fieldHeaderName && num != fieldHeaderValues) {
			return errIrregular
		}
		h = h[n:]
		s, n := protowire.ConsumeBytes(h)
		if n < 0 {
			return errIrregular
		}
		h = h[n:]
		if num == fieldHeaderName {
			if named {
				return errIrregular
			}
			named = true
		} else if values != nil {
			*values++
		}
		if err := str(num, s); err != nil {
			return err
		}
	}
	return nil
}

// messageWireType is the wire type of StoredMessage's field num, and
// whether it is a field of it.
func messageWireType(num protowire.Number) (protowire.Type, bool) {
	switch num {
	case fieldSubject, fieldPayload, fieldHeaders, fieldClientID, fieldRecurrence, fieldMovedBy:
		return protowire.BytesType, true
	case fieldEnqueuedAtNs, fieldFireAtNs, fieldTTLNs, fieldExpireAtNs, fieldAckPolicy,
		fieldMaxDeliver, fieldAttempt, fieldEventID, fieldWrittenOnce,
		fieldDebounceFirst, fieldDebounceMax, fieldThrottle:
		return protowire.VarintType, true
	}
	return 0, false
}
