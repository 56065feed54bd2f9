package delaystore_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/keys"
)

// eventKeys reads every event key in the store, sorted in due order.
func pendingKeysDueOrder(tb testing.TB, s delaystore.Store) []keys.Key {
	tb.Helper()
	var out []keys.Key
	if err := s.Scan(delaystore.IterOptions{}, func(k, _ []byte) bool {
		if len(k) == keys.Len {
			out = append(out, keys.Key(k))
		}
		return true
	}); err != nil {
		tb.Fatal(err)
	}
	slices.SortFunc(out, delaystore.DueCompare)
	return out
}

// dueKeys reads the due index whole, in its order.
func dueKeys(tb testing.TB, r *delaystore.Repository) []keys.Key {
	tb.Helper()
	return indexKeys(tb, r.ScanDue)
}

// indexKeys reads a time-ordered index whole through scan (ScanDue or
// ScanOccurrences), in its order.
func indexKeys(tb testing.TB, scan func(*keys.Key, uint64, func(keys.Key) bool) error) []keys.Key {
	tb.Helper()
	var out []keys.Key
	if err := scan(nil, ^uint64(0), func(k keys.Key) bool {
		out = append(out, k)
		return true
	}); err != nil {
		tb.Fatalf("scan: %v", err)
	}
	return out
}

// wantDueIndexExact checks that the due index holds exactly the pending
// messages' keys, and that the due counts agree with a count of the keys
// themselves at each of times.
func wantDueIndexExact(tb testing.TB, r *delaystore.Repository, s delaystore.Store, times ...int64) {
	tb.Helper()
	want := pendingKeysDueOrder(tb, s)
	if got := dueKeys(tb, r); !slices.Equal(got, want) {
		tb.Fatalf("due index %v,\nwant the pending keys %v", got, want)
	}
	got, err := r.CountDueAll(times...)
	if err != nil {
		tb.Fatalf("CountDueAll: %v", err)
	}
	bucketMs := r.TimeBucket().Milliseconds()
	for i, at := range times {
		var n uint64
		for _, k := range want {
			if keys.BucketStartMs(k.Bucket(), bucketMs) <= at {
				n++
			}
		}
		if got[i] != n {
			tb.Errorf("CountDueAll at %d ms: %d, want %d (of %d pending)", at, got[i], n, len(want))
		}
	}
}

// TestRepository_DueIndex checks that the due index and the due counts
// follow every write that adds or removes a message (schedule, replace by
// client id, delete, update, advance of a recurring schedule) in the same
// batch, on every engine and across a reopen: the dispatcher finds due
// work, and INFO counts it, from them alone.
func TestRepository_DueIndex(t *testing.T) {
	forEachEngine(t, false, func(t *testing.T, e engine) {
		for _, bucket := range []time.Duration{0, 250 * time.Millisecond, 2 * time.Minute} {
			t.Run(bucket.String(), func(t *testing.T) { testDueIndex(t, e, bucket) })
		}
	})
}

func testDueIndex(t *testing.T, e engine, bucket time.Duration) {
	dir := t.TempDir()
	s := e.open(t, dir)
	r := openRepo(t, s, delaystore.RepositoryConfig{TimeBucket: bucket})
	ms := t0 / 1e6
	at := func(d time.Duration) int64 { return t0 + int64(d) }
	times := []int64{ms - 1, ms, ms + 1, ms + 999, ms + 1000, ms + 1500, ms + 60_000, ms + 3_600_000, ms + 86_400_000}
	wantDueIndexExact(t, r, s, times...)

	a := schedule(t, r, msg("a", at(0)), msg("a", at(time.Millisecond)), msg("b", at(1500*time.Millisecond)),
		msg("c", at(-time.Hour)), withID(msg("d", at(time.Minute)), "x"), msg("e", at(25*time.Hour)))
	wantDueIndexExact(t, r, s, times...)

	// Replacing by client id moves the entry to the new message.
	b := schedule(t, r, withID(msg("d", at(2*time.Second)), "x"))
	if !b[0].HasReplaced {
		t.Fatal("replacement did not replace")
	}
	wantDueIndexExact(t, r, s, times...)

	// An update keeps the key, and so the entry; deletes remove it, once.
	up := msg("a", at(0))
	up.Attempt = 3
	apply(t, r, delaystore.Op{Key: a[0].Key, Msg: up}, delaystore.Op{Key: a[1].Key}, delaystore.Op{Key: a[1].Key},
		delaystore.Op{Key: a[3].Key, Pending: &delaystore.StoredMessage{Subject: "c"}})
	wantDueIndexExact(t, r, s, times...)

	// A recurring schedule's successor is indexed with the occurrence.
	occ := msg("f", at(time.Second))
	occ.Recurrence = &delaystore.Recurrence{EveryNs: int64(time.Minute)}
	o := schedule(t, r, occ)
	cur := msg("f", at(time.Second))
	cur.Recurrence = &delaystore.Recurrence{EveryNs: int64(time.Minute), Planned: true}
	next := msg("f", at(time.Minute+time.Second))
	next.Recurrence = &delaystore.Recurrence{EveryNs: int64(time.Minute)}
	if _, err := r.Advance([]delaystore.Plan{{Key: o[0].Key, Cur: cur, Next: next}}, delaystore.Sync); err != nil {
		t.Fatalf("Advance: %v", err)
	}
	wantDueIndexExact(t, r, s, times...)

	if e.durable {
		r.Close()
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s = e.open(t, dir)
		r = openRepo(t, s, delaystore.RepositoryConfig{TimeBucket: bucket})
		wantDueIndexExact(t, r, s, times...)
	}

	// Everything deleted leaves no entry and no count.
	var ops []delaystore.Op
	for _, k := range pendingKeysDueOrder(t, s) {
		ops = append(ops, delaystore.Op{Key: k})
	}
	apply(t, r, ops...)
	wantDueIndexExact(t, r, s, times...)
	if r.Pending() != 0 || r.Subjects() != 0 {
		t.Fatalf("after deleting all: pending %d, subjects %d; want 0, 0", r.Pending(), r.Subjects())
	}
	var left []string
	if err := s.Scan(delaystore.IterOptions{LowerBound: []byte("metadata/event-repo/due")}, func(k, _ []byte) bool {
		left = append(left, string(k))
		return true
	}); err != nil {
		t.Fatal(err)
	}
	for _, k := range left {
		if len(k) < len("metadata/event-repo/due") || k[:len("metadata/event-repo/due")] != "metadata/event-repo/due" {
			break
		}
		t.Errorf("left in the store after deleting every message: %q", k)
	}
}

// TestRepository_ScanDue_Bounds checks that ScanDue reads from just after
// its cursor and stops at its last bucket, in (time, subject, publish)
// order: the dispatcher resumes from where it stopped and reads only what
// is due.
func TestRepository_ScanDue_Bounds(t *testing.T) {
	r, _ := newRepo(t)
	got := schedule(t, r, msg("b", t0+2e6), msg("a", t0), msg("b", t0), msg("a", t0+1e6), msg("a", t0))
	all := []keys.Key{got[1].Key, got[4].Key, got[2].Key, got[3].Key, got[0].Key}
	slices.SortFunc(all, delaystore.DueCompare)
	if d := dueKeys(t, r); !slices.Equal(d, all) {
		t.Fatalf("due index %v, want %v", d, all)
	}
	for i := range all {
		var from []keys.Key
		if err := r.ScanDue(&all[i], ^uint64(0), func(k keys.Key) bool { from = append(from, k); return true }); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(from, all[i+1:]) {
			t.Errorf("ScanDue after %d: %v, want %v", i, from, all[i+1:])
		}
	}
	var upTo []keys.Key
	if err := r.ScanDue(nil, uint64(t0/1e6), func(k keys.Key) bool { upTo = append(upTo, k); return true }); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(upTo, all[:3]) {
		t.Errorf("ScanDue to bucket %d: %v, want the three due then %v", t0/1e6, upTo, all[:3])
	}
}

// TestRepository_BuildsDueIndex checks that a store written without the
// due index, the due counts and the totals (by the version before them)
// opens with all of them built from its messages and registry, exact, on
// every durable engine, across more than one build chunk; and that the
// next open keeps them as they are.
func TestRepository_BuildsDueIndex(t *testing.T) {
	forEachEngine(t, true, func(t *testing.T, e engine) {
		dir := t.TempDir()
		s := e.open(t, dir)
		r := openRepo(t, s, delaystore.RepositoryConfig{})
		const n = 5000
		for i := 0; i < n; i += 500 {
			var msgs []*delaystore.StoredMessage
			for j := i; j < i+500; j++ {
				msgs = append(msgs, msg(fmt.Sprintf("s.%d", j%1300), t0+int64(j%97)*int64(time.Second)+int64(j)))
			}
			schedule(t, r, msgs...)
		}
		r.Close()
		stripDueIndex(t, s)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}

		s = e.open(t, dir)
		r = openRepo(t, s, delaystore.RepositoryConfig{})
		if got := len(pendingKeysDueOrder(t, s)); got != n {
			t.Fatalf("%d messages, want %d", got, n)
		}
		ms := t0 / 1e6
		wantDueIndexExact(t, r, s, ms, ms+30_000, ms+96_000, ms+200_000)
		if r.Pending() != n || r.Subjects() != 1300 {
			t.Fatalf("built totals: pending %d, subjects %d; want %d, 1300", r.Pending(), r.Subjects(), n)
		}
		// Writes after the build keep it exact, and so does a second open.
		schedule(t, r, msg("new", t0))
		r.Close()
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s = e.open(t, dir)
		r = openRepo(t, s, delaystore.RepositoryConfig{})
		wantDueIndexExact(t, r, s, ms, ms+96_000)
		if r.Pending() != n+1 || r.Subjects() != 1301 {
			t.Fatalf("after reopen: pending %d, subjects %d; want %d, 1301", r.Pending(), r.Subjects(), n+1)
		}
	})
}

// stripDueIndex deletes from s every key the version before the due index
// did not write, leaving what that version left on disk.
func stripDueIndex(tb testing.TB, s delaystore.Store) {
	tb.Helper()
	var drop [][]byte
	for _, p := range []string{"metadata/event-repo/due-at/", "metadata/event-repo/due-count/"} {
		end := []byte(p)
		end[len(end)-1]++
		if err := s.Scan(delaystore.IterOptions{LowerBound: []byte(p), UpperBound: end}, func(k, _ []byte) bool {
			drop = append(drop, slices.Clone(k))
			return true
		}); err != nil {
			tb.Fatal(err)
		}
	}
	if len(drop) == 0 {
		tb.Fatal("no due index to strip")
	}
	for _, k := range []string{"metadata/event-repo/pending", "metadata/event-repo/subjects", "metadata/event-repo/index-version", delaystore.VersionGuardKey} {
		drop = append(drop, []byte(k))
	}
	b := s.NewBatch()
	defer b.Close()
	for _, k := range drop {
		if err := b.Delete(k); err != nil {
			tb.Fatal(err)
		}
	}
	if err := b.Commit(delaystore.Sync); err != nil {
		tb.Fatal(err)
	}
}

// TestRepository_DueCounts_FailedCommit checks that a schedule, an apply
// and an advance whose commits fail leave no trace in the due counts of
// the next batch that commits: the counts stay exact, as the registry's do,
// and so does the index of occurrences.
func TestRepository_DueCounts_FailedCommit(t *testing.T) {
	fs := &failStore{Store: openDisk(t, t.TempDir(), nil)}
	r := openRepo(t, fs, delaystore.RepositoryConfig{})
	got := schedule(t, r, msg("a", t0), msg("b", t0+int64(time.Minute)))
	occ := msg("c", t0)
	occ.Recurrence = &delaystore.Recurrence{EveryNs: int64(time.Minute)}
	o := schedule(t, r, occ)

	fs.fail.Store(true)
	if _, err := r.Schedule([]*delaystore.StoredMessage{msg("a", t0), msg("d", t0+int64(time.Hour))}, delaystore.Sync); err == nil {
		t.Fatal("Schedule with a failing commit succeeded")
	}
	if _, err := r.Apply([]delaystore.Op{{Key: got[1].Key}}, delaystore.Sync); err == nil {
		t.Fatal("Apply with a failing commit succeeded")
	}
	cur := msg("c", t0)
	cur.Recurrence = &delaystore.Recurrence{EveryNs: int64(time.Minute), Planned: true}
	next := msg("c", t0+int64(time.Minute))
	next.Recurrence = &delaystore.Recurrence{EveryNs: int64(time.Minute)}
	if _, err := r.Advance([]delaystore.Plan{{Key: o[0].Key, Cur: cur, Next: next}}, delaystore.Sync); err == nil {
		t.Fatal("Advance with a failing commit succeeded")
	}
	fs.fail.Store(false)

	schedule(t, r, msg("e", t0+int64(time.Second)))
	ms := t0 / 1e6
	wantDueIndexExact(t, r, fs, ms, ms+1000, ms+60_000, ms+3_600_000)
	wantOccurrenceIndexExact(t, r, fs)
	if r.Pending() != 4 || r.Subjects() != 4 || r.Schedules() != 1 {
		t.Fatalf("after failed commits: pending %d, subjects %d, schedules %d; want 4, 4, 1", r.Pending(), r.Subjects(), r.Schedules())
	}
}
