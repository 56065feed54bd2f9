package integration_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/natsdelay/natsdelay/delaystore"
	storeengine "github.com/natsdelay/natsdelay/delaystore/engine"
	"github.com/natsdelay/natsdelay/keys"
)

// The checks and the setup here reach into the store itself, below the
// service. Every other test reads the service as a user does, over the
// API (see helpers_test.go); these cannot:
//
//   - checkCrashedStore reads what a process killed by SIGKILL left on
//     disk, before anything opens it again: which occurrence of each
//     recurring schedule is still to plan and which are planned, that
//     the schedule index points at the one to plan, and that the subject
//     registry's counts match the messages stored. These records are
//     storage, not wire: INFO shows only the counts, and only once a
//     service has opened the store and worked from them.
//   - preStore writes messages the way an older version, which did not
//     check them, could have; the service of this version refuses them at
//     ingest, so no API can put them there.

// preStore writes msgs into st directly, as an older version of the
// service that did not check them would have stored them.
func preStore(tb testing.TB, st delaystore.Store, msgs ...*delaystore.StoredMessage) {
	tb.Helper()
	repo, err := delaystore.OpenRepository(st, delaystore.RepositoryConfig{})
	if err != nil {
		tb.Fatalf("OpenRepository: %v", err)
	}
	if _, err := repo.Schedule(msgs, delaystore.Sync); err != nil {
		tb.Fatalf("Schedule: %v", err)
	}
	if err := repo.Close(); err != nil {
		tb.Fatalf("Repository.Close: %v", err)
	}
}

// checkCrashedStore opens the store a killed process left in dir and
// checks every schedule and count in it: each subject's schedule has
// exactly one occurrence still to plan, which the schedule index points
// at and its predecessor planned, no occurrence is stored twice, and none
// planned comes after it;
// the registry's pending counts equal the messages stored, and the
// schedule count equals the schedules. These are what the restarted
// service reports in INFO and works from.
func checkCrashedStore(t *testing.T, eng, dir string, subjects []string) {
	t.Helper()
	checkCrashedStoreOf(t, eng, dir, subjects, false)
}

// checkCrashedStoreOf is checkCrashedStore; edited says the schedules'
// specs were edited (SCHEDULE.EDIT), which replans the occurrence to plan
// without its predecessor, so that predecessor's next time is not
// checked against it.
func checkCrashedStoreOf(t *testing.T, eng, dir string, subjects []string, edited bool) {
	t.Helper()
	st, err := storeengine.Open(storeengine.Config{Engine: eng, Dir: dir})
	if err != nil {
		t.Fatalf("open the store after the kill: %v", err)
	}
	defer st.Close()
	repo, err := delaystore.OpenRepository(st, delaystore.RepositoryConfig{})
	if err != nil {
		t.Fatalf("open the repository after the kill: %v", err)
	}
	defer repo.Close()

	type occ struct {
		k keys.Key
		m *delaystore.StoredMessage
	}
	perSubject := map[string][]occ{}
	stored := 0
	var getErr error
	err = st.Scan(delaystore.IterOptions{}, func(k, _ []byte) bool {
		if len(k) != keys.Len {
			return true
		}
		ek, err := keys.Decode(k)
		if err != nil {
			getErr = err
			return false
		}
		m, err := repo.Get(ek)
		if err != nil {
			getErr = err
			return false
		}
		stored++
		perSubject[m.Subject] = append(perSubject[m.Subject], occ{ek, m})
		return true
	})
	if err = errors.Join(err, getErr); err != nil {
		t.Fatalf("scan the store after the kill: %v", err)
	}
	if got := repo.Pending(); got != uint64(stored) {
		t.Errorf("pending count %d after the kill, but %d messages stored", got, stored)
	}
	topics, err := repo.Topics()
	if err != nil {
		t.Fatalf("read the subject registry after the kill: %v", err)
	}
	for _, tp := range topics {
		if got := uint64(len(perSubject[tp.Subject])); tp.Pending != got {
			t.Errorf("%s: pending count %d after the kill, but %d messages stored", tp.Subject, tp.Pending, got)
		}
	}
	if got := repo.Schedules(); got != uint64(len(subjects)) {
		t.Errorf("schedule count %d after the kill, want %d", got, len(subjects))
	}
	refs, err := repo.ScheduleRefs("", "", "", 2*len(subjects)+1)
	if err != nil {
		t.Fatal(err)
	}
	if len(refs) != len(subjects) {
		t.Errorf("schedule index has %d entries after the kill, want %d: %v", len(refs), len(subjects), refs)
	}
	indexed := map[string]keys.Key{}
	for _, ref := range refs {
		indexed[ref.Subject] = ref.Key
	}
	for _, s := range subjects {
		var unplanned []occ
		seqs := map[uint64]bool{}
		var lastPlanned uint64
		for _, o := range perSubject[s] {
			rec := o.m.GetRecurrence()
			if seqs[rec.GetSeq()] {
				t.Errorf("%s after the kill: occurrence %d stored twice", s, rec.GetSeq())
			}
			seqs[rec.GetSeq()] = true
			if !rec.GetPlanned() {
				unplanned = append(unplanned, o)
				continue
			}
			lastPlanned = max(lastPlanned, rec.GetSeq())
			if o.m.ClientId != "" {
				t.Errorf("%s after the kill: planned occurrence %d kept client id %q", s, rec.GetSeq(), o.m.ClientId)
			}
		}
		if len(unplanned) != 1 {
			t.Errorf("%s after the kill: %d occurrences to plan, want 1", s, len(unplanned))
			continue
		}
		u := unplanned[0]
		urec := u.m.GetRecurrence()
		if k, ok := indexed[s]; !ok || k != u.k {
			t.Errorf("%s after the kill: the schedule index points at %v, the occurrence to plan is %v", s, k, u.k)
		}
		if id := u.m.ClientId; id == "" || !slices.ContainsFunc(refs, func(r delaystore.ScheduleRef) bool { return r.Subject == s && r.Name == id }) {
			t.Errorf("%s after the kill: the occurrence to plan has client id %q, not its schedule's name", s, id)
		}
		// NB: planned occurrences whose ACK was lost in the kill are still
		// stored (deletes are not synced), so there may be several, but
		// each was planned before the one to plan was stored.
		if lastPlanned >= urec.GetSeq() {
			t.Errorf("%s after the kill: occurrence %d is planned, after the one to plan, %d", s, lastPlanned, urec.GetSeq())
		}
		// Its predecessor, when still stored, planned it.
		for _, o := range perSubject[s] {
			if p := o.m.GetRecurrence(); !edited && p.GetSeq()+1 == urec.GetSeq() && p.GetNextNs() != urec.GetOccurrenceNs() {
				t.Errorf("%s after the kill: occurrence %d planned its successor at %d, but the one to plan is at %d",
					s, p.GetSeq(), p.GetNextNs(), urec.GetOccurrenceNs())
			}
		}
	}
	if len(perSubject) != len(subjects) {
		t.Errorf("messages on %d subjects after the kill, want %d", len(perSubject), len(subjects))
	}
}
