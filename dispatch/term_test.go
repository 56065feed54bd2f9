package dispatch_test

import (
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/delaystore/pebblestore"
	"github.com/natsdelay/natsdelay/dispatch"
)

// heldCommitStore holds every batch commit while held is set, until it is
// cleared: what is queued for deletion stays stored meanwhile.
type heldCommitStore struct {
	delaystore.Store
	mu   sync.Mutex
	cond *sync.Cond
	held bool
}

func (s *heldCommitStore) hold(on bool) {
	s.mu.Lock()
	s.held = on
	s.mu.Unlock()
	s.cond.Broadcast()
}

func (s *heldCommitStore) NewBatch() delaystore.Batch {
	return &heldBatch{Batch: s.Store.NewBatch(), s: s}
}

type heldBatch struct {
	delaystore.Batch
	s *heldCommitStore
}

func (b *heldBatch) Commit(sync delaystore.SyncMode) error {
	b.s.mu.Lock()
	for b.s.held {
		b.s.cond.Wait()
	}
	b.s.mu.Unlock()
	return b.Batch.Commit(sync)
}

// TestDispatcher_Term_Twice_OneDeadLetter checks that a message is
// dead-lettered once however many +TERMs it gets: a second +TERM that
// arrives while the first one's delete is still queued finds the message
// still stored, and must not publish its dead letter again.
func TestDispatcher_Term_Twice_OneDeadLetter(t *testing.T) {
	inner, err := pebblestore.Open(pebblestore.Config{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	st := &heldCommitStore{Store: inner}
	st.cond = sync.NewCond(&st.mu)
	repo, err := delaystore.OpenRepository(st, delaystore.RepositoryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	pub := newFakePublisher()
	d, err := dispatch.New(repo, pub, dispatch.Config{AckWait: 10 * time.Second, DeadLetterSubject: "dead", Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatal(err)
	}
	pub.d = d
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		st.hold(false)
		_ = d.Close()
		_ = repo.Close()
		_ = inner.Close()
	})
	h := &harness{t: t, repo: repo, d: d, pub: pub}
	k := h.schedule(msgAt("term.twice", time.Now()))[0]
	if got := h.next(10 * time.Second); got.key != k {
		t.Fatalf("delivered %v, want %v", got.key, k)
	}

	st.hold(true)
	answered := make(chan error, 2)
	for _, reason := range []string{"first", "second"} {
		d.Ack(k, dispatch.Ack{Kind: dispatch.AckTerm, Reason: reason}, func(err error) { answered <- err })
	}
	st.hold(false)
	for range 2 {
		select {
		case <-answered:
		case <-time.After(10 * time.Second):
			t.Fatal("a +TERM was never answered")
		}
	}
	if _, err := repo.Get(k); err == nil {
		t.Error("still stored after two +TERMs")
	}
	select {
	case dl := <-pub.dead:
		if dl.key != k || dl.reason != "term: first" {
			t.Errorf("dead letter %+v, want %v with reason %q", dl, k, "term: first")
		}
	default:
		t.Fatal("no dead letter")
	}
	select {
	case dl := <-pub.dead:
		t.Errorf("a second dead letter: %+v", dl)
	default:
	}
	if n := d.Stats().DeadLettered; n != 1 {
		t.Errorf("dead-lettered counted %d times, want 1", n)
	}
}
