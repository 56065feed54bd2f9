package dispatch_test

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/delaystore/pebblestore"
	"github.com/natsdelay/natsdelay/dispatch"
	"github.com/natsdelay/natsdelay/keys"
)

// newCountingHarness is newHarness on a store that counts each topic's
// range scans.
func newCountingHarness(t *testing.T, mod func(*dispatch.Config)) (*harness, *rangeCountingStore) {
	t.Helper()
	return newCountingWrappedHarness(t, nil, mod)
}

// newCountingWrappedHarness is newCountingHarness whose dispatcher
// publishes through wrap(the fake publisher), unless wrap is nil.
func newCountingWrappedHarness(t *testing.T, wrap func(*fakePublisher) dispatch.Publisher, mod func(*dispatch.Config)) (*harness, *rangeCountingStore) {
	t.Helper()
	inner, err := pebblestore.Open(pebblestore.Config{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	st := &rangeCountingStore{Store: inner, scans: map[uint64]int{}}
	repo, err := delaystore.OpenRepository(st, delaystore.RepositoryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	pub := newFakePublisher()
	cfg := dispatch.Config{AckWait: time.Hour, Logger: slog.New(slog.NewTextHandler(t.Output(), nil))}
	if mod != nil {
		mod(&cfg)
	}
	var p dispatch.Publisher = pub
	if wrap != nil {
		p = wrap(pub)
	}
	d, err := dispatch.New(repo, p, cfg)
	if err != nil {
		t.Fatal(err)
	}
	pub.d = d
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = d.Close()
		_ = repo.Close()
		_ = inner.Close()
	})
	return &harness{t: t, repo: repo, d: d, pub: pub}, st
}

// waitLimited waits until the dispatcher holds n subjects at their limit.
func waitLimited(t *testing.T, d *dispatch.Dispatcher, n uint64) {
	t.Helper()
	checkFor(t, 10*time.Second, func() error {
		if got := d.Stats().Limited; got != n {
			return fmt.Errorf("%d subjects limited, want %d", got, n)
		}
		return nil
	})
}

// TestDispatcher_SubjectAtLimit_OthersGoOut checks the per-subject share
// of the window: a subject whose deliveries go unanswered holds its limit
// and no more, in a window with room to spare, and every other subject's
// messages go out beside it; the subject is shown as limited.
func TestDispatcher_SubjectAtLimit_OthersGoOut(t *testing.T) {
	const limit, silent, others = 3, 20, 10
	h, _ := newCountingHarness(t, func(c *dispatch.Config) { c.MaxInFlight = 100; c.SubjectMaxInFlight = limit })
	for range silent {
		h.schedule(msgAt("silent", time.Now()))
	}
	for range limit {
		if d := h.next(10 * time.Second); d.subject != "silent" {
			t.Fatalf("delivered %s, want silent", d.subject)
		}
	}
	waitLimited(t, h.d, 1)
	for i := range others {
		h.schedule(msgAt(fmt.Sprintf("other.%d", i%5), time.Now())) // within their limits
	}
	for range others {
		if d := h.next(10 * time.Second); d.subject == "silent" {
			t.Fatalf("delivered %v of silent beyond its limit of %d", d.key, limit)
		}
	}
	if st := h.d.Subject("silent"); st.InFlight != limit || !st.Limited {
		t.Fatalf("Subject(silent) = %+v, want %d in flight and limited", st, limit)
	}
	if st := h.d.Subject("other.0"); st.Limited {
		t.Fatalf("Subject(other.0) = %+v, want not limited", st)
	}
}

// TestDispatcher_SubjectAtLimit_ResumesInFireOrder checks order per
// subject through the hold: a subject held at its limit goes on, as
// answers make room, with its next messages in fire order, each delivered
// once, until none is left and it is no longer limited.
func TestDispatcher_SubjectAtLimit_ResumesInFireOrder(t *testing.T) {
	const limit, n = 4, 30
	h, _ := newCountingHarness(t, func(c *dispatch.Config) { c.SubjectMaxInFlight = limit })
	base := time.Now().Add(-time.Minute)
	var msgs []*delaystore.StoredMessage
	for i := range n {
		msgs = append(msgs, msgAt("ordered", base.Add(time.Duration(i)*time.Millisecond)))
	}
	want := h.schedule(msgs...)
	var inFlight []keys.Key
	for i := range n {
		d := h.next(10 * time.Second)
		if d.key != want[i] || d.attempt != 1 {
			t.Fatalf("delivery %d: %v attempt %d, want %v attempt 1", i, d.key, d.attempt, want[i])
		}
		inFlight = append(inFlight, d.key)
		if len(inFlight) == limit {
			if i < n-1 {
				waitLimited(t, h.d, 1)
			}
			// Answered out of order: room, not order of answers, decides.
			for j := len(inFlight) - 1; j >= 0; j-- {
				if err := h.ack(inFlight[j], dispatch.Ack{Kind: dispatch.AckDone}); err != nil {
					t.Fatal(err)
				}
			}
			inFlight = inFlight[:0]
		}
	}
	waitLimited(t, h.d, 0)
}

// TestDispatcher_SubjectAtLimit_NotReadAgain checks that a subject held
// at its limit costs nothing while it waits: however many passes deliver
// other subjects, and however many of its own messages arrive, it is not
// read again until an answer to one of its own deliveries makes room.
func TestDispatcher_SubjectAtLimit_NotReadAgain(t *testing.T) {
	const limit = 2
	h, st := newCountingHarness(t, func(c *dispatch.Config) { c.SubjectMaxInFlight = limit })
	for range 10 {
		h.schedule(msgAt("held", time.Now()))
	}
	var first keys.Key
	for i := range limit {
		if d := h.next(10 * time.Second); i == 0 {
			first = d.key
		}
	}
	waitLimited(t, h.d, 1)
	scans := st.scansOf("held")
	for i := range 20 {
		h.schedule(msgAt("held", time.Now()))
		k := h.schedule(msgAt("busy", time.Now()))[0]
		if d := h.next(10 * time.Second); d.key != k {
			t.Fatalf("pass %d delivered %s %v, want the busy subject's %v", i, d.subject, d.key, k)
		}
		if err := h.ack(k, dispatch.Ack{Kind: dispatch.AckDone}); err != nil {
			t.Fatal(err)
		}
	}
	if n := st.scansOf("held"); n != scans {
		t.Fatalf("the held subject was read %d times more while at its limit, want none", n-scans)
	}
	if err := h.ack(first, dispatch.Ack{Kind: dispatch.AckDone}); err != nil {
		t.Fatal(err)
	}
	if d := h.next(10 * time.Second); d.subject != "held" || d.attempt != 1 {
		t.Fatalf("after an answer delivered %s attempt %d, want the held subject's next message", d.subject, d.attempt)
	}
}

// TestDispatcher_SubjectAtLimit_RedeliveredWithinItsShare checks that
// unanswered deliveries of a subject at its limit are redelivered every
// ack wait, the same messages within its own share, while no first
// delivery of it goes out.
func TestDispatcher_SubjectAtLimit_RedeliveredWithinItsShare(t *testing.T) {
	const limit = 3
	h, _ := newCountingHarness(t, func(c *dispatch.Config) { c.SubjectMaxInFlight = limit; c.AckWait = 100 * time.Millisecond })
	for range 10 {
		h.schedule(msgAt("mute", time.Now()))
	}
	first := map[keys.Key]bool{}
	for range limit {
		first[h.next(10*time.Second).key] = true
	}
	for range 3 * limit {
		d := h.next(10 * time.Second)
		if !first[d.key] || d.attempt < 2 {
			t.Fatalf("delivered %v attempt %d at the limit, want a redelivery of the first %d", d.key, d.attempt, limit)
		}
	}
}

// TestDispatcher_Rate_WokenForGroups checks that a subject held by its
// rate is woken for a group of tokens, not for each one: at 1,000/s with
// a burst of 10, the 300 messages after the burst take at most 120 passes
// (woken for each token, they took 258, each a wake-up, a pass and a
// flush; now about 30 wake-ups, 60 passes with the flushes' own), and all
// go out, in fire order.
func TestDispatcher_Rate_WokenForGroups(t *testing.T) {
	h, _ := newCountingHarness(t, nil)
	if err := h.repo.SetLimit(delaystore.Limit{Pattern: "rated", Rate: 1000, Burst: 10}); err != nil {
		t.Fatal(err)
	}
	if err := h.d.ReloadLimits(); err != nil {
		t.Fatal(err)
	}
	base := time.Now().Add(-time.Minute)
	var want []keys.Key
	for i := range 310 {
		want = append(want, h.schedule(msgAt("rated", base.Add(time.Duration(i)*time.Millisecond)))...)
	}
	// NB: nothing is answered, so that only the rate wakes the passes: an
	// answer would wake one of its own.
	for i, k := range want {
		d := h.next(10 * time.Second)
		if d.key != k {
			t.Fatalf("delivery %d is %v, want %v: in fire order", i, d.key, k)
		}
	}
	n := h.pub.flushCount()
	t.Logf("%d passes flushed deliveries", n)
	if n > 120 {
		t.Fatalf("%d passes flushed deliveries for 310 messages at 1,000/s, want 120 or fewer", n)
	}
}
