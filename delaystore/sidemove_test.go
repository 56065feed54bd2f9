package delaystore_test

import (
	"errors"
	"testing"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/keys"
)

// The dead letters and duplicate records of one topic, read with
// ScanSideRecords, imported into another repository (twice: stored once)
// and dropped from the first: the other finds the dead letters by key,
// counts them, answers a resend as a duplicate, and passes Check; the
// first keeps only the other topic's.
func TestRepository_SideRecords_MoveWithTheirTopic(t *testing.T) {
	forEachEngine(t, false, func(t *testing.T, e engine) {
		src := openRepo(t, e.open(t, t.TempDir()), delaystore.RepositoryConfig{})
		dst := openRepo(t, e.open(t, t.TempDir()), delaystore.RepositoryConfig{})
		got := schedule(t, src, msg("a", t0+1), msg("a", t0+2), msg("b", t0+3))
		apply(t, src, delaystore.Op{Key: got[0].Key, Dead: dead("term", t0+5)}, delaystore.Op{Key: got[2].Key, Dead: dead("term", t0+6)})
		first := scheduleOnce(t, src, t0, once(withID(msg("a", t0+int64(window)*2), "x"), "m1", 1), once(msg("b", t0+int64(window)*2), "m2", 2))
		keepA := func(h uint64) bool { return h == keys.TopicHash("a") }

		var recs []delaystore.SideRecord
		if err := src.ScanSideRecords(nil, keepA, t0, func(r delaystore.SideRecord) bool { recs = append(recs, r); return true }); err != nil {
			t.Fatal(err)
		}
		// a's dead letter, and its records of the Delay-Id and the Nats-Msg-Id.
		if len(recs) != 3 {
			t.Fatalf("ScanSideRecords of a: %d records, want 3", len(recs))
		}
		var after []delaystore.SideRecord
		if err := src.ScanSideRecords(recs[0].Key, keepA, t0, func(r delaystore.SideRecord) bool { after = append(after, r); return true }); err != nil || len(after) != 2 {
			t.Fatalf("ScanSideRecords after the first: %d, %v; want the other 2", len(after), err)
		}
		for round, want := range []int{3, 0} {
			if n, err := dst.ImportSideRecords(recs, delaystore.Sync); err != nil || n != want {
				t.Fatalf("import round %d: %d, %v; want %d", round, n, err, want)
			}
		}
		if _, err := dst.GetDead(got[0].Key); err != nil {
			t.Fatalf("the dead letter of a at the other end: %v", err)
		}
		if n, err := dst.DeadFor("a"); err != nil || n != 1 || dst.Dead() != 1 {
			t.Fatalf("dead letters of a at the other end: %d (total %d), %v; want 1", n, dst.Dead(), err)
		}
		resend := scheduleOnce(t, dst, t0+1, once(withID(msg("a", t0+int64(window)*2), "x"), "m1", 1))
		if !resend[0].Duplicate || resend[0].Key != first[0].Key {
			t.Fatalf("a resend at the other end: %+v, want a duplicate of %v", resend[0], first[0].Key)
		}
		if err := dst.Check(); err != nil {
			t.Fatalf("Check at the other end: %v", err)
		}

		if n, err := src.DropSideRecords(keepA, 2, delaystore.Sync); err != nil || n != 2 {
			t.Fatalf("DropSideRecords, 2 at most: %d, %v", n, err)
		}
		if n, err := src.DropSideRecords(keepA, 2, delaystore.Sync); err != nil || n != 1 {
			t.Fatalf("DropSideRecords, the rest: %d, %v", n, err)
		}
		if _, err := src.GetDead(got[0].Key); !errors.Is(err, delaystore.ErrNotFound) {
			t.Fatalf("a's dead letter at the source after the drop: %v", err)
		}
		if _, err := src.GetDead(got[2].Key); err != nil || src.Dead() != 1 {
			t.Fatalf("b's dead letter at the source: %v, total %d; want kept", err, src.Dead())
		}
		if err := src.Check(); err != nil {
			t.Fatalf("Check at the source: %v", err)
		}
		if _, err := dst.ImportSideRecords([]delaystore.SideRecord{{Key: []byte("metadata/event-repo/topic/a"), Value: []byte{1}}}, delaystore.Sync); !errors.Is(err, delaystore.ErrInvalidMessage) {
			t.Fatalf("importing a key that is no such record: %v, want ErrInvalidMessage", err)
		}
	})
}
