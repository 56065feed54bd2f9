package delaystore_test

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/keys"
)

// storedValue decodes the value stored under k, as the store holds it.
func storedValue(tb testing.TB, s delaystore.Store, k keys.Key) *delaystore.StoredMessage {
	tb.Helper()
	v, err := s.Get(k[:])
	if err != nil {
		tb.Fatalf("read %v: %v", k, err)
	}
	var m delaystore.StoredMessage
	if err := proto.Unmarshal(v, &m); err != nil {
		tb.Fatal(err)
	}
	return &m
}

// setIndexVersion records index-version v in s, as a version that knows
// no later one leaves it.
func setIndexVersion(tb testing.TB, s delaystore.Store, v uint64) {
	tb.Helper()
	b := s.NewBatch()
	defer b.Close()
	if err := b.Set([]byte("metadata/event-repo/index-version"), binary.BigEndian.AppendUint64(nil, v)); err != nil {
		tb.Fatal(err)
	}
	if err := b.Commit(delaystore.Sync); err != nil {
		tb.Fatal(err)
	}
}

// TestRepository_PlannedInPlace_StoredAsWritten checks that planning an
// occurrence that holds its successor's time leaves its stored value as
// it was (not planned, its Delay-Id, written once) while every read of it
// (Get, a scan, Check) sees it planned, without its Delay-Id, with its
// successor's time, and that a schedule edit, a second plan and a move of
// it are refused as for one stored planned; and that its delete leaves
// the entries that moved to its successor, on every engine.
func TestRepository_PlannedInPlace_StoredAsWritten(t *testing.T) {
	forEachEngine(t, false, func(t *testing.T, e engine) {
		s := e.open(t, t.TempDir())
		r := openRepo(t, s, delaystore.RepositoryConfig{})
		m := occurrence("named", "job", t0, 1)
		m.Recurrence.NextNs = t0 + 1e9
		k := schedule(t, r, m)[0].Key
		plans, res, err := r.AdvanceEach([]keys.Key{k}, crashPlanner, delaystore.Sync)
		if err != nil || len(res) != 1 || res[0].Err != nil {
			t.Fatalf("AdvanceEach: %v, %v", res, err)
		}
		next := res[0].Next
		if st := storedValue(t, s, k); st.Recurrence.Planned || st.ClientId != "job" || !st.WrittenOnce {
			t.Fatalf("stored after planning in place: planned %v, id %q, written once %v; want as written", st.Recurrence.Planned, st.ClientId, st.WrittenOnce)
		}
		if c := plans[0].Cur; !c.WrittenOnce || c.ClientId != "" {
			t.Fatalf("the plan's copy: written once %v, id %q; want written once, no id", c.WrittenOnce, c.ClientId)
		}
		wantPlanned := func(how string, got *delaystore.StoredMessage) {
			t.Helper()
			if !got.Recurrence.Planned || got.Recurrence.NextNs != t0+1e9 || got.ClientId != "" {
				t.Fatalf("%s reads planned %v, next %d, id %q; want planned, next %d, no id", how, got.Recurrence.Planned, got.Recurrence.NextNs, got.ClientId, t0+1e9)
			}
		}
		got, err := r.Get(k)
		if err != nil {
			t.Fatal(err)
		}
		wantPlanned("Get", got)
		if err := r.ScanTopic(keys.TopicHash("named"), nil, nil, func(sk keys.Key, sm *delaystore.StoredMessage) bool {
			if sk == k {
				wantPlanned("ScanTopic", sm)
			}
			return true
		}); err != nil {
			t.Fatal(err)
		}
		if err := r.Check(); err != nil {
			t.Fatalf("Check: %v", err)
		}
		if _, err := r.Rewrite(k, func(*delaystore.StoredMessage) error { return nil }, delaystore.Sync); !errors.Is(err, delaystore.ErrPlanned) {
			t.Fatalf("edit of the occurrence planned in place: %v, want ErrPlanned", err)
		}
		p, _ := crashPlanner(k, got)
		if err := advanceErr(t, r, p); !errors.Is(err, delaystore.ErrPlanned) {
			t.Fatalf("a second plan: %v, want ErrPlanned", err)
		}

		// Its delete, by key (read under the lock), leaves the schedule
		// and Delay-Id entries, which are its successor's.
		apply(t, r, delaystore.Op{Key: k})
		if nk, err := r.Lookup("named", "job"); err != nil || nk != next {
			t.Fatalf("Delay-Id after the delete points at %v (%v), want the successor %v", nk, err, next)
		}
		refs, err := r.ScheduleRefs("", "", "", 10)
		if err != nil || len(refs) != 1 || refs[0].Key != next || r.Schedules() != 1 {
			t.Fatalf("schedule index after the delete %v (%v), count %d; want the successor %v", refs, err, r.Schedules(), next)
		}
		if err := r.Check(); err != nil {
			t.Fatalf("Check: %v", err)
		}
	})
}

// TestRepository_OpensStoreWithPlannedRewrites checks the upgrade from
// index-version 4, whose planning rewrote each occurrence as planned: a
// store it left (one occurrence stored planned, its successor and a
// schedule's last occurrence stored planned with its Delay-Id) opens,
// records index-version 5, and the occurrences stored planned stay
// planned, read as they are stored, and are refused a second plan; the
// successor is planned in turn.
func TestRepository_OpensStoreWithPlannedRewrites(t *testing.T) {
	forEachEngine(t, true, func(t *testing.T, e engine) {
		dir := t.TempDir()
		s := e.open(t, dir)
		r := openRepo(t, s, delaystore.RepositoryConfig{})
		// Neither holds the successor's time its plan gives (anon none,
		// last one it does not have), so both are rewritten as
		// index-version 4 rewrote every occurrence it planned.
		last := occurrence("last", "end", t0, 1)
		last.Recurrence.NextNs = t0 + 5e9
		first := schedule(t, r, occurrence("anon", "", t0, 1), last)
		ks := []keys.Key{first[0].Key, first[1].Key}
		_, res, err := r.AdvanceEach(ks, crashPlanner, delaystore.Sync)
		if err != nil || len(res) != 2 || res[0].Err != nil || res[1].Err != nil {
			t.Fatalf("AdvanceEach: %v, %v", res, err)
		}
		for _, k := range ks {
			if st := storedValue(t, s, k); !st.Recurrence.Planned || st.WrittenOnce {
				t.Fatalf("%s stored planned %v, written once %v; want rewritten as planned", st.Subject, st.Recurrence.Planned, st.WrittenOnce)
			}
		}
		r.Close()
		setIndexVersion(t, s, 4)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}

		s = e.open(t, dir)
		r = openRepo(t, s, delaystore.RepositoryConfig{})
		v, err := s.Get([]byte("metadata/event-repo/index-version"))
		if err != nil || binary.BigEndian.Uint64(v) != 5 {
			t.Fatalf("index-version %x (%v) after the open, want 5", v, err)
		}
		for i, k := range ks {
			m, err := r.Get(k)
			if err != nil {
				t.Fatal(err)
			}
			if wantID := []string{"", "end"}[i]; !m.Recurrence.Planned || m.ClientId != wantID {
				t.Fatalf("%s reads planned %v, id %q; want planned, id %q", m.Subject, m.Recurrence.Planned, m.ClientId, wantID)
			}
			p, _ := crashPlanner(k, m)
			if err := advanceErr(t, r, p); !errors.Is(err, delaystore.ErrPlanned) {
				t.Fatalf("a second plan of %s: %v, want ErrPlanned", m.Subject, err)
			}
		}
		if err := r.Check(); err != nil {
			t.Fatalf("Check: %v", err)
		}
		// The successor holds its own successor's time: planned in place.
		if _, res, err := r.AdvanceEach([]keys.Key{res[0].Next}, crashPlanner, delaystore.Sync); err != nil || len(res) != 1 || res[0].Err != nil {
			t.Fatalf("planning the successor: %v, %v", res, err)
		}
		if st := storedValue(t, s, res[0].Next); st.Recurrence.Planned {
			t.Fatal("the successor was rewritten by its plan")
		}
		if n := len(occurrenceKeys(t, r)); n != 1 || r.Schedules() != 1 {
			t.Fatalf("%d occurrences to plan, %d schedules; want 1, 1", n, r.Schedules())
		}
	})
}

// TestRepository_PlannedByIndex_KeepsEarlierVersionsOut checks that a
// store this version opens records index-version 5, newer than the 4 the
// version before it writes and opens at most, and that the check every
// version since index-version makes at open refuses a store newer than
// it knows with an error that says so: the version before would read an
// occurrence planned in place as still to plan and plan it again.
func TestRepository_PlannedByIndex_KeepsEarlierVersionsOut(t *testing.T) {
	s := newStore(t)
	r := openRepo(t, s, delaystore.RepositoryConfig{})
	r.Close()
	v, err := s.Get([]byte("metadata/event-repo/index-version"))
	if err != nil || binary.BigEndian.Uint64(v) != 5 {
		t.Fatalf("index-version %x (%v), want 5", v, err)
	}
	setIndexVersion(t, s, 6)
	_, err = delaystore.OpenRepository(s, delaystore.RepositoryConfig{})
	if !errors.Is(err, delaystore.ErrCorrupt) || !strings.Contains(err.Error(), "index version 6 is newer than this version knows (5)") {
		t.Fatalf("OpenRepository of index-version 6: %v, want a refusal that names both versions", err)
	}
}
