package dispatch_test

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/dispatch"
	"github.com/natsdelay/natsdelay/dispatch/recur"
	"github.com/natsdelay/natsdelay/keys"
)

// clockedPublisher is fakePublisher that records, for each delivery,
// whether the harness's clock had reached the message's time.
type clockedPublisher struct {
	*fakePublisher
	clock *fakeClock

	// hold, if set before the burst goes out, is called at each
	// delivery, with its number from 1, before it is published.
	hold func(n int)
	n    atomic.Int64

	mu    sync.Mutex
	early []string
}

func (p *clockedPublisher) Deliver(k keys.Key, m *delaystore.StoredMessage, attempt uint32) error {
	if p.hold != nil {
		p.hold(int(p.n.Add(1)))
	}
	if now := p.clock.now().UnixNano(); m.FireAtNs > now {
		p.mu.Lock()
		p.early = append(p.early, fmt.Sprintf("%s %v, %v before its time", m.Subject, k, time.Duration(m.FireAtNs-now)))
		p.mu.Unlock()
	}
	return p.fakePublisher.Deliver(k, m, attempt)
}

func (p *clockedPublisher) earlyOnes() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.early...)
}

// stageHarness is a plan-ahead harness whose bursts of StageMin (4)
// occurrences due together are staged as soon as they are planned.
type stageHarness struct {
	*planAheadHarness
	pub *clockedPublisher
}

func newStageHarness(t *testing.T) *stageHarness {
	t.Helper()
	return newStageHarnessWith(t, nil)
}

// newStageHarnessWith is newStageHarness with mod applied to its
// configuration.
func newStageHarnessWith(t *testing.T, mod func(*dispatch.Config)) *stageHarness {
	t.Helper()
	cp := &clockedPublisher{}
	wrap := func(p *fakePublisher) dispatch.Publisher { cp.fakePublisher = p; return cp }
	h := newWrappedPlanAheadHarness(t, wrap, func(c *dispatch.Config) {
		c.StageMin = 4
		c.StageAhead = time.Hour
		if mod != nil {
			mod(c)
		}
	})
	cp.clock = h.clock
	return &stageHarness{planAheadHarness: h, pub: cp}
}

// burst schedules one occurrence on each of n subjects, "rec0" and on,
// due at occ, waits until the planner planned them and the dispatcher
// staged their pass (taken as flights, not published), and returns
// their keys by subject.
func (h *stageHarness) burst(n int, occ time.Time) map[string]keys.Key {
	h.t.Helper()
	var msgs []*delaystore.StoredMessage
	for i := range n {
		msgs = append(msgs, occurrenceAt(fmt.Sprintf("rec%d", i), time.Hour, occ, recur.One, 0))
	}
	ks := h.schedule(msgs...)
	h.waitCommit()
	checkFor(h.t, 10*time.Second, func() error {
		if got := h.d.Stats().InFlight; got != uint64(n) {
			return fmt.Errorf("the burst's pass not staged: %d in flight, want %d", got, n)
		}
		return nil
	})
	select {
	case d := <-h.pub.deliveries:
		h.t.Fatalf("delivered while staged, before its time: %v", d)
	default:
	}
	bySubject := map[string]keys.Key{}
	for i, k := range ks {
		bySubject[msgs[i].Subject] = k
	}
	return bySubject
}

// at moves the clock to t and wakes the dispatcher, whose staged passes
// wait for the clock.
func (h *stageHarness) at(t time.Time) {
	h.clock.set(t)
	if err := h.d.ReloadLimits(); err != nil { // wakes the loop
		h.t.Fatal(err)
	}
}

// eachOnce takes n deliveries and returns their keys, failing the test
// if one comes twice.
func (h *stageHarness) eachOnce(n int) map[keys.Key]bool {
	h.t.Helper()
	got := map[keys.Key]bool{}
	for range n {
		d := h.next(10 * time.Second)
		if got[d.key] {
			h.t.Fatalf("%v delivered twice", d.key)
		}
		got[d.key] = true
	}
	return got
}

// checkStagedNoneEarly checks that nothing was delivered before its
// time and that the burst went out staged.
func (h *stageHarness) checkStagedNoneEarly() {
	h.t.Helper()
	if early := h.pub.earlyOnes(); len(early) > 0 {
		h.t.Fatalf("delivered early: %v", early)
	}
	if n := h.d.Stats().StagedPasses; n == 0 {
		h.t.Fatal("the burst went out with no staged pass")
	}
}

// Guarantee: never early, and each once: a burst of occurrences planned
// ahead is read before its time (its flights taken while the clock is
// short of it) and published once the clock reaches it, every one, none
// before.
func TestDispatcher_Stage_BurstReadAheadPublishedAtItsTime(t *testing.T) {
	h := newStageHarness(t)
	occ := h.clock.now().Add(300 * time.Millisecond)
	ks := h.burst(8, occ)

	h.at(occ)
	got := h.eachOnce(len(ks))
	for s, k := range ks {
		if !got[k] {
			t.Fatalf("%s's occurrence %v not delivered", s, k)
		}
	}
	h.checkStagedNoneEarly()
}

// Guarantee: order per subject. A message that arrives, while a burst
// is staged, due before it on one of its subjects goes out before that
// subject's occurrence: the staged flight is taken back and the subject
// scanned again in order. The other subjects' occurrences go out staged.
func TestDispatcher_Stage_ArrivalBelowAStagedFlightGoesFirst(t *testing.T) {
	h := newStageHarness(t)
	occ := h.clock.now().Add(300 * time.Millisecond)
	ks := h.burst(8, occ)
	before := h.schedule(msgAt("rec0", occ.Add(-100*time.Millisecond)))[0]

	h.at(occ)
	var rec0 []keys.Key
	for range len(ks) + 1 {
		d := h.next(10 * time.Second)
		if d.subject == "rec0" {
			rec0 = append(rec0, d.key)
		}
	}
	if len(rec0) != 2 || rec0[0] != before || rec0[1] != ks["rec0"] {
		t.Fatalf("rec0 got %v, want %v (arrived while staged, due first) then %v (its staged occurrence)", rec0, before, ks["rec0"])
	}
	h.checkStagedNoneEarly()
}

// Guarantee: a pause holds. A subject paused while its occurrence is
// staged gets nothing at the burst's time; the others do, and it gets
// its occurrence once resumed.
func TestDispatcher_Stage_PausedWhileStagedHoldsItsSubject(t *testing.T) {
	h := newStageHarness(t)
	occ := h.clock.now().Add(300 * time.Millisecond)
	ks := h.burst(8, occ)
	setLimit(t, h.harness, delaystore.Limit{Pattern: "rec3", Paused: true})

	h.at(occ)
	for range len(ks) - 1 {
		if d := h.next(10 * time.Second); d.subject == "rec3" {
			t.Fatalf("paused rec3 delivered %v", d.key)
		}
	}
	if _, err := h.repo.DeleteLimit("rec3"); err != nil {
		t.Fatal(err)
	}
	if err := h.d.ReloadLimits(); err != nil {
		t.Fatal(err)
	}
	if d := h.next(10 * time.Second); d.key != ks["rec3"] {
		t.Fatalf("after the resume got %v, want rec3's occurrence %v", d.key, ks["rec3"])
	}
}

// Guarantee: a fenced leader acts on nothing. A node that loses its
// fence (its leadership lease) while a burst is staged publishes none of
// it at the burst's time, and publishes all of it, once each, when it
// holds the fence again.
func TestDispatcher_Stage_FencedWhileStagedPublishesNothing(t *testing.T) {
	var fenced atomic.Bool
	h := newStageHarnessWith(t, func(c *dispatch.Config) { c.Fence = func() bool { return !fenced.Load() } })
	occ := h.clock.now().Add(300 * time.Millisecond)
	ks := h.burst(8, occ)

	fenced.Store(true)
	h.at(occ)
	checkFor(t, 10*time.Second, func() error {
		if n := h.d.Stats().Fenced; n < uint64(len(ks)) {
			return fmt.Errorf("%d deliveries held back by the fence, want %d", n, len(ks))
		}
		return nil
	})
	select {
	case d := <-h.pub.deliveries:
		t.Fatalf("delivered %v without the fence", d.key)
	default:
	}

	fenced.Store(false)
	h.eachOnce(len(ks))
	if early := h.pub.earlyOnes(); len(early) > 0 {
		t.Fatalf("delivered early: %v", early)
	}
}

// stalledBurst stages a burst of 8 and lets it out up to its second
// delivery, which then waits for the returned release to close; it
// returns the first delivery's key.
func (h *stageHarness) stalledBurst() (first keys.Key, release chan struct{}) {
	h.t.Helper()
	occ := h.clock.now().Add(300 * time.Millisecond)
	h.burst(8, occ)
	stalled, release := make(chan struct{}), make(chan struct{})
	h.pub.hold = func(n int) {
		if n == 2 {
			close(stalled)
			<-release
		}
	}
	h.t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release) // before the harness's Close waits for the pass
		}
	})
	h.at(occ)
	first = h.next(10 * time.Second).key
	<-stalled
	return first, release
}

// ackInBackground ACKs k and returns where the ACK's result arrives once
// its delete committed.
func (h *stageHarness) ackInBackground(k keys.Key) <-chan error {
	acked := make(chan error, 1)
	h.d.Ack(k, dispatch.Ack{Kind: dispatch.AckDone}, func(err error) { acked <- err })
	return acked
}

// Guarantee: the deletes of ACKs that come back while a staged burst goes
// out are committed after its publishes, not among them, and they are
// committed, each, once it is out.
func TestDispatcher_Stage_DeletesWaitForTheBurst(t *testing.T) {
	h := newStageHarnessWith(t, func(c *dispatch.Config) { c.DeleteHold = time.Hour })
	first, release := h.stalledBurst()

	acked := h.ackInBackground(first)
	checkFor(t, 10*time.Second, func() error {
		if h.d.DeletesHeldForTest() == 0 {
			return fmt.Errorf("the deleter has not waited for the burst")
		}
		return nil
	})
	select {
	case err := <-acked:
		t.Fatalf("the ACK's delete committed while the burst was going out (err %v)", err)
	default:
	}

	close(release)
	for range 7 {
		h.next(10 * time.Second)
	}
	select {
	case err := <-acked:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the ACK's delete was not committed after the burst")
	}
	if _, err := h.repo.Get(first); !errors.Is(err, delaystore.ErrNotFound) {
		t.Fatalf("the ACKed occurrence after its delete: %v, want ErrNotFound", err)
	}
	h.checkStagedNoneEarly()
}

// Guarantee: a delete waits for a burst a bounded time: a burst that
// never ends (here, a publish that hangs) does not keep an ACK's delete
// from being committed.
func TestDispatcher_Stage_DeleteHoldIsBounded(t *testing.T) {
	h := newStageHarnessWith(t, func(c *dispatch.Config) { c.DeleteHold = 50 * time.Millisecond })
	first, _ := h.stalledBurst()

	select {
	case err := <-h.ackInBackground(first):
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the ACK's delete waited for the burst without end")
	}
	if h.d.DeletesHeldForTest() == 0 {
		t.Fatal("the deleter did not wait for the burst at all")
	}
}
