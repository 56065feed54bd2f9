package delaystore

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// TestAppendMessage_KnowsEveryField fails when storedmessage.proto gains,
// loses or renumbers a field, so that appendMessage is updated with it and
// never silently drops data.
func TestAppendMessage_KnowsEveryField(t *testing.T) {
	tests := []struct {
		desc protoreflect.MessageDescriptor
		want map[string]protowire.Number
	}{
		{(&StoredMessage{}).ProtoReflect().Descriptor(), map[string]protowire.Number{
			"subject": fieldSubject, "payload": fieldPayload, "headers": fieldHeaders,
			"enqueued_at_ns": fieldEnqueuedAtNs, "fire_at_ns": fieldFireAtNs, "ttl_ns": fieldTTLNs,
			"expire_at_ns": fieldExpireAtNs, "client_id": fieldClientID, "ack_policy": fieldAckPolicy,
			"max_deliver": fieldMaxDeliver, "attempt": fieldAttempt, "event_id": fieldEventID,
			"recurrence":   fieldRecurrence,
			"moved_by":     fieldMovedBy,
			"written_once": fieldWrittenOnce, "debounce_first_ns": fieldDebounceFirst, "debounce_max_ns": fieldDebounceMax,
			"throttle_ns": fieldThrottle,
		}},
		{(&Header{}).ProtoReflect().Descriptor(), map[string]protowire.Number{
			"name": fieldHeaderName, "values": fieldHeaderValues,
		}},
	}
	for _, tt := range tests {
		fields := tt.desc.Fields()
		if fields.Len() != len(tt.want) {
			t.Errorf("%s has %d fields, appendMessage knows %d: update encode.go", tt.desc.Name(), fields.Len(), len(tt.want))
		}
		for i := 0; i < fields.Len(); i++ {
			f := fields.Get(i)
			if n, ok := tt.want[string(f.Name())]; !ok || n != f.Number() {
				t.Errorf("%s.%s is field %d, appendMessage has %d (known: %v): update encode.go", tt.desc.Name(), f.Name(), f.Number(), n, ok)
			}
		}
	}
}

// TestAppendMessage_MatchesProto checks that appendMessage writes exactly the
// bytes proto.Marshal does, over random messages with zero, negative and
// extreme values, empty and non-ASCII strings, nil headers and unknown
// fields.
func TestAppendMessage_MatchesProto(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	for i := 0; i < 2000; i++ {
		m := randomStoredMessage(rng)
		id := rng.Uint64() >> rng.IntN(64)
		once := rng.IntN(2) == 0
		m.EventId, m.WrittenOnce = id, once
		want, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		// appendMessage takes the id and the flag separately.
		m.EventId, m.WrittenOnce = 0, !once
		got, err := appendMessage([]byte("prefix"), m, id, once)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got[len("prefix"):], want) {
			t.Fatalf("message %d: appendMessage =\n%x\nproto.Marshal =\n%x", i, got[len("prefix"):], want)
		}
	}
}

// TestAppendMessage_RejectsBadUTF8 checks that every string field that
// proto3 requires to be UTF-8 is checked, as proto.Marshal does.
func TestAppendMessage_RejectsBadUTF8(t *testing.T) {
	tests := map[string]*StoredMessage{
		"subject":      {Subject: "a\xff"},
		"client id":    {Subject: "a", ClientId: "\xc3"},
		"header name":  {Subject: "a", Headers: []*Header{{Name: "\xff"}}},
		"header value": {Subject: "a", Headers: []*Header{{Name: "h", Values: []string{"ok", "\xff"}}}},
	}
	for name, m := range tests {
		t.Run(name, func(t *testing.T) {
			if _, err := proto.Marshal(m); err == nil {
				t.Fatalf("proto.Marshal accepts it; the test case is wrong")
			}
			if _, err := appendMessage(nil, m, 1, false); !errors.Is(err, ErrInvalidMessage) {
				t.Fatalf("appendMessage error = %v, want ErrInvalidMessage", err)
			}
		})
	}
}

// randomStoredMessage is a message with zero, negative and extreme
// values, empty and non-ASCII strings, nil headers and, now and then,
// unknown fields in it or in a header.
func randomStoredMessage(rng *rand.Rand) *StoredMessage {
	str := func() string {
		switch rng.IntN(4) {
		case 0:
			return ""
		case 1:
			return "héllo, 世界 ✓"
		}
		b := make([]byte, rng.IntN(300))
		for i := range b {
			b[i] = byte(' ' + rng.IntN(95))
		}
		return string(b)
	}
	i64 := func() int64 {
		switch rng.IntN(5) {
		case 0:
			return 0
		case 1:
			return -rng.Int64()
		case 2:
			return math.MinInt64
		}
		return rng.Int64()
	}
	u32 := func() uint32 {
		if rng.IntN(3) == 0 {
			return 0
		}
		return rng.Uint32()
	}
	m := &StoredMessage{
		Subject: str(), EnqueuedAtNs: i64(), FireAtNs: i64(), TtlNs: i64(), ExpireAtNs: i64(),
		ClientId: str(), AckPolicy: AckPolicy(rng.Int32N(3) - 1), MaxDeliver: u32(), Attempt: u32(), MovedBy: str(),
		DebounceFirstNs: i64(), DebounceMaxNs: i64(), ThrottleNs: i64(),
	}
	if rng.IntN(2) == 0 {
		m.Payload = []byte(str())
	}
	for n := rng.IntN(4); n > 0; n-- {
		h := &Header{Name: str()}
		for v := rng.IntN(3); v > 0; v-- {
			h.Values = append(h.Values, str()) // empty values are encoded too
		}
		if rng.IntN(5) == 0 {
			h.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 9, protowire.VarintType), 7))
		}
		m.Headers = append(m.Headers, h)
	}
	if rng.IntN(10) == 0 {
		m.Headers = append(m.Headers, nil) // marshals as an empty header
	}
	if rng.IntN(4) == 0 {
		m.Recurrence = &Recurrence{
			Cron: str(), EveryNs: i64(), Zone: str(), UntilNs: i64(), Limit: uint64(u32()),
			CatchUp: CatchUp(rng.Int32N(3)), Id: str(), OccurrenceNs: i64(), Seq: uint64(u32()),
			Planned: rng.IntN(2) == 0, NextNs: i64(), Behind: u32(), Skipped: uint64(u32()), Name: str(),
		}
	}
	if rng.IntN(5) == 0 {
		m.ProtoReflect().SetUnknown(protowire.AppendString(protowire.AppendTag(nil, 99, protowire.BytesType), "future"))
	}
	return m
}
