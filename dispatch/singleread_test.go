package dispatch_test

import (
	"bytes"
	"encoding/binary"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/delaystore/pebblestore"
	"github.com/natsdelay/natsdelay/dispatch"
	"github.com/natsdelay/natsdelay/keys"
)

// rangeCountingStore counts the range scans of each topic's messages,
// and the messages they read.
type rangeCountingStore struct {
	delaystore.Store
	mu    sync.Mutex
	scans map[uint64]int
	reads map[uint64]int
}

func (s *rangeCountingStore) Scan(opts delaystore.IterOptions, yield func(key, value []byte) bool) error {
	lo := opts.LowerBound
	// A topic's first key, a cursor, or past a key (Key.Successor).
	if len(lo) != keys.Len && len(lo) != 8 && len(lo) != keys.Len+1 {
		return s.Store.Scan(opts, yield)
	}
	h := binary.BigEndian.Uint64(lo[:8])
	s.mu.Lock()
	s.scans[h]++
	s.mu.Unlock()
	return s.Store.Scan(opts, func(key, value []byte) bool {
		s.mu.Lock()
		if s.reads == nil {
			s.reads = map[uint64]int{}
		}
		s.reads[h]++
		s.mu.Unlock()
		return yield(key, value)
	})
}

// readsOf is how many messages the range scans of subject read.
func (s *rangeCountingStore) readsOf(subject string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reads[keys.TopicHash(subject)]
}

func (s *rangeCountingStore) scansOf(subject string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.scans[keys.TopicHash(subject)]
}

// TestDispatcher_SingleEntryTopic_PointRead checks that a subject brought
// into memory by one due-index entry is read with a point lookup of that
// entry's key, not a range scan, also for its next message once the
// first is settled, and that a subject with two messages due
// at once is still scanned as a range, delivering both in key order.
func TestDispatcher_SingleEntryTopic_PointRead(t *testing.T) {
	inner, err := pebblestore.Open(pebblestore.Config{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	st := &rangeCountingStore{Store: inner, scans: map[uint64]int{}}
	repo, err := delaystore.OpenRepository(st, delaystore.RepositoryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	// NB: the fake clock holds everything back until all is stored, so
	// one frontier read sees both of "two"'s entries.
	clock := newFakeClock(time.Now())
	start := clock.now()
	pub := newFakePublisher()
	d, err := dispatch.New(repo, pub, dispatch.Config{AckWait: 10 * time.Second, Now: clock.now, Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatal(err)
	}
	pub.d = d
	t.Cleanup(func() {
		_ = d.Close()
		_ = repo.Close()
		_ = inner.Close()
	})
	at := start.Add(100 * time.Millisecond)
	msgs := []*delaystore.StoredMessage{msgAt("one", at), msgAt("two", at), msgAt("two", at.Add(time.Millisecond))}
	res, err := repo.Schedule(msgs, delaystore.Sync)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	clock.set(at.Add(10 * time.Millisecond))
	got := map[string][]keys.Key{}
	for range 3 {
		dl := <-pub.deliveries
		got[dl.subject] = append(got[dl.subject], dl.key)
	}
	if len(got["one"]) != 1 || got["one"][0] != res[0].Key {
		t.Fatalf("one: delivered %v, want %v", got["one"], res[0].Key)
	}
	if len(got["two"]) != 2 || got["two"][0] != res[1].Key || got["two"][1] != res[2].Key {
		t.Fatalf("two: delivered %v, want %v then %v", got["two"], res[1].Key, res[2].Key)
	}
	if n := st.scansOf("one"); n != 0 {
		t.Fatalf("the subject with one entry was range-scanned %d times, want a point read", n)
	}
	if n := st.scansOf("two"); n == 0 {
		t.Fatal("the subject with two entries was not range-scanned")
	}
	// The next message of the same subject, after the first was ACKed,
	// comes through the due index to a topic with nothing else pending:
	// a point read again.
	ackDone := make(chan error, 1)
	d.Ack(res[0].Key, dispatch.Ack{Kind: dispatch.AckDone}, func(err error) { ackDone <- err })
	if err := <-ackDone; err != nil {
		t.Fatal(err)
	}
	later := clock.now().Add(100 * time.Millisecond)
	res2, err := repo.Schedule([]*delaystore.StoredMessage{msgAt("one", later)}, delaystore.Sync)
	if err != nil {
		t.Fatal(err)
	}
	d.Notify(res2[0], later.UnixNano())
	clock.set(later.Add(10 * time.Millisecond))
	if dl := <-pub.deliveries; dl.key != res2[0].Key {
		t.Fatalf("delivered %v, want the later message %v", dl.key, res2[0].Key)
	}
	if n := st.scansOf("one"); n != 0 {
		t.Fatalf("the subject was range-scanned %d times for its later message, want a point read", n)
	}
	if !bytes.Equal(res[0].Key[:8], binary.BigEndian.AppendUint64(nil, keys.TopicHash("one"))) {
		t.Fatal("keys no longer start with the topic hash: the counting store needs changing")
	}
}
