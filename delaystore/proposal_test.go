package delaystore_test

import (
	"errors"
	"sync"
	"testing"

	"natsdelay/delaystore"
	"natsdelay/keys"
)

// logStore wraps a Store so that its batches propose, as a replicated
// store's do: a proposed batch reaches the store only when it or a later
// one is waited for, in the order proposed, like entries of a log. While
// failing is set, waiting fails every batch still queued and none of them
// reaches the store: a batch commits only if those before it did.
type logStore struct {
	delaystore.Store
	mu      sync.Mutex
	queued  []*logBatch
	failing bool
}

func (s *logStore) NewBatch() delaystore.Batch { return &logBatch{Batch: s.Store.NewBatch(), s: s} }

// fail makes every batch waited for from now on fail.
func (s *logStore) fail() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failing = true
}

type logBatch struct {
	delaystore.Batch
	s        *logStore
	proposed bool
	err      error
	done     bool
}

// Close leaves a proposed batch to its wait, as a replicated store hands
// the entry on at Propose.
func (b *logBatch) Close() error {
	if b.proposed {
		return nil
	}
	return b.Batch.Close()
}

func (b *logBatch) Propose(sync delaystore.SyncMode) (func() error, error) {
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	b.s.queued = append(b.s.queued, b)
	b.proposed = true
	return func() error {
		b.s.mu.Lock()
		defer b.s.mu.Unlock()
		for !b.done {
			next := b.s.queued[0]
			b.s.queued = b.s.queued[1:]
			next.done = true
			if b.s.failing {
				next.err = errors.Join(errInjected, next.Batch.Close())
				continue
			}
			next.err = errors.Join(next.Batch.Commit(sync), next.Batch.Close())
		}
		return b.err
	}, nil
}

var _ delaystore.ProposingBatch = (*logBatch)(nil)

func plainBatch(subject string, n int) []*delaystore.StoredMessage {
	msgs := make([]*delaystore.StoredMessage, n)
	for i := range msgs {
		msgs[i] = msg(subject, t0+int64(i))
	}
	return msgs
}

func countStored(t *testing.T, r *delaystore.Repository, subject string) int {
	t.Helper()
	n := 0
	if err := r.ScanTopic(keys.TopicHash(subject), nil, nil, func(keys.Key, *delaystore.StoredMessage) bool { n++; return true }); err != nil {
		t.Fatal(err)
	}
	return n
}

// Batches proposed one after another, each built while the ones before
// it are uncommitted, leave the counts exact: each builds on the counts
// of those on their way, and readers see a batch's counts once it
// committed, in order.
func TestRepository_ProposeSchedule_BuildsOnBatchesOnTheirWay(t *testing.T) {
	s := &logStore{Store: newStore(t)}
	r := openRepo(t, s, delaystore.RepositoryConfig{})
	var ps []*delaystore.Proposal
	for i := range 6 {
		subject := []string{"a", "b"}[i%2]
		ps = append(ps, r.ProposeSchedule(plainBatch(subject, 5), delaystore.Sync))
	}
	if got := r.Pending(); got != 0 {
		t.Fatalf("Pending = %d before any proposal committed, want 0", got)
	}
	var last uint64
	for i, p := range ps {
		res, err := p.Wait()
		if err != nil {
			t.Fatalf("proposal %d: %v", i, err)
		}
		if got, want := r.Pending(), uint64(5*(i+1)); got != want {
			t.Fatalf("Pending = %d after %d proposals committed, want %d", got, i+1, want)
		}
		for _, sc := range res {
			if id := sc.Key.EventID(); id <= last {
				t.Fatalf("event id %d after %d: ids not increasing across proposals", id, last)
			}
			last = sc.Key.EventID()
		}
	}
	for _, subject := range []string{"a", "b"} {
		n, err := r.PendingFor(subject)
		if err != nil || n != 15 || countStored(t, r, subject) != 15 {
			t.Fatalf("%s: PendingFor = %d, %v, %d stored; want 15 of each", subject, n, err, countStored(t, r, subject))
		}
	}
	if r.LastID() != last {
		t.Fatalf("LastID = %d, want %d", r.LastID(), last)
	}
}

// Every other write waits for the proposals on their way first, so it
// sees their messages: a batch with a client id (which reads the store
// for the message it replaces) and a delete of a message proposed a
// moment before.
func TestRepository_ProposeSchedule_OtherWritesSettleItFirst(t *testing.T) {
	s := &logStore{Store: newStore(t)}
	r := openRepo(t, s, delaystore.RepositoryConfig{})
	p := r.ProposeSchedule(plainBatch("plain", 3), delaystore.Sync)
	byID := msg("plain", t0)
	byID.ClientId = "one"
	q := r.ProposeSchedule([]*delaystore.StoredMessage{byID}, delaystore.Sync)
	if countStored(t, r, "plain") != 4 {
		t.Fatalf("%d stored after a batch with a client id, want the 3 proposed before it and its own", countStored(t, r, "plain"))
	}
	res, err := p.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Wait(); err != nil {
		t.Fatal(err)
	}
	next := r.ProposeSchedule(plainBatch("plain", 1), delaystore.Sync)
	applied, err := r.Apply([]delaystore.Op{{Key: res[0].Key}}, delaystore.Sync)
	if err != nil || !applied[0] {
		t.Fatalf("delete of a message proposed before: %v, %v", applied, err)
	}
	if _, err := next.Wait(); err != nil {
		t.Fatal(err)
	}
	if n, err := r.PendingFor("plain"); err != nil || n != 4 || countStored(t, r, "plain") != 4 {
		t.Fatalf("PendingFor = %d, %v, %d stored; want 4", n, err, countStored(t, r, "plain"))
	}
}

// A proposal that does not commit stops the repository's writes: the
// ones proposed after it fail too, and every later write is refused with
// the failure, so nothing is built on counts that never reached the
// store. A repository opened afresh on the store finds its counts exact.
func TestRepository_ProposeSchedule_FailureStopsWrites(t *testing.T) {
	inner := newStore(t)
	s := &logStore{Store: inner}
	r, err := delaystore.OpenRepository(s, delaystore.RepositoryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.ProposeSchedule(plainBatch("f", 2), delaystore.Sync).Wait(); err != nil {
		t.Fatal(err)
	}
	p1 := r.ProposeSchedule(plainBatch("f", 3), delaystore.Sync)
	p2 := r.ProposeSchedule(plainBatch("f", 4), delaystore.Sync)
	s.fail()
	for i, p := range []*delaystore.Proposal{p1, p2} {
		if _, err := p.Wait(); !errors.Is(err, errInjected) {
			t.Fatalf("proposal %d after the failure: %v, want the injected error", i+1, err)
		}
	}
	if _, err := r.Schedule(plainBatch("f", 1), delaystore.Sync); !errors.Is(err, errInjected) {
		t.Fatalf("Schedule after a failed proposal: %v, want it refused with the failure", err)
	}
	if _, err := r.ProposeSchedule(plainBatch("f", 1), delaystore.Sync).Wait(); !errors.Is(err, errInjected) {
		t.Fatalf("ProposeSchedule after a failed proposal: %v, want it refused with the failure", err)
	}
	if _, err := r.Apply([]delaystore.Op{{Key: keys.Key{}}}, delaystore.Sync); !errors.Is(err, errInjected) {
		t.Fatalf("Apply after a failed proposal: %v, want it refused with the failure", err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}

	fresh := openRepo(t, inner, delaystore.RepositoryConfig{})
	if n, err := fresh.PendingFor("f"); err != nil || n != 2 || countStored(t, fresh, "f") != 2 {
		t.Fatalf("reopened: PendingFor = %d, %v, %d stored; want the 2 committed", n, err, countStored(t, fresh, "f"))
	}
}
