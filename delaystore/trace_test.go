package delaystore_test

import (
	"encoding/hex"
	"testing"

	"github.com/natsdelay/natsdelay/delaystore"
)

// TestTraceIDOf_W3CTraceParent checks the reading of a traceparent as W3C
// Trace Context defines it: a trace id only from a well-formed value, so
// that events and the console never show one a tracer would not take.
func TestTraceIDOf_W3CTraceParent(t *testing.T) {
	const id = "0af7651916cd43dd8448eb211c80319c"
	for _, tc := range []struct {
		name, v string
		ok      bool
	}{
		{"version 00", "00-" + id + "-b7ad6b7169203331-01", true},
		{"spaces around", " 00-" + id + "-b7ad6b7169203331-00 ", true},
		{"later version with a field", "01-" + id + "-b7ad6b7169203331-01-what", true},
		{"version 00 with a field", "00-" + id + "-b7ad6b7169203331-01-what", false},
		{"version ff", "ff-" + id + "-b7ad6b7169203331-01", false},
		{"uppercase", "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01", false},
		{"zero trace id", "00-00000000000000000000000000000000-b7ad6b7169203331-01", false},
		{"zero parent id", "00-" + id + "-0000000000000000-01", false},
		{"short", "00-" + id + "-b7ad6b716920333-01", false},
		{"not hex", "00-" + id + "-b7ad6b716920333x-01", false},
		{"empty", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := delaystore.TraceIDOf(tc.v)
			if ok != tc.ok {
				t.Fatalf("TraceIDOf(%q) ok = %v, want %v", tc.v, ok, tc.ok)
			}
			if ok && hex.EncodeToString(got[:]) != id {
				t.Errorf("TraceIDOf(%q) = %x, want %s", tc.v, got, id)
			}
		})
	}
}

// TestStoredMessage_TraceID_AnyCase checks that the stored traceparent is
// found whatever case the publisher wrote its name in.
func TestStoredMessage_TraceID_AnyCase(t *testing.T) {
	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	for _, name := range []string{"traceparent", "Traceparent", "TRACEPARENT"} {
		m := &delaystore.StoredMessage{Headers: []*delaystore.Header{{Name: "A", Values: []string{"1"}}, {Name: name, Values: []string{tp}}}}
		if got := m.TraceParent(); got != tp {
			t.Errorf("%s: TraceParent() = %q", name, got)
		}
		if got := m.TraceID(); hex.EncodeToString(got[:]) != tp[3:35] {
			t.Errorf("%s: TraceID() = %x", name, got)
		}
	}
	if got := (&delaystore.StoredMessage{}).TraceID(); got != ([16]byte{}) {
		t.Errorf("no header: TraceID() = %x", got)
	}
}
