package delaystore_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"google.golang.org/protobuf/proto"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/keys"
)

// crashPlanner plans occurrences as the dispatcher does: the occurrence
// as planned with its successor's time, and its successor one interval
// later, holding the time its own plan will give (one interval on);
// subject "last" has no successor (its Delay-Limit is reached). An
// occurrence that holds its successor's time is planned without a
// rewrite, one that does not (anon's first) is rewritten.
func crashPlanner(k keys.Key, m *delaystore.StoredMessage) (delaystore.Plan, bool) {
	cur := proto.Clone(m).(*delaystore.StoredMessage)
	cur.Recurrence.Planned = true
	p := delaystore.Plan{Key: k, Cur: cur}
	if m.Subject == "last" {
		return p, true
	}
	r := m.Recurrence
	cur.Recurrence.NextNs = r.OccurrenceNs + r.EveryNs
	next := proto.Clone(m).(*delaystore.StoredMessage)
	next.FireAtNs, next.EventId, next.Attempt = r.OccurrenceNs+r.EveryNs, 0, 0
	next.Recurrence.OccurrenceNs, next.Recurrence.Seq = r.OccurrenceNs+r.EveryNs, r.Seq+1
	next.Recurrence.Planned, next.Recurrence.NextNs = false, r.OccurrenceNs+2*r.EveryNs
	p.Next = next
	return p, true
}

// crashSchedules are the schedules of the crash tests: one with a
// Delay-Id, one without (named by its first tag), and one planned as its
// last occurrence. named's first occurrence holds its successor's time,
// as an occurrence its predecessor's plan stored does, and is planned in
// place; anon's does not, as a schedule's first, and is rewritten; last's
// has none, and is planned in place.
func crashSchedules() []*delaystore.StoredMessage {
	named := occurrence("named", "job", t0, 1)
	named.Recurrence.NextNs = t0 + 1e9
	return []*delaystore.StoredMessage{
		named,
		occurrence("anon", "", t0, 1),
		occurrence("last", "end", t0, 1),
	}
}

// crashEngine opens a store of one durable engine and takes a copy of it
// as a crash would leave it, at any moment, from inside a hook.
type crashEngine struct {
	name string
	// open opens the store that the repository under test writes.
	open func(t *testing.T) delaystore.Store
	// crash returns a function that opens a copy of the store as a
	// crash now would leave it: what was synced and nothing else.
	crash func(t *testing.T) func() delaystore.Store
}

func crashEngines() []crashEngine {
	var fs *vfs.MemFS
	var dir string
	return []crashEngine{
		{
			name: "pebble",
			open: func(t *testing.T) delaystore.Store {
				fs = vfs.NewCrashableMem()
				return openDisk(t, "/db", fs)
			},
			crash: func(t *testing.T) func() delaystore.Store {
				crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
				return func() delaystore.Store { return openDisk(t, "/db", crashed) }
			},
		},
		{
			name: "bolt",
			open: func(t *testing.T) delaystore.Store {
				dir = t.TempDir()
				return openBolt(t, dir)
			},
			crash: func(t *testing.T) func() delaystore.Store {
				// NB: bbolt commits a batch in one synced transaction
				// inside Commit; between commits the file is whole.
				b, err := os.ReadFile(filepath.Join(dir, "bolt.db"))
				if err != nil {
					t.Fatal(err)
				}
				to := t.TempDir()
				if err := os.WriteFile(filepath.Join(to, "bolt.db"), b, 0o600); err != nil {
					t.Fatal(err)
				}
				return func() delaystore.Store { return openBolt(t, to) }
			},
		},
	}
}

// TestRepository_Advance_CrashInsidePlanning checks what a crash inside a
// planning batch leaves, at each point of it (before its commit, after
// it), on each durable engine, and that planning on from there, as the
// dispatcher does after a restart, neither loses a schedule nor fires an
// occurrence twice: each planned time of a schedule is stored under one
// key only, the schedule index points at its newest occurrence, that one
// is the only one still to plan, and an occurrence planned before the
// crash is refused a second plan.
func TestRepository_Advance_CrashInsidePlanning(t *testing.T) {
	stages := map[delaystore.AdvanceStage]string{delaystore.AdvanceBeforeCommit: "before-commit", delaystore.AdvanceAfterCommit: "after-commit"}
	for _, e := range crashEngines() {
		for _, stage := range []delaystore.AdvanceStage{delaystore.AdvanceBeforeCommit, delaystore.AdvanceAfterCommit} {
			t.Run(e.name+"/"+stages[stage], func(t *testing.T) {
				var reopen func() delaystore.Store
				cfg := delaystore.RepositoryConfig{AdvanceHook: func(s delaystore.AdvanceStage) {
					if s == stage && reopen == nil {
						reopen = e.crash(t)
					}
				}}
				r := openRepo(t, e.open(t), cfg)
				first := schedule(t, r, crashSchedules()...)
				ks := []keys.Key{first[0].Key, first[1].Key, first[2].Key}
				if _, res, err := r.AdvanceEach(ks, crashPlanner, delaystore.Sync); err != nil || len(res) != 3 {
					t.Fatalf("AdvanceEach: %v, %v", res, err)
				}
				if reopen == nil {
					t.Fatal("the hook was not called at the stage")
				}
				r.Close()

				s2 := reopen()
				r2 := openRepo(t, s2, delaystore.RepositoryConfig{})
				committed := stage == delaystore.AdvanceAfterCommit
				checkCrashState(t, r2, s2, ks, committed)

				// The restart: the pass redelivers what is stored and
				// plans it first; the planner plans what the index of
				// occurrences holds. Both, so each meets the other.
				if _, res, err := r2.AdvanceEach(ks, crashPlanner, delaystore.Sync); err != nil || (committed && len(res) != 0) || (!committed && len(res) != 3) {
					t.Fatalf("planning again the first occurrences: %v, %v (committed before the crash: %v)", res, err, committed)
				}
				for _, k := range ks {
					m, err := r2.Get(k)
					if err != nil {
						t.Fatalf("occurrence %v gone after planning again: %v", k, err)
					}
					p, _ := crashPlanner(k, m)
					if err := advanceErr(t, r2, p); !errors.Is(err, delaystore.ErrPlanned) {
						t.Fatalf("a second plan of %s: %v, want ErrPlanned", m.Subject, err)
					}
				}
				checkCrashState(t, r2, s2, ks, true)
			})
		}
	}
}

// checkCrashState checks the store after the first occurrences under ks
// of crashSchedules were planned (planned) or not: every occurrence is
// stored once, and each schedule's newest is indexed and the only one
// still to plan.
func checkCrashState(t *testing.T, r *delaystore.Repository, s delaystore.Store, ks []keys.Key, planned bool) {
	t.Helper()
	byTime := map[string]map[int64]int{}
	for _, k := range eventKeys(t, s) {
		m, err := r.Get(k)
		if err != nil {
			t.Fatal(err)
		}
		if byTime[m.Subject] == nil {
			byTime[m.Subject] = map[int64]int{}
		}
		byTime[m.Subject][m.Recurrence.OccurrenceNs]++
	}
	want := map[string]map[int64]int{"named": {t0: 1}, "anon": {t0: 1}, "last": {t0: 1}}
	if planned {
		want["named"][t0+1e9], want["anon"][t0+1e9] = 1, 1
	}
	if fmt.Sprint(byTime) != fmt.Sprint(want) {
		t.Fatalf("occurrences stored, by subject and time: %v, want %v (planned %v)", byTime, want, planned)
	}

	var toPlan []string
	if err := r.ScanOccurrences(nil, ^uint64(0), func(k keys.Key) bool {
		m, err := r.Get(k)
		if err != nil {
			t.Fatal(err)
		}
		toPlan = append(toPlan, fmt.Sprintf("%s@%d", m.Subject, (m.Recurrence.OccurrenceNs-t0)/1e9))
		return true
	}); err != nil {
		t.Fatal(err)
	}
	slices.Sort(toPlan)
	wantToPlan := "[anon@0 last@0 named@0]"
	wantSchedules := uint64(3)
	if planned {
		wantToPlan, wantSchedules = "[anon@1 named@1]", 2
	}
	if fmt.Sprint(toPlan) != wantToPlan || r.Schedules() != wantSchedules {
		t.Fatalf("occurrences still to plan %v, schedules %d; want %s, %d", toPlan, r.Schedules(), wantToPlan, wantSchedules)
	}
	refs, err := r.ScheduleRefs("", "", "", 10)
	if err != nil {
		t.Fatal(err)
	}
	for _, ref := range refs {
		m, err := r.Get(ref.Key)
		if err != nil || m.Recurrence.Planned || m.Subject != ref.Subject {
			t.Fatalf("schedule %s/%s points at %v: %v, %v", ref.Subject, ref.Name, ref.Key, m, err)
		}
	}
	if k, err := r.Lookup("named", "job"); err != nil || (k == ks[0]) == planned {
		t.Fatalf("Delay-Id of named points at %v (%v); the first occurrence is %v, planned %v", k, err, ks[0], planned)
	}
	// What each first occurrence reads as: planned or not, by the index
	// of occurrences alone for named and last (stored as they were),
	// with its successor's time, and its Delay-Id only if it kept it.
	wantFirst := map[string]string{"named": "planned=false next=1000000000 id=job", "anon": "planned=false next=0 id=", "last": "planned=false next=0 id=end"}
	if planned {
		wantFirst = map[string]string{"named": "planned=true next=1000000000 id=", "anon": "planned=true next=1000000000 id=", "last": "planned=true next=0 id=end"}
	}
	for _, k := range ks {
		m, err := r.Get(k)
		if err != nil {
			t.Fatal(err)
		}
		next := m.Recurrence.NextNs
		if next != 0 {
			next -= t0
		}
		if got := fmt.Sprintf("planned=%v next=%d id=%s", m.Recurrence.Planned, next, m.ClientId); got != wantFirst[m.Subject] {
			t.Fatalf("first occurrence of %s reads %s, want %s", m.Subject, got, wantFirst[m.Subject])
		}
	}
	if k, err := r.Lookup("last", "end"); err != nil || k != ks[2] {
		t.Fatalf("Delay-Id of the last occurrence points at %v (%v), want %v", k, err, ks[2])
	}
}

// opCountingStore counts the operations of each batch it commits.
type opCountingStore struct {
	delaystore.Store
	// last and singles are the operations of the last batch committed,
	// and how many of them were single deletes.
	last, singles int
}

func (s *opCountingStore) NewBatch() delaystore.Batch {
	return &opCountingBatch{Batch: s.Store.NewBatch(), s: s}
}

type opCountingBatch struct {
	delaystore.Batch
	s       *opCountingStore
	singles int
}

func (b *opCountingBatch) SingleDelete(k []byte) error {
	b.singles++
	return b.Batch.SingleDelete(k)
}

func (b *opCountingBatch) Commit(sync delaystore.SyncMode) error {
	b.s.last, b.s.singles = b.Batch.Len(), b.singles
	return b.Batch.Commit(sync)
}

// TestRepository_Advance_KeysWrittenPerOccurrence pins how many keys a
// planning batch writes for each occurrence it plans, beyond the batch's
// own, so that a change to it is seen. An occurrence that holds its
// successor's time, as every one the planner stored does, is planned in
// place: with a successor and a Delay-Id, the successor, its due entry,
// its Delay-Id entry, the schedule entry moved to it (one write: the
// successor's entry overwrites the occurrence's), the index of
// occurrences' entries (the occurrence's removed, the successor's added)
// and the subject's pending count: seven. One that does not hold it (a
// schedule's first) is rewritten as planned too: eight. A batch writes
// three keys of its own: the last id, the pending total and the due
// count of the successors' second (one here, as all are due in the same
// second). The ACKs that delete the occurrences planned in place then
// write three keys each, the occurrence and its due entry with single
// deletes (written once, never rewritten); those of the rewritten ones
// with plain deletes.
func TestRepository_Advance_KeysWrittenPerOccurrence(t *testing.T) {
	for _, inPlace := range []bool{true, false} {
		t.Run(fmt.Sprintf("in-place=%v", inPlace), func(t *testing.T) {
			const n = 64
			st := &opCountingStore{Store: newStore(t)}
			r := openRepo(t, st, delaystore.RepositoryConfig{})
			var ms []*delaystore.StoredMessage
			for i := range n {
				m := occurrence(fmt.Sprintf("s%d", i), "job", t0, 1)
				if inPlace {
					m.Recurrence.NextNs = t0 + m.Recurrence.EveryNs
				}
				ms = append(ms, m)
			}
			var ks []keys.Key
			for _, s := range schedule(t, r, ms...) {
				ks = append(ks, s.Key)
			}
			if _, res, err := r.AdvanceEach(ks, crashPlanner, delaystore.Sync); err != nil || len(res) != n {
				t.Fatalf("AdvanceEach: %d planned, %v", len(res), err)
			}
			perOccurrence, perBatch := 7, 3
			if !inPlace {
				perOccurrence = 8
			}
			if got := st.last; got != n*perOccurrence+perBatch {
				t.Fatalf("a batch planning %d occurrences wrote %d keys, want %d a plan and %d for the batch", n, got, perOccurrence, perBatch)
			}
			// Their ACKs, as the dispatcher deletes an occurrence out
			// as planned (a Pending without a read): the occurrence and
			// its due entry deleted, the subject's count; for the batch,
			// the pending total and the due count of their second.
			var ops []delaystore.Op
			for _, k := range ks {
				m, err := r.Get(k)
				if err != nil || !m.Recurrence.Planned || m.ClientId != "" {
					t.Fatalf("%v reads %v (%v), want planned, its Delay-Id passed on", k, m, err)
				}
				ops = append(ops, delaystore.Op{Key: k, Pending: &delaystore.StoredMessage{Subject: m.Subject, WrittenOnce: m.WrittenOnce}})
			}
			apply(t, r, ops...)
			const perAck, perAckBatch = 3, 2
			if got := st.last; got != n*perAck+perAckBatch {
				t.Fatalf("a batch deleting %d planned occurrences wrote %d keys, want %d an occurrence and %d for the batch", n, got, perAck, perAckBatch)
			}
			wantSingles := 0
			if inPlace {
				wantSingles = 2 * n
			}
			if st.singles != wantSingles {
				t.Fatalf("the deletes were %d single deletes, want %d", st.singles, wantSingles)
			}
		})
	}
}

// sizingStore is a Store that can size batches (delaystore.BatchSizer):
// it records the size each batch asked for and the bytes of keys and
// values written to it.
type sizingStore struct {
	delaystore.Store
	asked, wrote int
	sized        bool
}

func (s *sizingStore) NewBatchSize(size int) delaystore.Batch {
	s.asked, s.wrote, s.sized = size, 0, true
	return &sizingBatch{Batch: s.Store.(delaystore.BatchSizer).NewBatchSize(size), s: s}
}

func (s *sizingStore) NewBatch() delaystore.Batch {
	s.asked, s.wrote, s.sized = 0, 0, false
	return &sizingBatch{Batch: s.Store.NewBatch(), s: s}
}

type sizingBatch struct {
	delaystore.Batch
	s *sizingStore
}

func (b *sizingBatch) Set(k, v []byte) error {
	b.s.wrote += len(k) + len(v)
	return b.Batch.Set(k, v)
}

func (b *sizingBatch) Delete(k []byte) error {
	b.s.wrote += len(k)
	return b.Batch.Delete(k)
}

// TestRepository_Advance_SizesItsBatch checks that a planning batch asks
// a store that can size batches for room enough for what it writes,
// and not for much more: with 128-byte payloads, at least the keys and
// values it writes and at most twice as much, through AdvanceEach and
// Advance.
func TestRepository_Advance_SizesItsBatch(t *testing.T) {
	const n = 256
	st := &sizingStore{Store: newStore(t)}
	r := openRepo(t, st, delaystore.RepositoryConfig{})
	var ms []*delaystore.StoredMessage
	for i := range n {
		m := occurrence(fmt.Sprintf("subject.%d", i), "", t0, 1)
		m.Payload = make([]byte, 128)
		ms = append(ms, m)
	}
	var ks []keys.Key
	for _, s := range schedule(t, r, ms...) {
		ks = append(ks, s.Key)
	}
	check := func(what string) {
		t.Helper()
		t.Logf("%s: asked for %d bytes, wrote %d", what, st.asked, st.wrote)
		if !st.sized || st.asked < st.wrote || st.asked > 2*st.wrote {
			t.Fatalf("%s: asked for room for %d bytes (sized: %v), wrote %d; want at least that and at most twice", what, st.asked, st.sized, st.wrote)
		}
	}
	_, res, err := r.AdvanceEach(ks, planNext, delaystore.Sync)
	if err != nil || len(res) != n {
		t.Fatalf("AdvanceEach: %d planned, %v", len(res), err)
	}
	check("AdvanceEach")

	var plans []delaystore.Plan
	for _, p := range res {
		m, err := r.Get(p.Next)
		if err != nil {
			t.Fatal(err)
		}
		plan, _ := planNext(p.Next, m)
		plan.Key = p.Next
		plans = append(plans, plan)
	}
	if _, err := r.Advance(plans, delaystore.Sync); err != nil {
		t.Fatal(err)
	}
	check("Advance")
}
