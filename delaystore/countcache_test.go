package delaystore_test

import (
	"errors"
	"sync/atomic"
	"testing"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/keys"
)

// appliedFailStore wraps a Store so that while failAfter is set a commit
// reaches the store and still returns an error, as a commit whose answer
// was lost would: the caller cannot know whether it took.
type appliedFailStore struct {
	delaystore.Store
	failAfter atomic.Bool
}

func (s *appliedFailStore) NewBatch() delaystore.Batch {
	return &appliedFailBatch{Batch: s.Store.NewBatch(), s: s}
}

type appliedFailBatch struct {
	delaystore.Batch
	s *appliedFailStore
}

func (b *appliedFailBatch) Commit(sync delaystore.SyncMode) error {
	if err := b.Batch.Commit(sync); err != nil {
		return err
	}
	if b.s.failAfter.Load() {
		return errInjected
	}
	return nil
}

// TestRepository_Counts_ExactAfterUncertainCommits checks that the subject
// registry stays exact when writers keep counts in memory: a commit that
// failed without taking, and one that took but answered an error, leave
// the next write counting from what the store holds, not from what the
// failed batch meant to write.
func TestRepository_Counts_ExactAfterUncertainCommits(t *testing.T) {
	inner := newStore(t)
	fail := &failStore{Store: inner}
	s := &appliedFailStore{Store: fail}
	r := openRepo(t, s, delaystore.RepositoryConfig{})
	schedule := func(want error) {
		t.Helper()
		_, err := r.Schedule([]*delaystore.StoredMessage{msg("counted", t0)}, delaystore.NoSync)
		if !errors.Is(err, want) {
			t.Fatalf("Schedule: %v, want %v", err, want)
		}
	}
	pendingFor := func(want uint64) {
		t.Helper()
		if n, err := r.PendingFor("counted"); err != nil || n != want {
			t.Fatalf("PendingFor = %d, %v; want %d", n, err, want)
		}
	}
	schedule(nil)
	schedule(nil)
	pendingFor(2)

	fail.fail.Store(true) // fails, takes nothing
	schedule(errInjected)
	fail.fail.Store(false)
	schedule(nil)
	pendingFor(3)

	s.failAfter.Store(true) // takes, then fails
	schedule(errInjected)
	s.failAfter.Store(false)
	pendingFor(4)
	schedule(nil)
	pendingFor(5)

	stored := 0
	if err := r.ScanTopic(keys.TopicHash("counted"), nil, nil, func(keys.Key, *delaystore.StoredMessage) bool { stored++; return true }); err != nil {
		t.Fatal(err)
	}
	if stored != 5 {
		t.Fatalf("%d messages stored, want the 5 the count says", stored)
	}
}
