package dispatch_test

import (
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

	mu    sync.Mutex
	early []string
}

func (p *clockedPublisher) Deliver(k keys.Key, m *delaystore.StoredMessage, attempt uint32) error {
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
	got := map[keys.Key]bool{}
	for range ks {
		d := h.next(10 * time.Second)
		if got[d.key] {
			t.Fatalf("%v delivered twice", d.key)
		}
		got[d.key] = true
	}
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
	got := map[keys.Key]bool{}
	for range ks {
		d := h.next(10 * time.Second)
		if got[d.key] {
			t.Fatalf("%v delivered twice", d.key)
		}
		got[d.key] = true
	}
	if early := h.pub.earlyOnes(); len(early) > 0 {
		t.Fatalf("delivered early: %v", early)
	}
}
