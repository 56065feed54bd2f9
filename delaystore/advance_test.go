package delaystore_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/keys"
)

func occurrence(subject, id string, fireAtNs int64, seq uint64) *delaystore.StoredMessage {
	m := withID(msg(subject, fireAtNs), id)
	m.Recurrence = &delaystore.Recurrence{EveryNs: 1e9, Id: id, OccurrenceNs: fireAtNs, Seq: seq}
	return m
}

func advanceErr(tb testing.TB, r *delaystore.Repository, plans ...delaystore.Plan) error {
	tb.Helper()
	res, err := r.Advance(plans, delaystore.Sync)
	if err != nil {
		tb.Fatal(err)
	}
	return errors.Join(func() []error {
		var errs []error
		for _, p := range res {
			errs = append(errs, p.Err)
		}
		return errs
	}()...)
}

func advance(tb testing.TB, r *delaystore.Repository, p delaystore.Plan) delaystore.Planned {
	tb.Helper()
	res, err := r.Advance([]delaystore.Plan{p}, delaystore.Sync)
	if err != nil || res[0].Err != nil {
		tb.Fatalf("Advance: %v, %v", err, res)
	}
	return res[0]
}

// TestRepository_Advance_Batch checks that plans of several schedules go
// in one batch, and that one that cannot be carried out leaves the others
// be.
func TestRepository_Advance_Batch(t *testing.T) {
	r, _ := newRepo(t)
	s := schedule(t, r, occurrence("a", "x", t0, 1), occurrence("b", "y", t0, 1), occurrence("c", "z", t0, 1))
	var plans []delaystore.Plan
	for i, sub := range []string{"a", "b", "c"} {
		cur, _ := r.Get(s[i].Key)
		cur.Recurrence.Planned = true
		plans = append(plans, delaystore.Plan{Key: s[i].Key, Cur: cur, Next: occurrence(sub, cur.ClientId, t0+1e9, 2)})
	}
	if _, err := r.Apply([]delaystore.Op{{Key: s[1].Key}}, delaystore.Sync); err != nil {
		t.Fatal(err)
	}
	res, err := r.Advance(plans, delaystore.Sync)
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Err != nil || !errors.Is(res[1].Err, delaystore.ErrNotFound) || res[2].Err != nil {
		t.Fatalf("results %v", res)
	}
	if r.Pending() != 4 || r.Schedules() != 2 || r.LastID() != res[2].Next.EventID() {
		t.Fatalf("pending %d, schedules %d, last id %d; want 4, 2, %d", r.Pending(), r.Schedules(), r.LastID(), res[2].Next.EventID())
	}
}

// TestRepository_Advance_StoresSuccessorOnce checks that planning an
// occurrence stores its successor and marks it planned in one batch, moves
// the Delay-Id index to the successor, and refuses to plan it twice.
func TestRepository_Advance_StoresSuccessorOnce(t *testing.T) {
	r, _ := newRepo(t)
	s := schedule(t, r, occurrence("a", "job", t0, 1))
	k := s[0].Key

	cur, err := r.Get(k)
	if err != nil {
		t.Fatal(err)
	}
	cur.Recurrence.Planned, cur.Recurrence.NextNs = true, t0+1e9
	next := occurrence("a", "job", t0+1e9, 2)
	got := advance(t, r, delaystore.Plan{Key: k, Cur: cur, Next: next})
	if pendingFor(t, r, "a") != 2 {
		t.Fatalf("pending %d, want 2", pendingFor(t, r, "a"))
	}
	if lk, err := r.Lookup("a", "job"); err != nil || lk != got.Next {
		t.Fatalf("Lookup = %v, %v; want the successor %v", lk, err, got.Next)
	}
	stored, _ := r.Get(k)
	if !stored.Recurrence.Planned || stored.ClientId != "" {
		t.Fatalf("occurrence after Advance: %v", stored)
	}
	again := proto.Clone(stored).(*delaystore.StoredMessage)
	if err := advanceErr(t, r, delaystore.Plan{Key: k, Cur: again, Next: occurrence("a", "", t0+2e9, 2)}); !errors.Is(err, delaystore.ErrPlanned) {
		t.Fatalf("second Advance: %v, want ErrPlanned", err)
	}
	// Deleting the delivered occurrence leaves the successor's index entry.
	if _, err := r.Apply([]delaystore.Op{{Key: k}}, delaystore.Sync); err != nil {
		t.Fatal(err)
	}
	if lk, err := r.Lookup("a", "job"); err != nil || lk != got.Next {
		t.Fatalf("Lookup after the ACK = %v, %v; want the successor", lk, err)
	}
	if err := advanceErr(t, r, delaystore.Plan{Key: k, Cur: cur, Next: next}); !errors.Is(err, delaystore.ErrNotFound) {
		t.Fatalf("Advance of a deleted occurrence: %v, want ErrNotFound", err)
	}
}

// TestRepository_Advance_Drop checks that a skipped occurrence is deleted
// in the batch that stores its successor.
func TestRepository_Advance_Drop(t *testing.T) {
	r, _ := newRepo(t)
	s := schedule(t, r, occurrence("a", "job", t0, 1))
	k := s[0].Key
	cur, _ := r.Get(k)
	got := advance(t, r, delaystore.Plan{Key: k, Cur: cur, Drop: true, Next: occurrence("a", "job", t0+5e9, 2)})
	if _, err := r.Get(k); !errors.Is(err, delaystore.ErrNotFound) {
		t.Fatalf("skipped occurrence still there: %v", err)
	}
	if lk, err := r.Lookup("a", "job"); err != nil || lk != got.Next || pendingFor(t, r, "a") != 1 {
		t.Fatalf("Lookup = %v, %v, pending %d; want the successor alone", lk, err, pendingFor(t, r, "a"))
	}
}

// TestRepository_Schedules_Index checks that the schedule index holds one
// entry per schedule with an occurrence to plan, pointing at it, through
// scheduling, replacing, planning, the last occurrence and a reopen.
func TestRepository_Schedules_Index(t *testing.T) {
	r, st := newRepo(t)
	anon := occurrence("b", "", t0, 1)
	s := schedule(t, r, occurrence("a", "job", t0, 1), anon, occurrence("a", "other", t0, 1))
	if r.Schedules() != 3 {
		t.Fatalf("schedules %d, want 3", r.Schedules())
	}
	// Replacing by id keeps the count.
	s2 := schedule(t, r, occurrence("a", "job", t0+5, 1))
	if r.Schedules() != 3 {
		t.Fatalf("schedules after replace %d, want 3", r.Schedules())
	}
	refs, err := r.ScheduleRefs("a", "", "", 10)
	if err != nil || len(refs) != 2 || refs[0].Name != "job" || refs[0].Key != s2[0].Key || refs[1].Name != "other" {
		t.Fatalf("refs of a: %v, %v", refs, err)
	}
	all, _ := r.ScheduleRefs("", "a", "job", 10)
	if len(all) != 2 || all[0].Name != "other" || all[1].Subject != "b" || all[1].Name != s[1].Key.Tag() {
		t.Fatalf("refs after (a, job): %v", all)
	}

	// Planning moves the entry to the successor; the last removes it.
	cur, _ := r.Get(s2[0].Key)
	cur.Recurrence.Planned = true
	nx := advance(t, r, delaystore.Plan{Key: s2[0].Key, Cur: cur, Next: occurrence("a", "job", t0+1e9, 2)})
	if k, err := r.LookupSchedule("a", "job"); err != nil || k != nx.Next || r.Schedules() != 3 {
		t.Fatalf("after planning: %v, %v, %d schedules", k, err, r.Schedules())
	}
	last, _ := r.Get(s[1].Key)
	last.Recurrence.Planned = true
	advance(t, r, delaystore.Plan{Key: s[1].Key, Cur: last})
	if _, err := r.LookupSchedule("b", s[1].Key.Tag()); !errors.Is(err, delaystore.ErrNotFound) || r.Schedules() != 2 {
		t.Fatalf("after the last: %v, %d schedules", err, r.Schedules())
	}
	// Canceling the next occurrence ends the schedule.
	if _, err := r.Apply([]delaystore.Op{{Key: s[2].Key}}, delaystore.Sync); err != nil {
		t.Fatal(err)
	}
	if r.Schedules() != 1 {
		t.Fatalf("after cancel: %d schedules, want 1", r.Schedules())
	}
	r.Close()
	r2 := openRepo(t, st, delaystore.RepositoryConfig{})
	if r2.Schedules() != 1 {
		t.Fatalf("after reopen: %d schedules, want 1", r2.Schedules())
	}
}

// readCountingStore counts the reads of each key.
type readCountingStore struct {
	delaystore.Store
	mu    sync.Mutex
	reads map[string]int
}

func (s *readCountingStore) Get(key []byte) ([]byte, error) {
	s.mu.Lock()
	s.reads[string(key)]++
	s.mu.Unlock()
	return s.Store.Get(key)
}

func (s *readCountingStore) readsOf(k keys.Key) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reads[string(k[:])]
}

// TestRepository_AdvanceEach_ReadsOnce checks that AdvanceEach plans what
// its PlanFunc plans, from one read of each occurrence, in one batch, and
// skips keys with nothing pending, occurrences planned already, those the
// PlanFunc leaves be, and a plan that does not fit its occurrence.
func TestRepository_AdvanceEach_ReadsOnce(t *testing.T) {
	st := &readCountingStore{Store: newStore(t), reads: map[string]int{}}
	r := openRepo(t, st, delaystore.RepositoryConfig{})
	s := schedule(t, r, occurrence("a", "x", t0, 1), occurrence("b", "y", t0, 1), occurrence("c", "z", t0, 1), occurrence("d", "w", t0, 1))
	ks := []keys.Key{s[0].Key, s[1].Key, s[2].Key, s[3].Key}
	if _, err := r.Apply([]delaystore.Op{{Key: ks[1]}}, delaystore.Sync); err != nil {
		t.Fatal(err)
	}
	planned, _ := r.Get(ks[3])
	planned.Recurrence.Planned = true
	advance(t, r, delaystore.Plan{Key: ks[3], Cur: planned, Next: occurrence("d", "w", t0+1e9, 2)})
	// NB: reopened, so the occurrences are read from the store rather than
	// from what the repository kept of its own writes.
	r.Close()
	r = openRepo(t, st, delaystore.RepositoryConfig{})
	before := st.readsOf(ks[0])

	var asked []string
	plans, res, err := r.AdvanceEach(append(ks, keys.New(keys.TopicHash("e"), 1, 999)), func(k keys.Key, m *delaystore.StoredMessage) (delaystore.Plan, bool) {
		asked = append(asked, m.Subject)
		if m.Subject == "c" {
			return delaystore.Plan{}, false
		}
		cur := proto.Clone(m).(*delaystore.StoredMessage)
		cur.Recurrence.Planned = true
		return delaystore.Plan{Cur: cur, Next: occurrence(m.Subject, m.ClientId, t0+1e9, 2)}, true
	}, delaystore.Sync)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(asked) != "[a c]" {
		t.Fatalf("PlanFunc asked for %v, want [a c]: not the deleted, the planned or the missing one", asked)
	}
	if len(plans) != 1 || plans[0].Key != ks[0] || res[0].Err != nil || res[0].Next.TopicHash() != keys.TopicHash("a") {
		t.Fatalf("plans %v, results %v", plans, res)
	}
	if got := st.readsOf(ks[0]) - before; got != 1 {
		t.Fatalf("the occurrence was read %d times, want once", got)
	}
	if m, _ := r.Get(ks[0]); !m.Recurrence.Planned {
		t.Fatal("not planned")
	}
	if lk, err := r.Lookup("a", "x"); err != nil || lk != res[0].Next {
		t.Fatalf("Lookup = %v, %v; want the successor", lk, err)
	}

	// A plan that does not fit (another subject) is refused, nothing stored.
	pending := r.Pending()
	_, res, err = r.AdvanceEach(ks[2:3], func(k keys.Key, m *delaystore.StoredMessage) (delaystore.Plan, bool) {
		cur := proto.Clone(m).(*delaystore.StoredMessage)
		cur.Recurrence.Planned = true
		return delaystore.Plan{Cur: cur, Next: occurrence("other", m.ClientId, t0+1e9, 2)}, true
	}, delaystore.Sync)
	if err != nil || len(res) != 1 || !errors.Is(res[0].Err, delaystore.ErrInvalidMessage) || r.Pending() != pending {
		t.Fatalf("misfit plan: %v, %v; pending %d, want %d", res, err, r.Pending(), pending)
	}
}
