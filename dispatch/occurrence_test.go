package dispatch_test

import (
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/delaystore/pebblestore"
	"github.com/natsdelay/natsdelay/dispatch"
	"github.com/natsdelay/natsdelay/dispatch/recur"
	"github.com/natsdelay/natsdelay/keys"
)

func occurrenceAt(subject string, every time.Duration, occ time.Time, policy recur.CatchUp, limit uint64) *delaystore.StoredMessage {
	m := msgAt(subject, occ)
	m.ClientId = "job"
	m.Recurrence = &delaystore.Recurrence{EveryNs: int64(every), Id: "job", OccurrenceNs: occ.UnixNano(), Seq: 1, CatchUp: policy, Limit: limit}
	return m
}

// pendingOf lists the pending messages of subject in key order.
func (h *harness) pendingOf(subject string) []*delaystore.StoredMessage {
	h.t.Helper()
	var out []*delaystore.StoredMessage
	err := h.repo.ScanTopic(keys.TopicHash(subject), nil, nil, func(_ keys.Key, m *delaystore.StoredMessage) bool {
		out = append(out, m)
		return true
	})
	if err != nil {
		h.t.Fatal(err)
	}
	return out
}

// TestDispatcher_Occurrence_NextStoredBeforeDelivery checks that each
// occurrence is an ordinary delivery with its own tag, that its successor
// is stored before it goes out (so an ACK cannot end the schedule), and
// that Delay-Limit ends the schedule.
func TestDispatcher_Occurrence_NextStoredBeforeDelivery(t *testing.T) {
	h := newHarness(t, 0, nil)
	start := time.Now().Add(50 * time.Millisecond)
	// NB: All, so that a loaded machine delivering late cannot skip a
	// planned time and the fire times can be checked exactly.
	h.schedule(occurrenceAt("rec", 150*time.Millisecond, start, recur.All, 3))
	seen := map[keys.Key]bool{}
	for i := range 3 {
		d := h.next(10 * time.Second)
		if seen[d.key] {
			t.Fatalf("occurrence %d under a tag seen before", i+1)
		}
		seen[d.key] = true
		if want := start.Add(time.Duration(i) * 150 * time.Millisecond).UnixNano(); d.fireAt != want {
			t.Fatalf("occurrence %d fires at %d, want %d", i+1, d.fireAt, want)
		}
		if d.at.UnixNano() < d.fireAt {
			t.Fatalf("occurrence %d early", i+1)
		}
		m, err := h.repo.Get(d.key)
		if err != nil {
			t.Fatal(err)
		}
		if !m.Recurrence.Planned {
			t.Fatalf("occurrence %d delivered unplanned", i+1)
		}
		pend := h.pendingOf("rec")
		if i < 2 {
			if len(pend) != 2 || pend[1].Recurrence.Seq != uint64(i+2) || m.Recurrence.NextNs != pend[1].FireAtNs {
				t.Fatalf("occurrence %d: pending %v, want it and its successor", i+1, pend)
			}
			if k, err := h.repo.Lookup("rec", "job"); err != nil || k == d.key {
				t.Fatalf("Delay-Id index points at %v, %v: want the successor", k, err)
			}
		} else if len(pend) != 1 || m.Recurrence.NextNs != 0 {
			t.Fatalf("last occurrence: pending %d, next %d; want no successor", len(pend), m.Recurrence.NextNs)
		}
		if err := h.ack(d.key, dispatch.Ack{Kind: dispatch.AckDone}); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case d := <-h.pub.deliveries:
		t.Fatalf("a fourth occurrence past Delay-Limit 3: %v", d)
	case <-time.After(400 * time.Millisecond):
	}
}

// TestDispatcher_Occurrence_CatchUp checks the three catch-up policies for
// a schedule every minute whose occurrence was due 5.5 minutes ago.
func TestDispatcher_Occurrence_CatchUp(t *testing.T) {
	for _, tt := range []struct {
		policy    recur.CatchUp
		delivered int // before the one in the future
	}{{recur.One, 1}, {recur.All, 6}, {recur.None, 0}} {
		t.Run(tt.policy.String(), func(t *testing.T) {
			h := newHarness(t, 0, nil)
			occ := time.Now().Add(-5*time.Minute - 30*time.Second)
			h.schedule(occurrenceAt("rec", time.Minute, occ, tt.policy, 0))
			for i := range tt.delivered {
				d := h.next(10 * time.Second)
				if want := occ.Add(time.Duration(i) * time.Minute).UnixNano(); tt.policy == recur.All && d.fireAt != want {
					t.Fatalf("catch-up %d fires at %d, want %d", i+1, d.fireAt, want)
				}
				if err := h.ack(d.key, dispatch.Ack{Kind: dispatch.AckDone}); err != nil {
					t.Fatal(err)
				}
			}
			want := occ.Add(6 * time.Minute).UnixNano()
			deadline := time.Now().Add(10 * time.Second)
			for {
				pend := h.pendingOf("rec")
				if len(pend) == 1 && pend[0].FireAtNs == want {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("pending %v, want one occurrence at %d", pend, want)
				}
				time.Sleep(10 * time.Millisecond)
			}
			select {
			case d := <-h.pub.deliveries:
				t.Fatalf("an extra delivery: %v", d)
			case <-time.After(200 * time.Millisecond):
			}
			want = 0
			if tt.policy == recur.None {
				want = 1
			}
			if got := h.d.Stats().Skipped; got != uint64(want) {
				t.Fatalf("skipped %d, want %d", got, want)
			}
		})
	}
}

// TestDispatcher_Occurrence_ManyDueAtOnce checks that many schedules due
// at the same time, planned together, each go out once with their
// successors stored.
func TestDispatcher_Occurrence_ManyDueAtOnce(t *testing.T) {
	h := newHarness(t, 0, nil)
	at := time.Now().Add(50 * time.Millisecond)
	const n = 50
	var msgs []*delaystore.StoredMessage
	for i := range n {
		m := occurrenceAt(fmt.Sprintf("many.%d", i%5), time.Hour, at, recur.One, 0)
		m.ClientId, m.Recurrence.Id = fmt.Sprintf("job-%d", i), fmt.Sprintf("job-%d", i)
		msgs = append(msgs, m)
	}
	h.schedule(msgs...)
	seen := map[keys.Key]bool{}
	for range n {
		d := h.next(10 * time.Second)
		if seen[d.key] {
			t.Fatalf("%v delivered twice", d.key)
		}
		seen[d.key] = true
	}
	if got := h.repo.Schedules(); got != n {
		t.Fatalf("schedules %d, want %d", got, n)
	}
	if got := h.repo.Pending(); got != 2*n {
		t.Fatalf("pending %d, want %d: each occurrence and its successor", got, 2*n)
	}
}

// TestDispatcher_Occurrence_AckDeletesPlannedUnread checks that the ACK
// of an occurrence that went out planned, having passed its client id on
// to its successor, deletes it without reading it again, with its entries:
// nothing of it is left (with a TTL, its expiry entry neither), and its
// subject counts the successor alone. The last occurrence of a schedule
// keeps its client id, which a new message may take over, and its delete
// reads it first, as before; its client id entry goes with it.
func TestDispatcher_Occurrence_AckDeletesPlannedUnread(t *testing.T) {
	for _, c := range []struct {
		name  string
		ttl   time.Duration
		limit uint64
		reads int64
	}{
		{"with a successor", 0, 0, 0},
		{"with a successor and a TTL", time.Hour, 0, 0},
		{"the last", 0, 1, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			st, err := pebblestore.Open(pebblestore.Config{InMemory: true})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = st.Close() })
			cs := &readCountStore{Store: st}
			repo, err := delaystore.OpenRepository(cs, delaystore.RepositoryConfig{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = repo.Close() })
			pub := newFakePublisher()
			d, err := dispatch.New(repo, pub, dispatch.Config{AckWait: 10 * time.Second, Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
			if err != nil {
				t.Fatal(err)
			}
			pub.d = d
			if err := d.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = d.Close() })
			h := &harness{t: t, repo: repo, d: d, pub: pub}

			m := occurrenceAt("rec", time.Hour, time.Now().Add(50*time.Millisecond), recur.All, c.limit)
			m.TtlNs = int64(c.ttl)
			k := h.schedule(m)[0]
			if got := h.next(30 * time.Second); got.key != k {
				t.Fatalf("delivered %v, want %v", got.key, k)
			}
			// What the repository keeps in memory would hide a read.
			repo.ReleaseMemory()
			cs.reads.Store(0)
			if err := h.ack(k, dispatch.Ack{Kind: dispatch.AckDone}); err != nil {
				t.Fatal(err)
			}
			if got := cs.reads.Load(); got != c.reads {
				t.Fatalf("the ACK's delete read %d messages from the store, want %d", got, c.reads)
			}
			if ok, err := repo.Has(k); err != nil || ok {
				t.Fatalf("after the ACK: Has = %v, %v; want it gone", ok, err)
			}
			wantPending := uint64(1) // the successor
			if c.limit == 1 {
				wantPending = 0
				if _, err := repo.Lookup("rec", "job"); !errors.Is(err, delaystore.ErrNotFound) {
					t.Fatalf("the last occurrence's client id entry: %v, want it gone", err)
				}
			}
			if n, err := repo.PendingFor("rec"); err != nil || n != wantPending {
				t.Fatalf("pending on the subject %d, %v; want %d", n, err, wantPending)
			}
			expired, err := repo.Expired(time.Now().Add(100*time.Hour).UnixNano(), 10)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range expired {
				if e == k {
					t.Fatal("its expiry entry outlived it")
				}
			}
			if err := repo.Check(); err != nil {
				t.Fatalf("Check after the ACK: %v", err)
			}
		})
	}
}
