package delaystore

import (
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// decodesAsProto checks that unmarshalMessage(v) is what proto.Unmarshal
// makes of v: the same message, or an error for both.
func decodesAsProto(t *testing.T, what string, v []byte) {
	t.Helper()
	want := new(StoredMessage)
	wantErr := proto.Unmarshal(v, want)
	got, err := unmarshalMessage(v)
	switch {
	case (err != nil) != (wantErr != nil):
		t.Fatalf("%s: unmarshalMessage error %v, proto.Unmarshal %v\nvalue %x", what, err, wantErr, v)
	case err == nil && !proto.Equal(got, want):
		t.Fatalf("%s: unmarshalMessage =\n%v\nproto.Unmarshal =\n%v\nvalue %x", what, got, want, v)
	}
}

// TestUnmarshalMessage_MatchesProto checks unmarshalMessage against
// proto.Unmarshal over the values appendMessage writes of random
// messages, and that those without unknown fields take the fast path.
func TestUnmarshalMessage_MatchesProto(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 13))
	fast := 0
	for i := range 2000 {
		m := randomStoredMessage(rng)
		v, err := appendMessage(nil, m, rng.Uint64(), rng.IntN(2) == 0)
		if err != nil {
			t.Fatal(err)
		}
		decodesAsProto(t, "random message", v)
		regular := len(m.unknownFields) == 0
		for _, h := range m.Headers {
			regular = regular && (h == nil || len(h.unknownFields) == 0)
		}
		var sh messageShape
		if took := sh.measure(v); took != regular {
			t.Fatalf("message %d: fast path %v, want %v (unknown fields %v)", i, took, regular, !regular)
		}
		if regular {
			fast++
		}
	}
	if fast < 1000 {
		t.Fatalf("only %d of 2000 messages took the fast path", fast)
	}
}

// TestUnmarshalMessage_IrregularValues checks the values appendMessage
// never writes, which proto.Unmarshal decodes or refuses: unmarshalMessage
// must do as it does.
func TestUnmarshalMessage_IrregularValues(t *testing.T) {
	tag := func(b []byte, num protowire.Number, typ protowire.Type) []byte {
		return protowire.AppendTag(b, num, typ)
	}
	str := func(b []byte, num protowire.Number, s string) []byte {
		return protowire.AppendString(tag(b, num, protowire.BytesType), s)
	}
	vint := func(b []byte, num protowire.Number, x uint64) []byte {
		return protowire.AppendVarint(tag(b, num, protowire.VarintType), x)
	}
	header := func(parts ...[]byte) []byte {
		var h []byte
		for _, p := range parts {
			h = append(h, p...)
		}
		return protowire.AppendBytes(tag(nil, fieldHeaders, protowire.BytesType), h)
	}
	for name, v := range map[string][]byte{
		"empty":                          nil,
		"subject twice":                  str(str(nil, fieldSubject, "a"), fieldSubject, "b"),
		"attempt twice":                  vint(vint(nil, fieldAttempt, 1), fieldAttempt, 2),
		"subject as varint":              vint(nil, fieldSubject, 3),
		"attempt as bytes":               str(nil, fieldAttempt, "x"),
		"unknown field":                  str(str(nil, fieldSubject, "a"), 99, "x"),
		"field zero":                     vint(nil, 0, 1),
		"subject not UTF-8":              str(nil, fieldSubject, "\xff"),
		"client id not UTF-8":            str(nil, fieldClientID, "a\xc3"),
		"header name not UTF-8":          header(str(nil, fieldHeaderName, "\xff")),
		"header value not UTF-8":         header(str(nil, fieldHeaderName, "n"), str(nil, fieldHeaderValues, "\xfe")),
		"header name twice":              header(str(nil, fieldHeaderName, "a"), str(nil, fieldHeaderName, "b")),
		"header with an unknown field":   header(str(nil, fieldHeaderName, "a"), vint(nil, 5, 1)),
		"empty header":                   header(),
		"headers and values in order":    append(header(str(nil, fieldHeaderName, "a"), str(nil, fieldHeaderValues, "1"), str(nil, fieldHeaderValues, "2")), header(str(nil, fieldHeaderValues, "3"))...),
		"recurrence twice":               str(str(nil, fieldRecurrence, string(str(nil, 1, "* * * * *"))), fieldRecurrence, string(vint(nil, 2, 5))),
		"recurrence that does not parse": str(nil, fieldRecurrence, "\x0a\x05ab"),
		"truncated tag":                  {0x80},
		"truncated length":               tag(nil, fieldPayload, protowire.BytesType),
		"length past the end":            append(tag(nil, fieldPayload, protowire.BytesType), 9, 'a'),
		"negative ack policy":            vint(nil, fieldAckPolicy, uint64(1<<64-1)),
		"attempt past 32 bits":           vint(nil, fieldAttempt, 1<<40|7),
		"written once as 2":              vint(nil, fieldWrittenOnce, 2),
		"empty payload":                  str(nil, fieldPayload, ""),
	} {
		decodesAsProto(t, name, v)
	}
}

// Random damage to regular values: every byte changed, cut or doubled in
// turn, unmarshalMessage does as proto.Unmarshal does.
func TestUnmarshalMessage_DamagedValues(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 34))
	for range 200 {
		v, err := appendMessage(nil, randomStoredMessage(rng), rng.Uint64(), true)
		if err != nil {
			t.Fatal(err)
		}
		for range 20 {
			d := append([]byte(nil), v...)
			if len(d) == 0 {
				break
			}
			i := rng.IntN(len(d))
			switch rng.IntN(3) {
			case 0:
				d[i] = byte(rng.Uint32())
			case 1:
				d = d[:i]
			default:
				d = append(d[:i:i], v[i:]...)
				d = append(d, v[i:]...)
			}
			decodesAsProto(t, "damaged value", d)
		}
	}
}

// The decoded message owns its bytes: the value it was read from may be
// reused by the engine as soon as the read returns. And its headers'
// values share one array capped per header, so that an append to one
// header's values never writes over the next's.
func TestUnmarshalMessage_OwnsItsBytes(t *testing.T) {
	m := &StoredMessage{Subject: "orders.eu", Payload: []byte("payload"), ClientId: "c-1", Headers: []*Header{
		{Name: "A", Values: []string{"1", "2"}},
		{Name: "B", Values: []string{"3"}},
	}}
	v, err := appendMessage(nil, m, 7, true)
	if err != nil {
		t.Fatal(err)
	}
	got, err := unmarshalMessage(v)
	if err != nil {
		t.Fatal(err)
	}
	for i := range v {
		v[i] = 'x'
	}
	got.Headers[0].Values = append(got.Headers[0].Values, "appended")
	want := &StoredMessage{Subject: "orders.eu", Payload: []byte("payload"), ClientId: "c-1", EventId: 7, WrittenOnce: true, Headers: []*Header{
		{Name: "A", Values: []string{"1", "2", "appended"}},
		{Name: "B", Values: []string{"3"}},
	}}
	if !proto.Equal(got, want) {
		t.Fatalf("after the value was overwritten and a header's values grew:\n%v\nwant\n%v", got, want)
	}
}

// TestUnmarshalMessage_KnowsEveryField fails when StoredMessage gains a
// field, or a field changes its wire type, that messageWireType does not
// know: such a value would always take the slow path, or be misread.
func TestUnmarshalMessage_KnowsEveryField(t *testing.T) {
	fields := (&StoredMessage{}).ProtoReflect().Descriptor().Fields()
	for i := range fields.Len() {
		f := fields.Get(i)
		want := protowire.VarintType
		if f.Kind() == protoreflect.StringKind || f.Kind() == protoreflect.BytesKind || f.Kind() == protoreflect.MessageKind {
			want = protowire.BytesType
		}
		if got, known := messageWireType(f.Number()); !known || got != want {
			t.Errorf("StoredMessage.%s (%d): messageWireType gives %v (known %v), want %v: update decode.go", f.Name(), f.Number(), got, known, want)
		}
	}
}

// FuzzUnmarshalMessage checks unmarshalMessage against proto.Unmarshal on
// any value.
func FuzzUnmarshalMessage(f *testing.F) {
	rng := rand.New(rand.NewPCG(55, 89))
	for range 20 {
		v, err := appendMessage(nil, randomStoredMessage(rng), rng.Uint64(), true)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v []byte) { decodesAsProto(t, "fuzzed value", v) })
}

func BenchmarkUnmarshalMessage(b *testing.B) {
	m := &StoredMessage{Subject: "bench.e2e.17", Payload: make([]byte, 256), EnqueuedAtNs: 1 << 60, FireAtNs: 1<<60 + 5, EventId: 1 << 40, WrittenOnce: true,
		Headers: []*Header{{Name: "Bench-Seq", Values: []string{"123456"}}}}
	v, err := appendMessage(nil, m, m.EventId, true)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("proto.Unmarshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := proto.Unmarshal(v, new(StoredMessage)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("unmarshalMessage", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := unmarshalMessage(v); err != nil {
				b.Fatal(err)
			}
		}
	})
}
