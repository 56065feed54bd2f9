package dispatch_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/dispatch"
	"github.com/natsdelay/natsdelay/keys"
)

// TestDispatcher_FutureSubjects_CostNothing checks that subjects whose
// messages are due later hold no state in the dispatcher, whether they were
// pending at Start or committed since (Notify): memory follows what is due
// and in flight, not what is pending. A message due now on another subject
// still goes out.
func TestDispatcher_FutureSubjects_CostNothing(t *testing.T) {
	_, repo := fillFuture(t, 1000) // before Start: found in the due index alone
	pub := newFakePublisher()
	d, err := dispatch.New(repo, pub, dispatch.Config{AckWait: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	pub.d = d
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	h := &harness{t: t, repo: repo, d: d, pub: pub}
	later := time.Now().Add(time.Hour)
	for i := range 10 {
		var msgs []*delaystore.StoredMessage
		for j := range 100 {
			msgs = append(msgs, msgAt(fmt.Sprintf("later.%d.%d", i, j), later))
		}
		h.schedule(msgs...)
	}
	k := h.schedule(msgAt("now", time.Now()))[0]
	if got := h.next(10 * time.Second); got.key != k {
		t.Fatalf("delivered %v, want the due message %v", got.key, k)
	}
	if err := h.ack(k, dispatch.Ack{Kind: dispatch.AckDone}); err != nil {
		t.Fatal(err)
	}
	checkFor(t, 10*time.Second, func() error {
		if s := d.Stats(); s.Topics != 0 || s.InFlight != 0 {
			return fmt.Errorf("state kept for %d subjects, %d in flight, with only future messages pending; want none", s.Topics, s.InFlight)
		}
		return nil
	})
	if p := repo.Pending(); p != scalePending+1000 {
		t.Fatalf("pending %d, want %d", p, scalePending+1000)
	}
}

// TestDispatcher_DueIndex_OrderAfterStart checks never early and order per
// subject for messages the dispatcher learns of only from the due index:
// stored before Start, none of them Notified, some due already and some
// due over the next few hundred milliseconds, interleaved over subjects,
// with a coarse time bucket too.
func TestDispatcher_DueIndex_OrderAfterStart(t *testing.T) {
	for _, bucket := range []time.Duration{0, 100 * time.Millisecond} {
		t.Run(bucket.String(), func(t *testing.T) {
			h := newHarness(t, bucket, nil)
			_ = h.d.Close() // a dispatcher from before the messages, gone
			now := time.Now()
			const subjects, each = 20, 10
			var msgs []*delaystore.StoredMessage
			for i := range each {
				for s := range subjects {
					// Later publishes fire earlier on odd subjects: the
					// order is fire time's, not publish order's.
					off := time.Duration(i*25) * time.Millisecond
					if s%2 == 1 {
						off = time.Duration((each-1-i)*25) * time.Millisecond
					}
					msgs = append(msgs, msgAt(fmt.Sprintf("s.%d", s), now.Add(off-100*time.Millisecond)))
				}
			}
			if _, err := h.repo.Schedule(msgs, delaystore.Sync); err != nil {
				t.Fatal(err)
			}
			pub := newFakePublisher()
			d, err := dispatch.New(h.repo, pub, dispatch.Config{AckWait: 10 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			pub.d = d
			if err := d.Start(); err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			last := map[string]delivery{}
			for range subjects * each {
				var got delivery
				select {
				case got = <-pub.deliveries:
				case <-time.After(10 * time.Second):
					t.Fatalf("%d subjects heard from; a delivery is missing", len(last))
				}
				if got.at.UnixNano() < got.fireAt {
					t.Fatalf("%v delivered %v before its fire time", got.key, time.Duration(got.fireAt-got.at.UnixNano()))
				}
				if p, ok := last[got.subject]; ok && (p.fireAt > got.fireAt || (p.fireAt == got.fireAt && p.key.EventID() > got.key.EventID())) {
					t.Fatalf("%s: %v (fire %d) delivered after %v (fire %d)", got.subject, got.key, got.fireAt, p.key, p.fireAt)
				}
				last[got.subject] = got
			}
		})
	}
}

// topicsPublisher is a fakePublisher that notes the most subjects the
// dispatcher held state for at any delivery.
type topicsPublisher struct {
	*fakePublisher
	most atomic.Uint64
}

func (p *topicsPublisher) Deliver(k keys.Key, m *delaystore.StoredMessage, attempt uint32) error {
	if n := p.d.Stats().Topics; n > p.most.Load() {
		p.most.Store(n)
	}
	return p.fakePublisher.Deliver(k, m, attempt)
}

// TestDispatcher_Backlog_TakenInSlices checks that a backlog due at once
// on many more subjects than a pass takes (as after an outage) is all
// delivered, once each, while the dispatcher holds state for a bounded
// number of subjects at a time, not for the whole backlog.
func TestDispatcher_Backlog_TakenInSlices(t *testing.T) {
	h := newHarness(t, 0, nil)
	_ = h.d.Close()
	const subjects = 3000
	past := time.Now().Add(-time.Minute)
	var msgs []*delaystore.StoredMessage
	for i := range subjects {
		msgs = append(msgs, msgAt(fmt.Sprintf("backlog.%d", i), past))
	}
	if _, err := h.repo.Schedule(msgs, delaystore.Sync); err != nil {
		t.Fatal(err)
	}
	pub := &topicsPublisher{fakePublisher: newFakePublisher()}
	const passLimit, window = 16, 64
	d, err := dispatch.New(h.repo, pub, dispatch.Config{AckWait: 10 * time.Second, PassLimit: passLimit, MaxInFlight: window})
	if err != nil {
		t.Fatal(err)
	}
	pub.d = d
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	seen := map[keys.Key]bool{}
	var wg sync.WaitGroup
	defer wg.Wait()
	for range subjects {
		var got delivery
		select {
		case got = <-pub.deliveries:
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d delivered", len(seen), subjects)
		}
		if seen[got.key] {
			t.Fatalf("%v delivered twice", got.key)
		}
		seen[got.key] = true
		wg.Add(1)
		d.Ack(got.key, dispatch.Ack{Kind: dispatch.AckDone}, func(err error) {
			defer wg.Done()
			if err != nil {
				t.Error(err)
			}
		})
	}
	// The due heap holds up to two passes' worth, flights a window's.
	if most := pub.most.Load(); most > 2*passLimit+window {
		t.Fatalf("held state for %d subjects at once, want at most %d", most, 2*passLimit+window)
	}
}

// TestDispatcher_BackingOff_DoesNotStopTheDueIndex checks that subjects
// backing off because nobody listens (more of them than the due heap takes
// from the due index at once) do not keep the dispatcher from finding what
// is due later on other subjects: a subject with a listener gets its
// message while the others wait out a back-off of an hour.
func TestDispatcher_BackingOff_DoesNotStopTheDueIndex(t *testing.T) {
	h := newHarness(t, 0, nil)
	_ = h.d.Close()
	const passLimit, absent = 4, 40 // the due heap takes 2*passLimit at once
	pub := newFakePublisher()
	now := time.Now()
	var msgs []*delaystore.StoredMessage
	for i := range absent {
		subject := fmt.Sprintf("nobody.%d", i)
		pub.setAbsent(subject, true)
		msgs = append(msgs, msgAt(subject, now.Add(-2*time.Second)))
	}
	msgs = append(msgs, msgAt("listened", now.Add(-time.Second)))
	res, err := h.repo.Schedule(msgs, delaystore.Sync)
	if err != nil {
		t.Fatal(err)
	}
	d, err := dispatch.New(h.repo, pub, dispatch.Config{AckWait: 10 * time.Second, PassLimit: passLimit,
		NoRespondersBackoff: time.Hour, NoRespondersMaxBackoff: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	pub.d = d
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	select {
	case got := <-pub.deliveries:
		if want := res[absent].Key; got.key != want {
			t.Fatalf("delivered %v, want %v", got.key, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the listened subject's message was not delivered; %d deliveries bounced", pub.bounces())
	}
}
