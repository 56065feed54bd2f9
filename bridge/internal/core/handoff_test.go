package core_test

import (
	"bytes"
	"sync"
	"testing"
	"time"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/keys"
)

// holdingStore holds every batch's commit while it is armed, and says
// when one is held: a batch held there keeps the group commit busy while
// the next batch gathers.
type holdingStore struct {
	delaystore.Store
	held chan struct{}

	mu   sync.Mutex
	gate chan struct{}
}

func (s *holdingStore) arm() {
	s.mu.Lock()
	s.gate = make(chan struct{})
	s.mu.Unlock()
}

func (s *holdingStore) release() {
	s.mu.Lock()
	close(s.gate)
	s.gate = nil
	s.mu.Unlock()
}

func (s *holdingStore) NewBatch() delaystore.Batch {
	return &holdingBatch{Batch: s.Store.NewBatch(), s: s}
}

type holdingBatch struct {
	delaystore.Batch
	s *holdingStore
}

func (b *holdingBatch) Commit(sync delaystore.SyncMode) error {
	b.s.mu.Lock()
	gate := b.s.gate
	b.s.mu.Unlock()
	if gate != nil {
		select {
		case b.s.held <- struct{}{}:
		default:
		}
		<-gate
	}
	return b.Batch.Commit(sync)
}

// TestService_DueAtCommit_OneBatch_KeyOrder checks per-subject order
// within one batch of the group commit when a message published later
// has the smaller key: the first, due 1 ms ago, and the second, due 10 ms
// ago, of one subject, committed together while both are due. The
// dispatcher is told of the batch's messages in key order, so the second
// is not overtaken by a hand-off of the first (docs/architecture.md, "A
// message due at ingest"): it is delivered first.
func TestService_DueAtCommit_OneBatch_KeyOrder(t *testing.T) {
	p := newPublisher()
	st := &holdingStore{Store: memStore(t), held: make(chan struct{}, 1)}
	s := open(t, st, p, nil)

	// A commit held keeps the group commit busy while both messages wait
	// for it, so they go in the next batch, together.
	st.arm()
	blocker := make(chan error, 1)
	if err := s.Schedule(&delaystore.StoredMessage{Subject: "order.other", FireAtNs: time.Now().Add(time.Hour).UnixNano()},
		func(_ keys.Key, err error) { blocker <- err }); err != nil {
		t.Fatal(err)
	}
	select {
	case <-st.held:
	case <-time.After(wait):
		t.Fatal("the first commit was never held")
	}
	now := time.Now()
	type result struct {
		k   keys.Key
		err error
	}
	earlier, later := make(chan result, 1), make(chan result, 1)
	for _, m := range []struct {
		fireAt time.Time
		done   chan result
	}{{now.Add(-time.Millisecond), earlier}, {now.Add(-10 * time.Millisecond), later}} {
		if err := s.Schedule(&delaystore.StoredMessage{Subject: "order.s", FireAtNs: m.fireAt.UnixNano()},
			func(k keys.Key, err error) { m.done <- result{k, err} }); err != nil {
			t.Fatal(err)
		}
	}
	st.release()
	if err := <-blocker; err != nil {
		t.Fatal(err)
	}
	first, second := <-earlier, <-later
	if first.err != nil || second.err != nil {
		t.Fatal(first.err, second.err)
	}
	if bytes.Compare(second.k[:], first.k[:]) >= 0 {
		t.Fatalf("the message due 10 ms ago has key %s, not below %s", second.k, first.k)
	}
	if got := next(t, p.delivered); got != second.k {
		t.Fatalf("delivered %s first, want %s, the subject's smaller key, published later", got, second.k)
	}
	if got := next(t, p.delivered); got != first.k {
		t.Fatalf("delivered %s second, want %s", got, first.k)
	}
	// NB: both are handed off unless a pass was reading the due index as
	// they were told of; either way the order holds.
	t.Logf("handed off: %d", s.Stats().HandedOff)
}
