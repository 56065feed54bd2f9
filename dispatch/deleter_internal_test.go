package dispatch

import (
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/delaystore/pebblestore"
	"github.com/natsdelay/natsdelay/keys"
)

// stallingStore fails its first commit, which waits until released: a
// test queues more writes while that commit is under way.
type stallingStore struct {
	delaystore.Store
	entered, release chan struct{}
	once             sync.Once
}

var errStalled = errors.New("commit failed while stalled")

func (s *stallingStore) NewBatch() delaystore.Batch {
	return &stallingBatch{Batch: s.Store.NewBatch(), s: s}
}

type stallingBatch struct {
	delaystore.Batch
	s *stallingStore
}

func (b *stallingBatch) Commit(sync delaystore.SyncMode) error {
	first := false
	b.s.once.Do(func() { first = true })
	if first {
		close(b.s.entered)
		<-b.s.release
		return errStalled
	}
	return b.Batch.Commit(sync)
}

// A delete queued while the commit of an earlier delete of the same key
// fails is merged into the one put back: the key is deleted in one
// commit, and each waiter is told once that its delete applied. Checks
// that the queue's entry of the merged delete is stale (pendingOp.out):
// taken again, it would be committed a second time and its waiter told
// twice, the second time that nothing was deleted.
func TestDeleter_PutBack_MergesTheDeleteQueuedMeanwhile(t *testing.T) {
	inner, err := pebblestore.Open(pebblestore.Config{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	st := &stallingStore{Store: inner, entered: make(chan struct{}), release: make(chan struct{})}
	repo, err := delaystore.OpenRepository(inner, delaystore.RepositoryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = inner.Close() })
	s, err := repo.Schedule([]*delaystore.StoredMessage{{Subject: "s", FireAtNs: time.Now().UnixNano()}}, delaystore.Sync)
	if err != nil {
		t.Fatal(err)
	}
	k := s[0].Key
	if err := repo.Close(); err != nil {
		t.Fatal(err)
	}
	// Reopened on the stalling store, now that the message is stored.
	if repo, err = delaystore.OpenRepository(st, delaystore.RepositoryConfig{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = repo.Close() })

	var mu sync.Mutex
	told := map[string][]bool{}
	waiter := func(name string, wg *sync.WaitGroup) deleteDone {
		return func(applied bool, err error) {
			if err != nil {
				t.Errorf("%s: %v", name, err)
			}
			mu.Lock()
			told[name] = append(told[name], applied)
			mu.Unlock()
			wg.Done()
		}
	}
	var wg sync.WaitGroup
	wg.Add(2)
	var committed [][]keys.Key
	dl := newDeleter(repo, 100, time.Hour, slog.New(slog.NewTextHandler(t.Output(), nil)), func(ks []keys.Key) {
		mu.Lock()
		committed = append(committed, ks)
		mu.Unlock()
	}, &burstHold{})
	dl.delete(k, waiter("first", &wg))
	<-st.entered
	dl.delete(k, waiter("second", &wg))
	close(st.release)
	wg.Wait()
	if err := dl.close(); err != nil {
		t.Fatal(err)
	}

	mu.Lock()
	defer mu.Unlock()
	for _, name := range []string{"first", "second"} {
		if got := told[name]; len(got) != 1 || !got[0] {
			t.Errorf("%s delete's waiter told %v, want once that it applied", name, got)
		}
	}
	if len(committed) != 1 || len(committed[0]) != 1 {
		t.Errorf("commits told %v, want one of the key", committed)
	}
	if _, err := repo.Get(k); !errors.Is(err, delaystore.ErrNotFound) {
		t.Errorf("Get after the deletes: %v, want ErrNotFound", err)
	}
	if len(dl.mu.ops) != 0 || len(dl.mu.due) != 0 {
		t.Errorf("deleter holds %d ops and %d due after close, want none", len(dl.mu.ops), len(dl.mu.due))
	}
}
