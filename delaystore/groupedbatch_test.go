package delaystore

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/natsdelay/natsdelay/keys"
)

// recordingBatch is a Batch that records each write it gets, in order.
type recordingBatch struct {
	ops       []string
	committed bool
	closed    bool
}

func (b *recordingBatch) write(op string, key []byte) error {
	switch {
	case b.closed:
		return ErrClosed
	case b.committed:
		return ErrBatchCommitted
	}
	b.ops = append(b.ops, fmt.Sprintf("%s %s", op, key))
	return nil
}

func (b *recordingBatch) Set(key, value []byte) error {
	return b.write("set", append(append(key[:len(key):len(key)], '='), value...))
}
func (b *recordingBatch) Delete(key []byte) error       { return b.write("del", key) }
func (b *recordingBatch) SingleDelete(key []byte) error { return b.write("sdel", key) }
func (b *recordingBatch) Len() int                      { return len(b.ops) }

func (b *recordingBatch) Commit(SyncMode) error {
	switch {
	case b.closed:
		return ErrClosed
	case b.committed:
		return ErrBatchCommitted
	}
	b.committed = true
	return nil
}

func (b *recordingBatch) Close() error { b.closed = true; return nil }

// TestGroupedBatch_EventKeysFirst_EachKindInOrder checks what the store's
// batch receives: every write of an event key (keys.Len bytes) as it is
// written, every other write at Commit after them, a run for each kind of
// key in the order the kinds were first written, each run in the order
// written, so that a key written twice keeps its last write; and that Len
// counts both.
func TestGroupedBatch_EventKeysFirst_EachKindInOrder(t *testing.T) {
	ev := func(c string) []byte { return []byte(strings.Repeat(c, keys.Len)) }
	md := func(k string) []byte { return []byte("metadata/event-repo/" + k) }
	rec := &recordingBatch{}
	var held heldRuns
	g := grouped(rec, &held)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(g.Set(ev("a"), []byte("1")))
	must(g.Set(md("due-at/a"), nil))
	must(g.Set(md("topic/s"), []byte("1")))
	must(g.SingleDelete(ev("b")))
	must(g.SingleDelete(md("due-at/b")))
	must(g.Set(md("pending"), []byte("7")))
	must(g.Delete(md("expiry/a")))
	must(g.Set(md("topic/s"), []byte("2")))
	must(g.Set(md("pending"), []byte("8")))
	must(g.Set(ev("a"), []byte("2")))
	if g.Len() != 10 {
		t.Fatalf("Len = %d before Commit, want 10", g.Len())
	}
	if len(rec.ops) != 3 {
		t.Fatalf("before Commit the store's batch has %q, want the 3 writes of event keys only", rec.ops)
	}
	must(g.Commit(Sync))
	want := []string{
		"set " + string(ev("a")) + "=1",
		"sdel " + string(ev("b")),
		"set " + string(ev("a")) + "=2",
		"set metadata/event-repo/due-at/a=",
		"sdel metadata/event-repo/due-at/b",
		"set metadata/event-repo/topic/s=1",
		"set metadata/event-repo/topic/s=2",
		"set metadata/event-repo/pending=7",
		"set metadata/event-repo/pending=8",
		"del metadata/event-repo/expiry/a",
	}
	if !slices.Equal(rec.ops, want) || !rec.committed {
		t.Fatalf("the store's batch got %q (committed %v), want %q", rec.ops, rec.committed, want)
	}
	if err := g.Set(md("late"), nil); !errors.Is(err, ErrBatchCommitted) {
		t.Fatalf("Set after Commit: %v, want ErrBatchCommitted", err)
	}
	if err := g.Commit(Sync); !errors.Is(err, ErrBatchCommitted) {
		t.Fatalf("second Commit: %v, want ErrBatchCommitted", err)
	}

	// The next batch reuses the runs, empty.
	rec2 := &recordingBatch{}
	g2 := grouped(rec2, &held)
	must(g2.Set(md("topic/t"), []byte("1")))
	must(g2.Commit(Sync))
	if want := []string{"set metadata/event-repo/topic/t=1"}; !slices.Equal(rec2.ops, want) {
		t.Fatalf("the next batch got %q, want %q", rec2.ops, want)
	}
}

// TestGroupedBatch_Close_DropsHeldWrites checks that a batch closed
// before Commit hands nothing it held to the store's batch, refuses later
// writes and commits, and that the scratch is reused empty.
func TestGroupedBatch_Close_DropsHeldWrites(t *testing.T) {
	rec := &recordingBatch{}
	var held heldRuns
	held.hold(heldSet, []byte("metadata/left/over/x"), nil) // from a batch before
	g := grouped(rec, &held)
	if err := g.Set([]byte("metadata/count"), []byte("1")); err != nil {
		t.Fatal(err)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if err := g.Set([]byte("metadata/count"), []byte("2")); !errors.Is(err, ErrClosed) {
		t.Fatalf("Set after Close: %v, want ErrClosed", err)
	}
	if err := g.Commit(Sync); !errors.Is(err, ErrClosed) {
		t.Fatalf("Commit after Close: %v, want ErrClosed", err)
	}
	if len(rec.ops) != 0 || rec.committed {
		t.Fatalf("the store's batch got %q (committed %v), want nothing", rec.ops, rec.committed)
	}
}

// failingBatch refuses every write of a key other than an event key.
type failingBatch struct{ recordingBatch }

func (b *failingBatch) Set(key, value []byte) error {
	if len(key) != keys.Len {
		return errors.New("refused")
	}
	return b.recordingBatch.Set(key, value)
}

// TestGroupedBatch_ReleaseFails_NeverCommits checks that a batch whose
// held writes the store's batch refuses at Commit returns the error and
// never commits the store's batch short of them, however often Commit is
// called again.
func TestGroupedBatch_ReleaseFails_NeverCommits(t *testing.T) {
	rec := &failingBatch{}
	var held heldRuns
	g := grouped(rec, &held)
	if err := g.Set([]byte("metadata/count"), []byte("1")); err != nil {
		t.Fatal(err)
	}
	if err := g.Commit(Sync); err == nil {
		t.Fatal("Commit succeeded with a held write refused")
	}
	if err := g.Commit(Sync); !errors.Is(err, ErrBatchCommitted) {
		t.Fatalf("second Commit: %v, want ErrBatchCommitted", err)
	}
	if rec.committed {
		t.Fatal("the store's batch was committed without its held writes")
	}
}
