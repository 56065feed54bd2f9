package delaystore_test

import (
	"fmt"
	"testing"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/keys"
)

// runsStore is a Store whose batches record, for the last one committed,
// the kind of each key written (kindOf) in the order the engine got them.
type runsStore struct {
	delaystore.Store
	last []string
}

func (s *runsStore) NewBatch() delaystore.Batch {
	return &runsBatch{Batch: s.Store.NewBatch(), s: s}
}

type runsBatch struct {
	delaystore.Batch
	s     *runsStore
	kinds []string
}

func (b *runsBatch) Set(k, v []byte) error {
	b.kinds = append(b.kinds, kindOf(k))
	return b.Batch.Set(k, v)
}

func (b *runsBatch) Delete(k []byte) error {
	b.kinds = append(b.kinds, kindOf(k))
	return b.Batch.Delete(k)
}

func (b *runsBatch) SingleDelete(k []byte) error {
	b.kinds = append(b.kinds, kindOf(k))
	return b.Batch.SingleDelete(k)
}

func (b *runsBatch) Commit(sync delaystore.SyncMode) error {
	b.s.last = b.kinds
	return b.Batch.Commit(sync)
}

// kindOf is "event" for an event key, else the key's first three
// segments ("metadata/event-repo/due-at/"), or the whole key if it has
// fewer.
func kindOf(k []byte) string {
	if len(k) == keys.Len {
		return "event"
	}
	s, n := string(k), 0
	for i := range len(s) {
		if s[i] == '/' {
			if n++; n == 3 {
				return s[:i+1]
			}
		}
	}
	return s
}

// inRuns reports whether kinds starts with its event keys, and holds each
// other kind in one run; and how many event keys and other kinds it has.
func inRuns(kinds []string) (ok bool, events, others int) {
	ended := map[string]bool{}
	ok = true
	for i, k := range kinds {
		if k == "event" {
			events++
			ok = ok && i == events-1
		}
		if i > 0 && kinds[i-1] != k {
			if ended[k] {
				ok = false
			}
			ended[kinds[i-1]] = true
			if k != "event" {
				others++
			}
		} else if i == 0 && k != "event" {
			others++
		}
	}
	return ok, events, others
}

// TestRepository_Batches_ReachTheEngineInRuns checks that the batches of
// the three writes that run for every message (a schedule, the planning of
// occurrences, the deletes of ACKs) reach the engine as the messages'
// writes, then a run for each kind of index entry and count: the order in
// which Pebble's memtable takes them cheaply (see groupedbatch.go). The
// messages carry a Delay-Id and an expiry, so that each batch writes index
// entries of several kinds.
func TestRepository_Batches_ReachTheEngineInRuns(t *testing.T) {
	st := &runsStore{Store: newStore(t)}
	r := openRepo(t, st, delaystore.RepositoryConfig{})
	check := func(what string, wantEvents int) {
		t.Helper()
		ok, events, others := inRuns(st.last)
		if !ok || events != wantEvents || others < 3 {
			t.Fatalf("%s: the engine got keys of kinds %q (%d event keys, %d runs of other kinds), want the %d event keys first, then each kind in one run", what, st.last, events, others, wantEvents)
		}
	}
	var ms []*delaystore.StoredMessage
	for i := range 8 {
		m := occurrence(fmt.Sprintf("s%d", i%3), fmt.Sprintf("job%d", i), t0, 1)
		m.ExpireAtNs = t0 + 3600e9
		ms = append(ms, m)
	}
	var ks []keys.Key
	for _, s := range schedule(t, r, ms...) {
		ks = append(ks, s.Key)
	}
	check("a schedule", len(ms))

	if _, res, err := r.AdvanceEach(ks, crashPlanner, delaystore.Sync); err != nil || len(res) != len(ks) {
		t.Fatalf("AdvanceEach: %d planned, %v", len(res), err)
	}
	check("a plan", 2*len(ks)) // each occurrence rewritten as planned, and its successor

	var ops []delaystore.Op
	for _, k := range ks {
		ops = append(ops, delaystore.Op{Key: k})
	}
	apply(t, r, ops...)
	check("the deletes", len(ks))
}
