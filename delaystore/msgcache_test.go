package delaystore_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/keys"
)

// storedMessage reads the message under k from s itself, past any
// repository: nil when nothing is stored there.
func storedMessage(tb testing.TB, s delaystore.Store, k keys.Key) *delaystore.StoredMessage {
	tb.Helper()
	v, err := s.Get(k[:])
	if errors.Is(err, delaystore.ErrNotFound) {
		return nil
	}
	if err != nil {
		tb.Fatalf("store Get %v: %v", k, err)
	}
	m := new(delaystore.StoredMessage)
	if err := proto.Unmarshal(v, m); err != nil {
		tb.Fatalf("decode %v: %v", k, err)
	}
	return m
}

// checkAgrees fails unless r.Get answers, for each of ks, what s holds.
func checkAgrees(tb testing.TB, r *delaystore.Repository, s delaystore.Store, step string, ks ...keys.Key) {
	tb.Helper()
	for _, k := range ks {
		want := storedMessage(tb, s, k)
		got, err := r.Get(k)
		switch {
		case want == nil && !errors.Is(err, delaystore.ErrNotFound):
			tb.Fatalf("%s: Get %v = %v, %v; the store has nothing there", step, k, got, err)
		case want != nil && (err != nil || !proto.Equal(got, want)):
			tb.Fatalf("%s: Get %v = %v, %v; the store has %v", step, k, got, err, want)
		}
	}
}

// checkHas fails unless r.Has reports, for each of ks, whether s holds a
// message there.
func checkHas(tb testing.TB, r *delaystore.Repository, s delaystore.Store, step string, ks ...keys.Key) {
	tb.Helper()
	for _, k := range ks {
		want := storedMessage(tb, s, k) != nil
		if got, err := r.Has(k); err != nil || got != want {
			tb.Fatalf("%s: Has %v = %v, %v; want %v", step, k, got, err, want)
		}
	}
}

// planNext is a PlanFunc that plans every occurrence with a successor a
// second later.
func planNext(_ keys.Key, m *delaystore.StoredMessage) (delaystore.Plan, bool) {
	if m.Recurrence == nil {
		return delaystore.Plan{}, false
	}
	cur := proto.Clone(m).(*delaystore.StoredMessage)
	cur.Recurrence.Planned = true
	next := occurrence(m.Subject, m.ClientId, m.FireAtNs+1e9, m.Recurrence.Seq+1)
	return delaystore.Plan{Cur: cur, Next: next}, true
}

// TestRepository_MessageCache_ServesItsWrites checks that a message the
// repository wrote and reads back by key (one with a client id, an
// occurrence) is read back from memory, not from the store, by Get and by
// Has, and exactly
// as the store holds it after every kind of write: a schedule, a
// replacement by Delay-Id, an update, a move, the planning of an
// occurrence (its rewrite and its successor) and a delete; and that a
// plain message is not kept.
func TestRepository_MessageCache_ServesItsWrites(t *testing.T) {
	forEachEngine(t, false, func(t *testing.T, e engine) {
		st := &readCountingStore{Store: e.open(t, t.TempDir()), reads: map[string]int{}}
		r := openRepo(t, st, delaystore.RepositoryConfig{})
		s := schedule(t, r, withID(withExpiry(msg("a", t0), t0+5e9), "a"), withID(msg("b", t0), "id"), occurrence("c", "job", t0, 1), msg("plain", t0))
		a, b, c, plain := s[0].Key, s[1].Key, s[2].Key, s[3].Key
		fromMemory := func(step string, ks ...keys.Key) {
			t.Helper()
			checkAgrees(t, r, st.Store, step, ks...)
			checkHas(t, r, st.Store, step, ks...)
			for _, k := range ks {
				if n := st.readsOf(k); n != 0 {
					t.Fatalf("%s: %v read %d times from the store, want from memory", step, k, n)
				}
			}
		}
		fromMemory("scheduled", a, b, c)
		// A plain message is not kept: it is delivered from the due scan
		// and deleted without a read.
		checkAgrees(t, r, st.Store, "plain", plain)
		if n := st.readsOf(plain); n != 1 {
			t.Fatalf("a plain message read %d times from the store, want once: it is not kept", n)
		}

		m, _ := r.Get(a)
		m.Attempt, m.ExpireAtNs = 3, t0+9e9
		apply(t, r, delaystore.Op{Key: a, Msg: m})
		fromMemory("updated", a)

		moved, err := r.Move(a, func(*delaystore.StoredMessage) (int64, error) { return t0 + 2e9, nil }, "", delaystore.Sync)
		if err != nil {
			t.Fatal(err)
		}
		fromMemory("moved", moved.Key)
		checkAgrees(t, r, st.Store, "moved away", a)

		b2 := schedule(t, r, withID(msg("b", t0+1e9), "id"))[0].Key
		fromMemory("replacement", b2)
		checkAgrees(t, r, st.Store, "replaced", b)

		_, res, err := r.AdvanceEach([]keys.Key{c}, planNext, delaystore.Sync)
		if err != nil || len(res) != 1 || res[0].Err != nil {
			t.Fatalf("AdvanceEach: %v, %v", res, err)
		}
		fromMemory("planned", c, res[0].Next)
		if m, _ := r.Get(c); !m.Recurrence.Planned || m.ClientId != "" {
			t.Fatalf("planned occurrence read back as %v", m)
		}

		apply(t, r, delaystore.Op{Key: moved.Key}, delaystore.Op{Key: c})
		checkAgrees(t, r, st.Store, "deleted", moved.Key, c)
		checkHas(t, r, st.Store, "deleted", moved.Key, c, a, b)
		checkAgrees(t, r, st.Store, "all", eventKeys(t, st.Store)...)
	})
}

// TestRepository_MessageCache_OccurrencesDueSoonOnly checks that the
// cache keeps an occurrence due within a minute of now, which is read
// back when it falls due, and not one due later, which would only sit in
// memory until then (see cacheHorizon): that one is read from the store,
// and still exactly as it is stored. A message with a client id is kept
// however far ahead it is due, as a replace reads it back at any time.
func TestRepository_MessageCache_OccurrencesDueSoonOnly(t *testing.T) {
	st := &readCountingStore{Store: newStore(t), reads: map[string]int{}}
	now := time.Unix(0, t0)
	r := openRepo(t, st, delaystore.RepositoryConfig{Now: func() time.Time { return now }})
	soon := t0 + int64(time.Minute)
	later := soon + 1
	s := schedule(t, r, occurrence("soon", "", soon, 1), occurrence("later", "", later, 1), withID(msg("id", later+int64(24*time.Hour)), "x"))
	checkAgrees(t, r, st.Store, "scheduled", s[0].Key, s[1].Key, s[2].Key)
	if n := st.readsOf(s[0].Key); n != 0 {
		t.Fatalf("an occurrence due in a minute read %d times from the store, want from memory", n)
	}
	if n := st.readsOf(s[1].Key); n != 1 {
		t.Fatalf("an occurrence due in a minute and 1 ns read %d times from the store, want once: not kept", n)
	}
	if n := st.readsOf(s[2].Key); n != 0 {
		t.Fatalf("a message with a client id read %d times from the store, want from memory", n)
	}

	// Planned a day on, its successor (due a second later) is due soon
	// then, and kept.
	now = now.Add(24 * time.Hour)
	_, res, err := r.AdvanceEach([]keys.Key{s[1].Key}, planNext, delaystore.Sync)
	if err != nil || len(res) != 1 || res[0].Err != nil {
		t.Fatalf("AdvanceEach: %v, %v", res, err)
	}
	checkAgrees(t, r, st.Store, "planned", res[0].Next)
	if n := st.readsOf(res[0].Next); n != 0 {
		t.Fatalf("a successor due soon read %d times from the store, want from memory", n)
	}
}

// TestRepository_MessageCache_ExactAfterUncertainCommits checks that what
// the repository keeps of its writes never answers for the store: after a
// commit that failed without taking, and after one that took but
// answered an error, each read answers what the store holds, and so does
// a read after the next write that commits.
func TestRepository_MessageCache_ExactAfterUncertainCommits(t *testing.T) {
	forEachEngine(t, false, func(t *testing.T, e engine) {
		inner := e.open(t, t.TempDir())
		fail := &failStore{Store: inner}
		s := &appliedFailStore{Store: fail}
		r := openRepo(t, s, delaystore.RepositoryConfig{})
		got := schedule(t, r, msg("a", t0), withID(msg("b", t0), "id"), occurrence("c", "job", t0, 1))
		a, b, c := got[0].Key, got[1].Key, got[2].Key
		// failing runs write and wants its error: lost says the commit
		// does not take, taken that it takes and still answers an error.
		failing := func(step string, lost bool, write func() error) {
			t.Helper()
			if lost {
				fail.fail.Store(true)
			} else {
				s.failAfter.Store(true)
			}
			err := write()
			fail.fail.Store(false)
			s.failAfter.Store(false)
			if !errors.Is(err, errInjected) {
				t.Fatalf("%s: %v, want the injected error", step, err)
			}
			checkAgrees(t, r, inner, step, eventKeys(t, inner)...)
			checkAgrees(t, r, inner, step, a, b, c)
			// A write that commits must not make known what the failed
			// one meant to write.
			schedule(t, r, msg("other", t0))
			checkAgrees(t, r, inner, step+", then a commit", eventKeys(t, inner)...)
			checkAgrees(t, r, inner, step+", then a commit", a, b, c)
		}
		update := func(k keys.Key, attempt uint32) func() error {
			return func() error {
				m, err := r.Get(k)
				if err != nil {
					return err
				}
				m.Attempt = attempt
				_, err = r.Apply([]delaystore.Op{{Key: k, Msg: m}}, delaystore.Sync)
				return err
			}
		}
		for _, lost := range []bool{true, false} {
			step := func(what string) string { return fmt.Sprintf("%s (lost %v)", what, lost) }
			failing(step("update"), lost, update(a, 1))
			failing(step("second update"), lost, update(a, 2))
			failing(step("move"), lost, func() error {
				_, err := r.Move(a, func(m *delaystore.StoredMessage) (int64, error) { return m.FireAtNs, nil }, "bulk", delaystore.Sync)
				return err
			})
			failing(step("replacement"), lost, func() error {
				_, err := r.Schedule([]*delaystore.StoredMessage{withID(msg("b", t0+1e9), "id")}, delaystore.Sync)
				return err
			})
		}
		failing("planning", false, func() error {
			_, _, err := r.AdvanceEach([]keys.Key{c}, planNext, delaystore.Sync)
			return err
		})
		if m, _ := r.Get(c); !m.GetRecurrence().GetPlanned() {
			t.Fatal("the planning that took is not read back")
		}
		failing("delete", false, func() error {
			_, err := r.Apply([]delaystore.Op{{Key: a}, {Key: c}}, delaystore.Sync)
			return err
		})
		if _, err := r.Get(a); !errors.Is(err, delaystore.ErrNotFound) {
			t.Fatalf("a delete that took still reads back: %v", err)
		}
	})
}

// TestRepository_MessageCache_CallerOwnsItsMessage checks that a caller
// changing the message Get gave it changes nothing that later reads see.
func TestRepository_MessageCache_CallerOwnsItsMessage(t *testing.T) {
	r, st := newRepo(t)
	k := schedule(t, r, occurrence("a", "job", t0, 1))[0].Key
	m, err := r.Get(k)
	if err != nil {
		t.Fatal(err)
	}
	m.Subject, m.Recurrence.Planned, m.Payload[0] = "changed", true, 'X'
	checkAgrees(t, r, st, "after the caller changed its copy", k)
}

// TestRepository_MessageCache_Bounded checks the memory the repository
// keeps of its writes: at most MaxCachedMessages messages and
// MaxCachedMessageBytes bytes, none over MaxCachedValue, the latest kept,
// and nothing after ReleaseMemory; reads stay exact throughout.
func TestRepository_MessageCache_Bounded(t *testing.T) {
	st := &readCountingStore{Store: newStore(t), reads: map[string]int{}}
	r := openRepo(t, st, delaystore.RepositoryConfig{})
	within := func(step string) {
		t.Helper()
		n, size := r.CachedMessages()
		if n > delaystore.MaxCachedMessages || size > delaystore.MaxCachedMessageBytes {
			t.Fatalf("%s: %d messages of %d bytes kept, want at most %d and %d", step, n, size, delaystore.MaxCachedMessages, delaystore.MaxCachedMessageBytes)
		}
	}
	latest := func(step string, k keys.Key) {
		t.Helper()
		before := st.readsOf(k)
		checkAgrees(t, r, st.Store, step, k)
		if st.readsOf(k) != before {
			t.Fatalf("%s: the latest write was read from the store", step)
		}
	}

	// By count: small messages, more than the bound.
	var last keys.Key
	for written := 0; written <= delaystore.MaxCachedMessages; {
		batch := make([]*delaystore.StoredMessage, 8192)
		for i := range batch {
			batch[i] = withID(msg("small", t0+int64(written+i)), fmt.Sprint(written+i))
		}
		s := schedule(t, r, batch...)
		written += len(batch)
		last = s[len(s)-1].Key
		within(fmt.Sprintf("%d small messages", written))
	}
	latest("small", last)

	// By bytes: large messages, more than the bound in bytes.
	big := make([]byte, delaystore.MaxCachedValue-1024)
	for written := 0; written <= 2*delaystore.MaxCachedMessageBytes; written += len(big) {
		m := withID(msg("large", t0), fmt.Sprint(written))
		m.Payload = big
		last = schedule(t, r, m)[0].Key
		within(fmt.Sprintf("%d bytes of large messages", written))
	}
	latest("large", last)

	// Over MaxCachedValue: not kept, and still read right.
	m := msg("huge", t0)
	m.Payload = make([]byte, delaystore.MaxCachedValue+1)
	huge := schedule(t, r, m)[0].Key
	before := st.readsOf(huge)
	checkAgrees(t, r, st.Store, "huge", huge)
	if st.readsOf(huge) != before+1 {
		t.Fatal("a message over MaxCachedValue was kept in memory")
	}

	r.ReleaseMemory()
	if n, size := r.CachedMessages(); n != 0 || size != 0 {
		t.Fatalf("after ReleaseMemory %d messages of %d bytes kept, want none", n, size)
	}
	checkAgrees(t, r, st.Store, "released", last)
}

// TestRepository_MessageCache_RandomWrites checks, over a random run of
// every kind of write, a third of whose commits fail or answer an error
// after taking, that each read answers what the store holds, on every
// engine, while another goroutine reads the same keys throughout (for the
// race detector).
func TestRepository_MessageCache_RandomWrites(t *testing.T) {
	forEachEngine(t, false, func(t *testing.T, e engine) {
		inner := e.open(t, t.TempDir())
		fail := &failStore{Store: inner}
		s := &appliedFailStore{Store: fail}
		r := openRepo(t, s, delaystore.RepositoryConfig{})
		rng := rand.New(rand.NewPCG(1, 2))

		// The reader reads every key once per step, while the step writes.
		var seen atomic.Pointer[[]keys.Key]
		stop := make(chan struct{})
		next := make(chan struct{}, 1)
		var wg sync.WaitGroup
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				case <-next:
				}
				for _, k := range *seen.Load() {
					if _, err := r.Get(k); err != nil && !errors.Is(err, delaystore.ErrNotFound) {
						t.Errorf("concurrent Get %v: %v", k, err)
						return
					}
				}
			}
		})
		defer func() {
			close(stop)
			wg.Wait()
		}()

		subjects := []string{"a", "b", "c"}
		pick := func(ks []keys.Key) (keys.Key, bool) {
			if len(ks) == 0 {
				return keys.Key{}, false
			}
			return ks[rng.IntN(len(ks))], true
		}
		for step := range 150 {
			ks := eventKeys(t, inner)
			seen.Store(&ks)
			select {
			case next <- struct{}{}:
			default: // still reading the keys of the step before
			}
			switch rng.IntN(6) {
			case 0:
				fail.fail.Store(true)
			case 1:
				s.failAfter.Store(true)
			}
			var what string
			var err error
			switch op := rng.IntN(6); op {
			case 0, 1:
				what = "schedule"
				var msgs []*delaystore.StoredMessage
				for range 1 + rng.IntN(3) {
					sub := subjects[rng.IntN(len(subjects))]
					switch rng.IntN(3) {
					case 0:
						msgs = append(msgs, msg(sub, t0+rng.Int64N(1e9)))
					case 1:
						msgs = append(msgs, withExpiry(withID(msg(sub, t0+rng.Int64N(1e9)), fmt.Sprint("id", rng.IntN(3))), t0+2e9))
					default:
						msgs = append(msgs, occurrence(sub, fmt.Sprint("job", rng.IntN(3)), t0+rng.Int64N(1e9), 1))
					}
				}
				_, err = r.Schedule(msgs, delaystore.NoSync)
			case 2:
				what = "update"
				if k, ok := pick(ks); ok {
					m := storedMessage(t, inner, k)
					m.Attempt++
					if rng.IntN(2) == 0 {
						m.ExpireAtNs = t0 + 3e9 + rng.Int64N(1e9)
					}
					_, err = r.Apply([]delaystore.Op{{Key: k, Msg: m}}, delaystore.NoSync)
				}
			case 3:
				what = "delete"
				if k, ok := pick(ks); ok {
					_, err = r.Apply([]delaystore.Op{{Key: k}}, delaystore.NoSync)
				}
			case 4:
				what = "move"
				if k, ok := pick(ks); ok {
					_, err = r.Move(k, func(m *delaystore.StoredMessage) (int64, error) { return m.FireAtNs + 1e6, nil }, "", delaystore.NoSync)
				}
			default:
				what = "plan"
				_, _, err = r.AdvanceEach(ks, planNext, delaystore.NoSync)
			}
			fail.fail.Store(false)
			s.failAfter.Store(false)
			if err != nil && !errors.Is(err, errInjected) && !errors.Is(err, delaystore.ErrInvalidMessage) {
				t.Fatalf("step %d, %s: %v", step, what, err)
			}
			// The keys before the step, and any it wrote.
			after := eventKeys(t, inner)
			for _, k := range ks {
				if storedMessage(t, inner, k) == nil {
					after = append(after, k)
				}
			}
			checkAgrees(t, r, inner, fmt.Sprintf("step %d, %s (err %v)", step, what, err), after...)
			checkHas(t, r, inner, fmt.Sprintf("step %d, %s (err %v)", step, what, err), after...)
		}
	})
}
