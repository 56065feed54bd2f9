package delaystore_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/keys"
)

// storedToPlan reads every message in the store and returns the keys of
// the occurrences of recurring schedules whose stored value says they are
// still to plan, in due order: what the index of occurrences must hold in
// a store none of whose occurrences was planned, and what a build of the
// index from a store of an earlier version finds (see planned.go).
func storedToPlan(tb testing.TB, s delaystore.Store) []keys.Key {
	tb.Helper()
	var out []keys.Key
	if err := s.Scan(delaystore.IterOptions{}, func(k, v []byte) bool {
		if len(k) != keys.Len {
			return true
		}
		var m delaystore.StoredMessage
		if err := proto.Unmarshal(v, &m); err != nil {
			tb.Fatalf("decode %x: %v", k, err)
		}
		if r := m.GetRecurrence(); r != nil && !r.Planned {
			out = append(out, keys.Key(k))
		}
		return true
	}); err != nil {
		tb.Fatal(err)
	}
	slices.SortFunc(out, delaystore.DueCompare)
	return out
}

// occurrencesToPlan reads every message through the repository and
// returns the keys of the occurrences of recurring schedules it reads as
// still to plan, in due order.
func occurrencesToPlan(tb testing.TB, r *delaystore.Repository) []keys.Key {
	tb.Helper()
	var out []keys.Key
	if err := r.ScanEvents(nil, nil, func(k keys.Key, m *delaystore.StoredMessage) bool {
		if rec := m.GetRecurrence(); rec != nil && !rec.Planned {
			out = append(out, k)
		}
		return true
	}); err != nil {
		tb.Fatal(err)
	}
	slices.SortFunc(out, delaystore.DueCompare)
	return out
}

// occurrenceKeys reads the index of occurrences whole, in its order.
func occurrenceKeys(tb testing.TB, r *delaystore.Repository) []keys.Key {
	tb.Helper()
	return indexKeys(tb, r.ScanOccurrences)
}

// wantOccurrenceIndexExact checks that the index of occurrences holds
// exactly the occurrences still to plan, in due order, and that it agrees
// with the schedule index and its count.
func wantOccurrenceIndexExact(tb testing.TB, r *delaystore.Repository, s delaystore.Store) {
	tb.Helper()
	want := occurrencesToPlan(tb, r)
	if got := occurrenceKeys(tb, r); !slices.Equal(got, want) {
		tb.Fatalf("index of occurrences %v,\nwant the occurrences still to plan %v", got, want)
	}
	refs, err := r.ScheduleRefs("", "", "", len(want)+10)
	if err != nil {
		tb.Fatal(err)
	}
	var byName []keys.Key
	for _, ref := range refs {
		byName = append(byName, ref.Key)
	}
	slices.SortFunc(byName, delaystore.DueCompare)
	if !slices.Equal(byName, want) || r.Schedules() != uint64(len(want)) {
		tb.Fatalf("schedule index %v (count %d), want the same occurrences %v", byName, r.Schedules(), want)
	}
}

// every is a recurring occurrence of subject at fireAtNs, named by id
// (its Delay-Id) when id is not empty.
func every(subject string, fireAtNs int64, id string) *delaystore.StoredMessage {
	m := msg(subject, fireAtNs)
	m.ClientId = id
	m.Recurrence = &delaystore.Recurrence{EveryNs: int64(time.Minute), Id: id, OccurrenceNs: fireAtNs, Seq: 1}
	return m
}

// planOf is the plan of the occurrence m, stored under k: m planned, and
// its successor a minute on (none when last).
func planOf(k keys.Key, m *delaystore.StoredMessage, drop, last bool) delaystore.Plan {
	cur := proto.Clone(m).(*delaystore.StoredMessage)
	cur.Recurrence.Planned = true
	p := delaystore.Plan{Key: k, Cur: cur, Drop: drop}
	if !last {
		next := proto.Clone(m).(*delaystore.StoredMessage)
		next.FireAtNs += int64(time.Minute)
		next.EventId = 0
		next.Recurrence.OccurrenceNs = next.FireAtNs
		next.Recurrence.Seq++
		p.Next = next
	}
	return p
}

// TestRepository_OccurrenceIndex checks that the index of occurrences
// holds exactly the occurrences still to plan through every write that
// stores, plans, replaces or deletes one (schedule, replace by Delay-Id
// either way, attempt rewrite, delete by key and with Pending, Advance
// with a successor, skipped, or last, AdvanceEach, deleting everything),
// on every engine, with a coarse time bucket too, and across a reopen:
// the planner finds every occurrence to plan ahead, and nothing else,
// from it alone.
func TestRepository_OccurrenceIndex(t *testing.T) {
	forEachEngine(t, false, func(t *testing.T, e engine) {
		for _, bucket := range []time.Duration{0, 2 * time.Minute} {
			t.Run(bucket.String(), func(t *testing.T) { testOccurrenceIndex(t, e, bucket) })
		}
	})
}

func testOccurrenceIndex(t *testing.T, e engine, bucket time.Duration) {
	dir := t.TempDir()
	s := e.open(t, dir)
	r := openRepo(t, s, delaystore.RepositoryConfig{TimeBucket: bucket})
	at := func(d time.Duration) int64 { return t0 + int64(d) }
	wantOccurrenceIndexExact(t, r, s)

	// One-shot messages are not indexed; occurrences are, with a Delay-Id
	// or without.
	got := schedule(t, r, msg("a", at(0)), every("rec.a", at(time.Second), "job"), every("rec.b", at(-time.Hour), ""),
		msg("b", at(time.Second)), every("rec.c", at(time.Hour), "job"), withID(msg("c", at(0)), "one"))
	wantOccurrenceIndexExact(t, r, s)
	if n := len(occurrenceKeys(t, r)); n != 3 {
		t.Fatalf("%d occurrences indexed, want 3", n)
	}

	// Replacing by Delay-Id: an occurrence by an occurrence, an occurrence
	// by a one-shot message, and a one-shot message by an occurrence.
	schedule(t, r, every("rec.a", at(2*time.Second), "job"))
	wantOccurrenceIndexExact(t, r, s)
	schedule(t, r, withID(msg("rec.c", at(time.Minute)), "job"))
	wantOccurrenceIndexExact(t, r, s)
	schedule(t, r, every("c", at(3*time.Second), "one"))
	wantOccurrenceIndexExact(t, r, s)

	// Advance: with a successor, skipped with a successor, and the last.
	keyOf := func(subject string) (keys.Key, *delaystore.StoredMessage) {
		t.Helper()
		var k keys.Key
		var m *delaystore.StoredMessage
		if err := r.ScanTopic(keys.TopicHash(subject), nil, nil, func(kk keys.Key, mm *delaystore.StoredMessage) bool {
			if mm.GetRecurrence() != nil && !mm.Recurrence.Planned {
				k, m = kk, mm
				return false
			}
			return true
		}); err != nil || m == nil {
			t.Fatalf("no occurrence to plan on %s: %v", subject, err)
		}
		return k, m
	}
	ka, ma := keyOf("rec.a")
	kb, mb := keyOf("rec.b")
	kc, mc := keyOf("c")
	res, err := r.Advance([]delaystore.Plan{planOf(ka, ma, false, false), planOf(kb, mb, true, false), planOf(kc, mc, false, true)}, delaystore.Sync)
	if err != nil {
		t.Fatalf("Advance: %v", err)
	}
	for i, p := range res {
		if p.Err != nil {
			t.Fatalf("Advance plan %d: %v", i, p.Err)
		}
	}
	wantOccurrenceIndexExact(t, r, s)

	// An attempt rewrite of a planned occurrence leaves the index be; one
	// that would unplan it, or plan one outside Advance, is dropped.
	planned, err := r.Get(ka)
	if err != nil {
		t.Fatal(err)
	}
	planned.Attempt = 2
	unplanned := proto.Clone(planned).(*delaystore.StoredMessage)
	unplanned.Recurrence.Planned = false
	ks, ms := keyOf("rec.a")
	sneaky := proto.Clone(ms).(*delaystore.StoredMessage)
	sneaky.Recurrence.Planned = true
	if applied := apply(t, r, delaystore.Op{Key: ka, Msg: planned}, delaystore.Op{Key: ka, Msg: unplanned}, delaystore.Op{Key: ks, Msg: sneaky}); !slices.Equal(applied, []bool{true, false, false}) {
		t.Fatalf("applied %v, want the attempt rewrite alone", applied)
	}
	wantOccurrenceIndexExact(t, r, s)

	// AdvanceEach, as the planner calls it.
	kb2, _ := keyOf("rec.b")
	if _, _, err := r.AdvanceEach([]keys.Key{kb2, got[0].Key}, func(k keys.Key, m *delaystore.StoredMessage) (delaystore.Plan, bool) {
		if m.GetRecurrence() == nil {
			return delaystore.Plan{}, false
		}
		return planOf(k, m, false, false), true
	}, delaystore.Sync); err != nil {
		t.Fatalf("AdvanceEach: %v", err)
	}
	wantOccurrenceIndexExact(t, r, s)

	// Deletes, by key and with Pending, as ACKs and expiry make them.
	ka2, ma2 := keyOf("rec.a")
	apply(t, r, delaystore.Op{Key: ka2}, delaystore.Op{Key: ka2}, delaystore.Op{Key: ka, Pending: planned})
	wantOccurrenceIndexExact(t, r, s)
	if _, err := r.LookupSchedule("rec.a", ma2.Recurrence.Name); !errors.Is(err, delaystore.ErrNotFound) {
		t.Fatalf("schedule rec.a after its occurrence was deleted: %v, want ErrNotFound", err)
	}

	if e.durable {
		r.Close()
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s = e.open(t, dir)
		r = openRepo(t, s, delaystore.RepositoryConfig{TimeBucket: bucket})
		wantOccurrenceIndexExact(t, r, s)
	}
	if len(occurrenceKeys(t, r)) == 0 {
		t.Fatal("no occurrence left to check deleting everything with")
	}

	// Everything deleted leaves no entry.
	var ops []delaystore.Op
	for _, k := range pendingKeysDueOrder(t, s) {
		ops = append(ops, delaystore.Op{Key: k})
	}
	apply(t, r, ops...)
	wantOccurrenceIndexExact(t, r, s)
	if err := s.Scan(delaystore.IterOptions{LowerBound: []byte("metadata/event-repo/recur-at/"), UpperBound: []byte("metadata/event-repo/recur-at0")}, func(k, _ []byte) bool {
		t.Errorf("left in the store after deleting every message: %q", k)
		return true
	}); err != nil {
		t.Fatal(err)
	}
}

// TestRepository_ScanOccurrences_Bounds checks that ScanOccurrences reads
// from just after its cursor (which may be any event key, an occurrence's
// or not) and stops at its last bucket, in due order, yielding no one-shot
// message: the planner resumes where it stopped and reads only the
// occurrences within its look-ahead.
func TestRepository_ScanOccurrences_Bounds(t *testing.T) {
	cs := &countStore{Store: newStore(t)}
	r := openRepo(t, cs, delaystore.RepositoryConfig{})
	var msgs []*delaystore.StoredMessage
	for i := range 200 {
		msgs = append(msgs, msg(fmt.Sprintf("one.%d", i), t0+int64(i)*1e6))
	}
	msgs = append(msgs, every("b", t0+2e6, ""), every("a", t0, ""), every("b", t0, "x"), every("a", t0+1e6, "y"))
	got := schedule(t, r, msgs...)
	occ := []keys.Key{got[200].Key, got[201].Key, got[202].Key, got[203].Key}
	slices.SortFunc(occ, delaystore.DueCompare)
	cs.yielded.Store(0)
	if o := occurrenceKeys(t, r); !slices.Equal(o, occ) {
		t.Fatalf("index of occurrences %v, want %v", o, occ)
	}
	if n := cs.yielded.Load(); n != int64(len(occ)) {
		t.Fatalf("reading the index yielded %d keys, want the %d occurrences' entries alone", n, len(occ))
	}
	for i := range occ {
		var from []keys.Key
		if err := r.ScanOccurrences(&occ[i], ^uint64(0), func(k keys.Key) bool { from = append(from, k); return true }); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(from, occ[i+1:]) {
			t.Errorf("ScanOccurrences after %d: %v, want %v", i, from, occ[i+1:])
		}
	}
	// A cursor at a one-shot message's key, as the planner may hold from
	// a due index read: the occurrences after it in due order.
	var after []keys.Key
	if err := r.ScanOccurrences(&got[1].Key, ^uint64(0), func(k keys.Key) bool { after = append(after, k); return true }); err != nil {
		t.Fatal(err)
	}
	var want []keys.Key
	for _, k := range occ {
		if delaystore.DueCompare(k, got[1].Key) > 0 {
			want = append(want, k)
		}
	}
	if len(want) == 0 || len(want) == len(occ) || !slices.Equal(after, want) {
		t.Errorf("ScanOccurrences after a one-shot message at t0+1ms: %v, want %v", after, want)
	}
	var upTo []keys.Key
	if err := r.ScanOccurrences(nil, uint64(t0/1e6), func(k keys.Key) bool { upTo = append(upTo, k); return true }); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(upTo, occ[:2]) {
		t.Errorf("ScanOccurrences to bucket %d: %v, want the two due then %v", t0/1e6, upTo, occ[:2])
	}
}

// TestRepository_BuildsOccurrenceIndex checks that a store written before
// the index of occurrences (index-version 1: the due index alone), and one
// written before the due index too, open with it built from their
// messages, exact, across more than one build chunk, on every durable
// engine; that the next open reads no message to build it again; and
// that writes after the build keep it exact.
func TestRepository_BuildsOccurrenceIndex(t *testing.T) {
	forEachEngine(t, true, func(t *testing.T, e engine) {
		for _, before := range []string{"occurrence index", "due index"} {
			t.Run("before the "+before, func(t *testing.T) {
				dir := t.TempDir()
				s := e.open(t, dir)
				r := openRepo(t, s, delaystore.RepositoryConfig{})
				const n = 5000
				for i := 0; i < n; i += 500 {
					var msgs []*delaystore.StoredMessage
					for j := i; j < i+500; j++ {
						m := msg(fmt.Sprintf("s.%d", j%1300), t0+int64(j%97)*int64(time.Second)+int64(j))
						switch j % 7 {
						case 0:
							m = every(fmt.Sprintf("rec.%d", j), m.FireAtNs, "")
						case 1:
							m = every(fmt.Sprintf("rec.%d", j), m.FireAtNs, "id")
							m.Recurrence.Planned = true // stored planned: not indexed
						}
						msgs = append(msgs, m)
					}
					schedule(t, r, msgs...)
				}
				want := storedToPlan(t, s)
				if len(want) < n/8 {
					t.Fatalf("%d occurrences to plan, want over %d", len(want), n/8)
				}
				r.Close()
				stripOccurrenceIndex(t, s)
				if before == "due index" {
					stripDueIndex(t, s)
				}
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}

				s = e.open(t, dir)
				r = openRepo(t, s, delaystore.RepositoryConfig{})
				wantOccurrenceIndexExact(t, r, s)
				wantDueIndexExact(t, r, s, t0/1e6, t0/1e6+200_000)
				if got := occurrenceKeys(t, r); len(got) != len(want) {
					t.Fatalf("built %d entries, want %d", len(got), len(want))
				}
				schedule(t, r, every("new", t0, ""), msg("new", t0))
				r.Close()
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}

				// The next open finds index-version 2 and reads no message.
				cs := &countStore{Store: e.open(t, dir)}
				r = openRepo(t, cs, delaystore.RepositoryConfig{})
				if y := cs.yielded.Load(); y > 0 {
					t.Fatalf("the open after the build read %d keys, want none", y)
				}
				wantOccurrenceIndexExact(t, r, cs)
				if got := len(occurrenceKeys(t, r)); got != len(want)+1 {
					t.Fatalf("%d entries after a write, want %d", got, len(want)+1)
				}
			})
		}
	})
}

// stripOccurrenceIndex leaves s as the version before the index of
// occurrences left it: no entry, and index-version 1.
func stripOccurrenceIndex(tb testing.TB, s delaystore.Store) {
	tb.Helper()
	var drop [][]byte
	if err := s.Scan(delaystore.IterOptions{LowerBound: []byte("metadata/event-repo/recur-at/"), UpperBound: []byte("metadata/event-repo/recur-at0")}, func(k, _ []byte) bool {
		drop = append(drop, slices.Clone(k))
		return true
	}); err != nil {
		tb.Fatal(err)
	}
	if len(drop) == 0 {
		tb.Fatal("no index of occurrences to strip")
	}
	drop = append(drop, []byte(delaystore.VersionGuardKey))
	b := s.NewBatch()
	defer b.Close()
	for _, k := range drop {
		if err := b.Delete(k); err != nil {
			tb.Fatal(err)
		}
	}
	if err := b.Set([]byte("metadata/event-repo/index-version"), binary.BigEndian.AppendUint64(nil, 1)); err != nil {
		tb.Fatal(err)
	}
	if err := b.Commit(delaystore.Sync); err != nil {
		tb.Fatal(err)
	}
}

// TestRepository_NewerIndexVersionRefused checks that a store whose
// indexes are of a version this one does not know is refused at open,
// not written without indexes that version keeps.
func TestRepository_NewerIndexVersionRefused(t *testing.T) {
	s := newStore(t)
	r := openRepo(t, s, delaystore.RepositoryConfig{})
	r.Close()
	b := s.NewBatch()
	defer b.Close()
	if err := b.Set([]byte("metadata/event-repo/index-version"), binary.BigEndian.AppendUint64(nil, 6)); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(delaystore.Sync); err != nil {
		t.Fatal(err)
	}
	if _, err := delaystore.OpenRepository(s, delaystore.RepositoryConfig{}); !errors.Is(err, delaystore.ErrCorrupt) {
		t.Fatalf("OpenRepository with index-version 6: %v, want ErrCorrupt", err)
	}
}
