package core_test

import (
	"bytes"
	"sync"
	"testing"
	"time"

	"github.com/natsdelay/natsdelay/bridge/internal/core"
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

// TestService_ScanBetweenCommitAndTell_KeyOrder checks per-subject order
// for a batch of the group commit whose messages a scan of their subject
// can read before the dispatcher is told of them: B, published after A
// with a shorter delay, sorts below A, which went out already, so below
// the subject's cursor; C, in B's batch, sorts above it. A pass that runs
// between the batch's commit and its tell (brought by a FIRE of another
// subject's message) reads the subject from its cursor: it finds C, not
// B. Both were on disk together, B with the smaller key, so B goes out
// first (docs/architecture.md, "A message due at ingest").
func TestService_ScanBetweenCommitAndTell_KeyOrder(t *testing.T) {
	p := newPublisher()
	s := open(t, memStore(t), p, nil)
	var mu sync.Mutex
	var gate chan struct{} // while set, a commit waits here before its tell
	held := make(chan struct{}, 1)
	s.AfterCommitForTest(func() {
		mu.Lock()
		g := gate
		mu.Unlock()
		if g != nil {
			held <- struct{}{}
			<-g
		}
	})
	release := func() {
		mu.Lock()
		defer mu.Unlock()
		if gate != nil {
			close(gate)
			gate = nil
		}
	}
	t.Cleanup(release)

	now := time.Now()
	a := schedule(t, s, &delaystore.StoredMessage{Subject: "order.gap", FireAtNs: now.Add(-5 * time.Millisecond).UnixNano()})
	if got := next(t, p.delivered); got != a {
		t.Fatalf("delivered %s, want A %s", got, a)
	}
	// Not answered: A stays in flight, its subject's cursor past it.
	e := schedule(t, s, &delaystore.StoredMessage{Subject: "order.fired", FireAtNs: now.Add(time.Hour).UnixNano()})

	mu.Lock()
	gate = make(chan struct{})
	mu.Unlock()
	type result struct {
		k   keys.Key
		err error
	}
	bDone, cDone := make(chan result, 1), make(chan result, 1)
	if err := s.ScheduleOnceAll([]delaystore.Once{
		{Msg: &delaystore.StoredMessage{Subject: "order.gap", FireAtNs: now.Add(-8 * time.Millisecond).UnixNano()}},
		{Msg: &delaystore.StoredMessage{Subject: "order.gap", FireAtNs: now.Add(-time.Millisecond).UnixNano()}},
	}, []core.OnceFunc{
		func(res delaystore.Outcome, err error) { bDone <- result{res.Key, err} },
		func(res delaystore.Outcome, err error) { cDone <- result{res.Key, err} },
	}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-held:
	case <-time.After(wait):
		t.Fatal("the batch of B and C was never committed")
	}
	// Committed, not yet told: a FIRE of E brings a pass, whose read of
	// the due index finds C's entry (and E's), not B's, below where it
	// read before.
	if _, _, err := s.Move(e, func(*delaystore.StoredMessage) (int64, error) { return time.Now().UnixNano(), nil }, "", delaystore.Sync); err != nil {
		t.Fatal(err)
	}
	var got []keys.Key
	for len(got) == 0 || got[len(got)-1].TopicHash() != keys.TopicHash("order.fired") {
		got = append(got, next(t, p.delivered))
	}
	release()
	b, c := <-bDone, <-cDone
	if b.err != nil || c.err != nil {
		t.Fatal(b.err, c.err)
	}
	if !(bytes.Compare(b.k[:], a[:]) < 0 && bytes.Compare(a[:], c.k[:]) < 0) {
		t.Fatalf("keys B %s, A %s, C %s: want B < A < C", b.k, a, c.k)
	}
	for len(got) < 3 {
		got = append(got, next(t, p.delivered))
	}
	var gap []keys.Key
	for _, k := range got {
		if k != b.k && k != c.k {
			continue
		}
		gap = append(gap, k)
	}
	if len(gap) != 2 || gap[0] != b.k {
		t.Fatalf("delivered %v of order.gap after A, want B %s, then C %s", gap, b.k, c.k)
	}
}
