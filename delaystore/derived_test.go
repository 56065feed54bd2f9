package delaystore_test

import (
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/natsdelay/natsdelay/delaystore"
)

// everyFieldSet sets each field of m to a value other than its default,
// and every field of its message fields likewise, so that a copy that
// leaves one out is told from the original.
func everyFieldSet(t *testing.T, m protoreflect.Message) {
	t.Helper()
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		switch {
		case fd.IsList():
			l := m.Mutable(fd).List()
			if fd.Kind() == protoreflect.MessageKind {
				e := l.NewElement()
				everyFieldSet(t, e.Message())
				l.Append(e)
			} else {
				l.Append(valueOf(t, fd))
			}
		case fd.Kind() == protoreflect.MessageKind:
			everyFieldSet(t, m.Mutable(fd).Message())
		default:
			m.Set(fd, valueOf(t, fd))
		}
	}
}

func valueOf(t *testing.T, fd protoreflect.FieldDescriptor) protoreflect.Value {
	switch fd.Kind() {
	case protoreflect.StringKind:
		return protoreflect.ValueOfString("v" + string(fd.Name()))
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes([]byte("b" + string(fd.Name())))
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(true)
	case protoreflect.EnumKind:
		return protoreflect.ValueOfEnum(fd.Enum().Values().Get(fd.Enum().Values().Len() - 1).Number())
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(int32(fd.Number()) + 7)
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(int64(fd.Number()) + 7)
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(uint32(fd.Number()) + 7)
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(uint64(fd.Number()) + 7)
	}
	t.Fatalf("field %s: kind %v not covered by the test", fd.FullName(), fd.Kind())
	return protoreflect.Value{}
}

// Guarantee: a message derived for a plan holds every field of the one
// it came from (a field added to StoredMessage and not to Derived fails
// here), and its recurrence is its own: the planned form and the
// successor a plan makes from an occurrence change their recurrences, and
// must change neither the occurrence nor each other.
func TestStoredMessage_Derived(t *testing.T) {
	m := &delaystore.StoredMessage{}
	everyFieldSet(t, m.ProtoReflect())
	m.ProtoReflect().SetUnknown(protoreflect.RawFields{0xf8, 0x07, 0x01}) // field 127, varint 1
	orig := proto.Clone(m)

	d := m.Derived()
	if !proto.Equal(d, m) {
		t.Fatalf("derived %v\nwant %v", d, m)
	}
	if string(d.ProtoReflect().GetUnknown()) != string(m.ProtoReflect().GetUnknown()) {
		t.Fatal("derived message lost the unknown fields")
	}
	d.Recurrence.Seq++
	d.Recurrence.Planned = !d.Recurrence.Planned
	d.FireAtNs++
	if !proto.Equal(m, orig) {
		t.Fatalf("changing the derived message changed the original: %v\nwant %v", m, orig)
	}
	if (&delaystore.StoredMessage{}).Derived().Recurrence != nil {
		t.Fatal("a message without a recurrence derived one with a recurrence")
	}
}
