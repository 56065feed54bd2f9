package dispatch_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/delaystore/pebblestore"
	"github.com/natsdelay/natsdelay/dispatch"
	"github.com/natsdelay/natsdelay/dispatch/recur"
	"github.com/natsdelay/natsdelay/keys"
)

// fakeClock is a clock the test moves by hand.
type fakeClock struct{ ns atomic.Int64 }

func newFakeClock(t time.Time) *fakeClock {
	c := &fakeClock{}
	c.ns.Store(t.UnixNano())
	return c
}

func (c *fakeClock) now() time.Time  { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) set(t time.Time) { c.ns.Store(t.UnixNano()) }

// planAheadHarness is a harness on a fake clock whose repository reports
// every committed Advance batch on commits.
type planAheadHarness struct {
	*harness
	clock   *fakeClock
	commits chan struct{}
}

func newPlanAheadHarness(t *testing.T, mod func(*dispatch.Config)) *planAheadHarness {
	t.Helper()
	return newWrappedPlanAheadHarness(t, nil, mod)
}

// newWrappedPlanAheadHarness is newPlanAheadHarness whose dispatcher
// publishes through wrap(the fake publisher), unless wrap is nil.
func newWrappedPlanAheadHarness(t *testing.T, wrap func(*fakePublisher) dispatch.Publisher, mod func(*dispatch.Config)) *planAheadHarness {
	t.Helper()
	clock := newFakeClock(time.Now().Truncate(time.Second))
	commits := make(chan struct{}, 100)
	rc := delaystore.RepositoryConfig{AdvanceHook: func(s delaystore.AdvanceStage) {
		if s == delaystore.AdvanceAfterCommit {
			commits <- struct{}{}
		}
	}}
	h := newWrappedHarness(t, rc, wrap, func(c *dispatch.Config) {
		c.Now = clock.now
		if mod != nil {
			mod(c)
		}
	})
	return &planAheadHarness{harness: h, clock: clock, commits: commits}
}

// waitCommit waits for the next committed Advance batch.
func (h *planAheadHarness) waitCommit() {
	h.t.Helper()
	select {
	case <-h.commits:
	case <-time.After(10 * time.Second):
		h.t.Fatal("no Advance batch committed")
	}
}

// noCommit checks that no Advance batch committed since the last one
// waited for.
func (h *planAheadHarness) noCommit(when string) {
	h.t.Helper()
	select {
	case <-h.commits:
		h.t.Fatalf("an Advance batch committed %s", when)
	default:
	}
}

// TestDispatcher_PlanAhead_PublishedWithNoCommitFirst checks that an
// occurrence planned ahead (its successor stored, itself marked planned)
// goes out once it falls due with no planning commit between its falling
// due and its publish, and never before its planned time.
func TestDispatcher_PlanAhead_PublishedWithNoCommitFirst(t *testing.T) {
	h := newPlanAheadHarness(t, nil)
	occ := h.clock.now().Add(300 * time.Millisecond)
	k := h.schedule(occurrenceAt("rec", time.Hour, occ, recur.One, 0))[0]

	h.waitCommit() // the planner's batch, while the clock is short of occ
	m, err := h.repo.Get(k)
	if err != nil {
		t.Fatal(err)
	}
	if !m.Recurrence.Planned || m.Recurrence.NextNs != occ.Add(time.Hour).UnixNano() {
		t.Fatalf("before its time: planned %v, next %d; want planned, next an hour on", m.Recurrence.Planned, m.Recurrence.NextNs)
	}
	if pend := h.pendingOf("rec"); len(pend) != 2 {
		t.Fatalf("pending %d, want the occurrence and its successor", len(pend))
	}
	select {
	case d := <-h.pub.deliveries:
		t.Fatalf("delivered before its time: %v", d)
	default:
	}

	h.clock.set(occ)
	d := h.next(10 * time.Second)
	if d.key != k || d.fireAt != occ.UnixNano() {
		t.Fatalf("delivered %v at %d, want %v at %d", d.key, d.fireAt, k, occ.UnixNano())
	}
	h.noCommit("between the occurrence falling due and its publish")
	if st := h.d.Stats(); st.PlannedOnDelivery != 0 {
		t.Fatalf("planned on delivery %d, want 0", st.PlannedOnDelivery)
	}
	if err := h.d.Close(); err != nil { // waits for the planner
		t.Fatal(err)
	}
	if st := h.d.Stats(); st.PlannedAhead != 1 {
		t.Fatalf("planned ahead %d, want 1", st.PlannedAhead)
	}
}

// TestDispatcher_PlanAhead_Off checks that with planning ahead disabled an
// occurrence is planned by the pass that delivers it, in a commit before
// its publish, as the fallback for whatever the planner did not plan.
func TestDispatcher_PlanAhead_Off(t *testing.T) {
	h := newPlanAheadHarness(t, func(c *dispatch.Config) { c.PlanAhead = -1 })
	occ := h.clock.now().Add(300 * time.Millisecond)
	k := h.schedule(occurrenceAt("rec", time.Hour, occ, recur.One, 0))[0]
	h.clock.set(occ)
	d := h.next(10 * time.Second)
	if d.key != k {
		t.Fatalf("delivered %v, want %v", d.key, k)
	}
	h.waitCommit() // the pass's batch, committed before the publish
	st := h.d.Stats()
	if st.PlannedOnDelivery != 1 || st.PlannedAhead != 0 {
		t.Fatalf("planned on delivery %d, ahead %d; want 1 and 0", st.PlannedOnDelivery, st.PlannedAhead)
	}
	if pend := h.pendingOf("rec"); len(pend) != 2 {
		t.Fatalf("pending %d, want the occurrence and its successor", len(pend))
	}
}

// TestDispatcher_PlanAhead_EndedByIDBeforeDue checks that a schedule
// canceled or replaced by its Delay-Id after its next occurrence was
// planned ahead, but before that occurrence fell due, sends nothing more
// of the old schedule: the occurrence is withdrawn unsent and deleted, as
// it would have been had it not been planned yet.
func TestDispatcher_PlanAhead_EndedByIDBeforeDue(t *testing.T) {
	for _, how := range []string{"cancel", "replace"} {
		t.Run(how, func(t *testing.T) {
			h := newPlanAheadHarness(t, nil)
			occ := h.clock.now().Add(300 * time.Millisecond)
			k := h.schedule(occurrenceAt("rec", time.Hour, occ, recur.One, 0))[0]
			h.waitCommit()

			succ, err := h.repo.Lookup("rec", "job")
			if err != nil || succ == k {
				t.Fatalf("Delay-Id points at %v, %v; want the successor", succ, err)
			}
			switch how {
			case "cancel":
				ok, err := h.d.Cancel(context.Background(), succ)
				if err != nil || !ok {
					t.Fatalf("cancel: %v, %v", ok, err)
				}
				// A CANCEL answered leaves nothing of the schedule
				// pending: the withdrawn occurrence is deleted with
				// it, not left to show in GET and LIST until its time.
				if _, err := h.repo.Get(k); !errors.Is(err, delaystore.ErrNotFound) {
					t.Fatalf("the withdrawn occurrence after the CANCEL: %v, want gone", err)
				}
			case "replace":
				h.schedule(occurrenceAt("rec", time.Hour, occ.Add(2*time.Hour), recur.One, 0))
			}
			// A plain message just after it on the same subject: the
			// pass that takes the occurrence takes it next, so its
			// delivery says the occurrence's turn has come and gone.
			after := msgAt("rec", occ.Add(time.Millisecond))
			sentinel := h.schedule(after)[0]

			h.clock.set(occ.Add(10 * time.Millisecond))
			if d := h.next(10 * time.Second); d.key != sentinel {
				t.Fatalf("delivered %v, want only the plain message %v", d.key, sentinel)
			}
			if err := h.d.Close(); err != nil { // commits the queued deletes
				t.Fatal(err)
			}
			if st := h.d.Stats(); st.Withdrawn != 1 || st.Delivered+st.Redelivered > 1 {
				t.Fatalf("withdrawn %d, delivered %d; want 1 withdrawn and only the plain message delivered", st.Withdrawn, st.Delivered)
			}
			if _, err := h.repo.Get(k); err == nil {
				t.Fatal("the withdrawn occurrence is still stored")
			}
			var rest []int64
			for _, m := range h.pendingOf("rec") {
				if m.Recurrence != nil {
					rest = append(rest, m.FireAtNs)
				}
			}
			want := 0
			if how == "replace" {
				want = 1 // the new schedule's first occurrence
			}
			if len(rest) != want {
				t.Fatalf("occurrences left %v, want %d", rest, want)
			}
		})
	}
}

// TestDispatcher_PlanAhead_RestartDeliversPlannedOnce checks crash safety
// of planning ahead: a process that stops after the planning commit and
// before the occurrence fell due leaves it planned and its successor
// stored; the next process delivers the occurrence under its tag, plans
// nothing again, and the schedule goes on with the successor.
func TestDispatcher_PlanAhead_RestartDeliversPlannedOnce(t *testing.T) {
	h := newPlanAheadHarness(t, nil)
	occ := h.clock.now().Add(300 * time.Millisecond)
	k := h.schedule(occurrenceAt("rec", time.Hour, occ, recur.One, 0))[0]
	h.waitCommit()
	if err := h.d.Close(); err != nil {
		t.Fatal(err)
	}

	h.clock.set(occ.Add(time.Second))
	pub := newFakePublisher()
	d, err := dispatch.New(h.repo, pub, dispatch.Config{AckWait: 10 * time.Second, Now: h.clock.now, Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatal(err)
	}
	pub.d = d
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	var got delivery
	select {
	case got = <-pub.deliveries:
	case <-time.After(10 * time.Second):
		t.Fatal("no delivery after the restart")
	}
	if got.key != k {
		t.Fatalf("delivered %v, want the planned occurrence %v", got.key, k)
	}
	h.noCommit("for an occurrence planned before the restart")
	if pend := h.pendingOf("rec"); len(pend) != 2 || pend[1].FireAtNs != occ.Add(time.Hour).UnixNano() || pend[1].Recurrence.Planned {
		t.Fatalf("pending %v, want the occurrence and its unplanned successor", pend)
	}
	if st := d.Stats(); st.PlannedOnDelivery != 0 {
		t.Fatalf("planned on delivery %d, want 0", st.PlannedOnDelivery)
	}
}

// TestDispatcher_PlanAhead_ShortInterval checks that a successor planned
// within the range the planner has read (an interval shorter than the
// look-ahead) is planned ahead too, before its own time, not left for the
// pass that delivers it.
func TestDispatcher_PlanAhead_ShortInterval(t *testing.T) {
	h := newPlanAheadHarness(t, func(c *dispatch.Config) { c.PlanAhead = time.Second })
	occ := h.clock.now().Add(300 * time.Millisecond)
	// NB: another schedule due later in the window, in the same commit,
	// so the planner has read past where the successor goes.
	other := occurrenceAt("other", time.Hour, occ.Add(600*time.Millisecond), recur.One, 0)
	h.schedule(occurrenceAt("rec", 200*time.Millisecond, occ, recur.One, 0), other)
	h.waitCommit() // the first occurrences of both
	h.waitCommit() // the successor, 200 ms later, still within the window
	pend := h.pendingOf("rec")
	if len(pend) < 3 || !pend[0].Recurrence.Planned || !pend[1].Recurrence.Planned || pend[1].FireAtNs != occ.Add(200*time.Millisecond).UnixNano() {
		t.Fatalf("pending %v, want the first two occurrences planned and a third stored", pend)
	}
	select {
	case d := <-h.pub.deliveries:
		t.Fatalf("delivered before its time: %v", d)
	default:
	}
}

// TestDispatcher_PlanAhead_TTLCountsFromDelivery checks that an occurrence
// with a TTL is not planned ahead: its expiry counts from when it first
// goes out, so a pass that reaches it later than the TTL after its time
// still delivers it instead of finding it expired.
func TestDispatcher_PlanAhead_TTLCountsFromDelivery(t *testing.T) {
	h := newPlanAheadHarness(t, nil)
	occ := h.clock.now().Add(300 * time.Millisecond)
	m := occurrenceAt("rec", time.Hour, occ, recur.One, 0)
	m.TtlNs = int64(50 * time.Millisecond)
	// A schedule without a TTL due at the same time, stored in the same
	// commit: its planning tells that the planner has read past both.
	companion := occurrenceAt("companion", time.Hour, occ, recur.One, 0)
	k := h.schedule(m, companion)[0]
	h.waitCommit()
	if got, _ := h.repo.Get(k); got.Recurrence.Planned {
		t.Fatal("the occurrence with a TTL was planned ahead")
	}
	h.clock.set(occ.Add(time.Second)) // the pass is a second late
	for range 2 {
		if d := h.next(10 * time.Second); d.subject == "rec" && d.key != k {
			t.Fatalf("delivered %v, want the occurrence %v", d.key, k)
		}
	}
	h.waitCommit() // planned by the pass, as it went out
	if st := h.d.Stats(); st.PlannedOnDelivery != 1 || st.Expired != 0 {
		t.Fatalf("planned on delivery %d, expired %d; want 1 and 0", st.PlannedOnDelivery, st.Expired)
	}
	got, err := h.repo.Get(k)
	if err != nil {
		t.Fatal(err)
	}
	if want := occ.Add(time.Second + 50*time.Millisecond).UnixNano(); got.ExpireAtNs != want {
		t.Fatalf("expires at %d, want %d: the TTL after it went out", got.ExpireAtNs, want)
	}
}

// readCountStore wraps a Store and counts the messages read from it (the
// values of 24-byte event keys, by Get or by Scan); index entries and
// counts are not messages.
type readCountStore struct {
	delaystore.Store
	reads atomic.Int64
}

func (s *readCountStore) Get(k []byte) ([]byte, error) {
	if len(k) == keys.Len {
		s.reads.Add(1)
	}
	return s.Store.Get(k)
}

func (s *readCountStore) Scan(opts delaystore.IterOptions, yield func(k, v []byte) bool) error {
	return s.Store.Scan(opts, func(k, v []byte) bool {
		if len(k) == keys.Len {
			s.reads.Add(1)
		}
		return yield(k, v)
	})
}

// TestDispatcher_PlanAhead_ReadsOnlyOccurrences checks that what the
// planner reads follows the occurrences due within its look-ahead, not
// the messages due there: with two recurring schedules and thousands of
// one-shot messages due within the window, it reads each occurrence to
// plan it and its successor to check that it is still there, and no
// one-shot message, since each read is made under the repository's write
// lock that ingest and deletes wait for. The successor, written by the
// dispatcher's own repository, is read back from memory.
func TestDispatcher_PlanAhead_ReadsOnlyOccurrences(t *testing.T) {
	const schedules = 2
	st, err := pebblestore.Open(pebblestore.Config{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	cs := &readCountStore{Store: st}
	writer, err := delaystore.OpenRepository(cs, delaystore.RepositoryConfig{})
	if err != nil {
		t.Fatal(err)
	}

	clock := newFakeClock(time.Now().Truncate(time.Second))
	now := clock.now()
	const oneShots = 3000
	var msgs []*delaystore.StoredMessage
	for i := range oneShots {
		msgs = append(msgs, msgAt(fmt.Sprintf("one.%d", i%300), now.Add(100*time.Millisecond+time.Duration(i)*200*time.Microsecond)))
	}
	for i := range schedules {
		// NB: every 10 s, so the successors are due beyond the
		// look-ahead and within the minute in which the repository
		// keeps in memory what it wrote (delaystore's cacheHorizon).
		msgs = append(msgs, occurrenceAt(fmt.Sprintf("rec.%d", i), 10*time.Second, now.Add(300*time.Millisecond+time.Duration(i)*100*time.Millisecond), recur.One, 0))
	}
	if _, err := writer.Schedule(msgs, delaystore.Sync); err != nil {
		t.Fatal(err)
	}
	// NB: the dispatcher's repository is another, so that it reads these
	// from the store: a repository serves what it wrote itself from
	// memory, which would hide a read of a one-shot message here.
	if err := writer.Close(); err != nil {
		t.Fatal(err)
	}
	commits := make(chan struct{}, 10)
	repo, err := delaystore.OpenRepository(cs, delaystore.RepositoryConfig{AdvanceHook: func(s delaystore.AdvanceStage) {
		if s == delaystore.AdvanceAfterCommit {
			commits <- struct{}{}
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = repo.Close() })
	cs.reads.Store(0)

	pub := newFakePublisher()
	d, err := dispatch.New(repo, pub, dispatch.Config{AckWait: 10 * time.Second, PlanAhead: time.Second, Now: clock.now,
		Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatal(err)
	}
	pub.d = d
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	select {
	case <-commits: // the planner's batch: both are within its first read
	case <-time.After(10 * time.Second):
		t.Fatal("no occurrence planned ahead")
	}
	if err := d.Close(); err != nil { // waits for the planner
		t.Fatal(err)
	}
	if st := d.Stats(); st.PlannedAhead != uint64(schedules) {
		t.Fatalf("planned ahead %d, want %d", st.PlannedAhead, schedules)
	}
	if got, want := cs.reads.Load(), int64(schedules); got != want {
		t.Fatalf("the dispatcher read %d messages from the store with %d one-shot messages and %d occurrences due within the look-ahead, want %d: each occurrence (its successor, which its repository wrote, from memory)",
			got, oneShots, schedules, want)
	}
}

// blockedPublisher is fakePublisher whose Deliver of a message to
// subject signals blocked and waits until release is closed.
type blockedPublisher struct {
	*fakePublisher
	subject string
	blocked chan struct{}
	release chan struct{}
}

func (p *blockedPublisher) Deliver(k keys.Key, m *delaystore.StoredMessage, attempt uint32) error {
	if m.Subject == p.subject {
		p.blocked <- struct{}{}
		<-p.release
	}
	return p.fakePublisher.Deliver(k, m, attempt)
}

// newBlockedPlanAheadHarness is newPlanAheadHarness with planAhead whose
// pass is stuck publishing a message to "busy" until bp.release is
// closed, and which holds an occurrence of "rec" due in occIn by its
// clock, to plan.
func newBlockedPlanAheadHarness(t *testing.T, planAhead, occIn time.Duration) (*planAheadHarness, *blockedPublisher) {
	t.Helper()
	bp := &blockedPublisher{subject: "busy", blocked: make(chan struct{}, 1), release: make(chan struct{})}
	wrap := func(p *fakePublisher) dispatch.Publisher { bp.fakePublisher = p; return bp }
	h := newWrappedPlanAheadHarness(t, wrap, func(c *dispatch.Config) { c.PlanAhead = planAhead })
	t.Cleanup(func() {
		select {
		case <-bp.release:
		default:
			close(bp.release) // before the harness's Close waits for the pass
		}
	})
	h.schedule(msgAt("busy", h.clock.now()))
	<-bp.blocked // a pass is publishing, and stays so
	h.schedule(occurrenceAt("rec", time.Hour, h.clock.now().Add(occIn), recur.One, 0))
	return h, bp
}

// Guarantee: the planner gives way to a pass that is publishing: with
// an occurrence to plan ahead and a pass in the middle of its publishes,
// it waits, and plans once the pass is done, still ahead of the
// occurrence's time.
func TestDispatcher_PlanAhead_GivesWayToDeliveringPass(t *testing.T) {
	h, bp := newBlockedPlanAheadHarness(t, 4*time.Second, 3*time.Second)

	checkFor(t, 10*time.Second, func() error {
		if h.d.GaveWayForTest() == 0 {
			return fmt.Errorf("the planner has not given way yet")
		}
		return nil
	})
	// NB: it gives way for at most a quarter of PlanAhead, a second.
	h.noCommit("while a pass was publishing")
	close(bp.release)
	h.waitCommit()
	if err := h.d.Close(); err != nil {
		t.Fatal(err)
	}
	if st := h.d.Stats(); st.PlannedAhead != 1 || st.PlannedOnDelivery != 0 {
		t.Fatalf("planned ahead %d, on delivery %d; want 1 and 0", st.PlannedAhead, st.PlannedOnDelivery)
	}
}

// Guarantee: with no recurring schedule the planner does not give way
// (nor read): a pass that publishes one-shot messages without end does
// not wake it every few milliseconds.
func TestDispatcher_PlanAhead_NoSchedulesNoGivingWay(t *testing.T) {
	bp := &blockedPublisher{subject: "busy", blocked: make(chan struct{}, 1), release: make(chan struct{})}
	wrap := func(p *fakePublisher) dispatch.Publisher { bp.fakePublisher = p; return bp }
	h := newWrappedPlanAheadHarness(t, wrap, func(c *dispatch.Config) { c.PlanAhead = 40 * time.Millisecond })
	t.Cleanup(func() { close(bp.release) })
	h.schedule(msgAt("busy", h.clock.now()))
	<-bp.blocked // a pass is publishing, and stays so

	start := h.d.PlanRoundsForTest()
	checkFor(t, 10*time.Second, func() error {
		if n := h.d.PlanRoundsForTest() - start; n < 3 {
			return fmt.Errorf("the planner began %d rounds, want 3", n)
		}
		return nil
	})
	if n := h.d.GaveWayForTest(); n != 0 {
		t.Fatalf("the planner gave way %d times with no schedule to plan", n)
	}
}

// Guarantee: giving way is bounded: a pass that publishes without end
// (here, one stuck in a publish) does not keep the planner from planning
// ahead.
func TestDispatcher_PlanAhead_GivesWayForABoundedTime(t *testing.T) {
	h, _ := newBlockedPlanAheadHarness(t, 400*time.Millisecond, 300*time.Millisecond)

	h.waitCommit() // the planner's, with the pass still publishing
	if h.d.GaveWayForTest() == 0 {
		t.Fatal("the planner planned without giving way to the publishing pass")
	}
	if pend := h.pendingOf("rec"); len(pend) != 2 || !pend[0].Recurrence.Planned {
		t.Fatalf("pending %d, want the occurrence planned and its successor", len(pend))
	}
	select {
	case d := <-h.pub.deliveries:
		t.Fatalf("delivered %v while the pass was still publishing busy", d)
	default:
	}
}

// TestDispatcher_PlanAhead_ReplacedBeforeNoted_NothingLeftAtAnswer
// checks the promise a replace by Delay-Id makes, that once answered
// nothing of the old schedule is left pending, in the planner's window:
// its commit made the successor the one Delay-Id names, the replace
// committed and took that successor, and the planner has not yet noted
// what it planned. Told of the replace, the dispatcher either withdraws
// the occurrence planned ahead, for the caller to answer once it is
// deleted, or returns once it is deleted already.
func TestDispatcher_PlanAhead_ReplacedBeforeNoted_NothingLeftAtAnswer(t *testing.T) {
	h := newPlanAheadHarness(t, nil)
	occ := h.clock.now().Add(300 * time.Millisecond)
	type replaced struct {
		x           keys.Key
		withdrawing bool
	}
	planned := make(chan keys.Key, 1) // the occurrence planned ahead
	done := make(chan replaced, 1)
	told, waiting := make(chan struct{}), make(chan struct{})
	var once, waitOnce sync.Once
	h.d.AfterPlanCommitForTest(func() {
		once.Do(func() {
			committed := make(chan struct{})
			go func() {
				m := occurrenceAt("rec", time.Hour, occ.Add(2*time.Hour), recur.One, 0)
				res, err := h.repo.Schedule([]*delaystore.StoredMessage{m}, delaystore.Sync)
				close(committed)
				if err != nil || !res[0].HasReplaced {
					t.Errorf("replace: %v, %+v", err, res)
					close(told)
					done <- replaced{}
					return
				}
				_, x, withdrawing := h.d.NotifyMessageWithdrawing(res[0], m.FireAtNs, m, h.d.Epoch())
				close(told)
				if k := <-planned; !withdrawing {
					// Its publisher would be answered now.
					if _, err := h.repo.Get(k); !errors.Is(err, delaystore.ErrNotFound) {
						t.Errorf("nothing withdrawn by the replace, and the occurrence planned ahead is still pending (%v)", err)
					}
				}
				done <- replaced{x, withdrawing}
			}()
			<-committed
			// Until the replace is told of, or waits to be: the
			// planner notes its plan only after that.
			select {
			case <-told:
			case <-waiting:
			}
		})
	}, func() { waitOnce.Do(func() { close(waiting) }) })
	k := h.schedule(occurrenceAt("rec", time.Hour, occ, recur.One, 0))[0]
	planned <- k

	var r replaced
	select {
	case r = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the replace was never told of")
	}
	if r.withdrawing {
		if r.x != k {
			t.Fatalf("the replace withdrew %v, want the occurrence planned ahead %v", r.x, k)
		}
		deleted := make(chan error, 1)
		h.d.DeleteWithdrawn(r.x, func(err error) { deleted <- err })
		if err := <-deleted; err != nil {
			t.Fatal(err)
		}
		// Its publisher would be answered now.
		if _, err := h.repo.Get(k); !errors.Is(err, delaystore.ErrNotFound) {
			t.Fatalf("the occurrence planned ahead, once deleted: %v, want gone", err)
		}
	}
	if pend := h.pendingOf("rec"); len(pend) != 1 || pend[0].FireAtNs != occ.Add(2*time.Hour).UnixNano() {
		t.Fatalf("pending %d, want only the new schedule's occurrence", len(pend))
	}
	if err := h.d.Close(); err != nil {
		t.Fatal(err)
	}
	if st := h.d.Stats(); st.Withdrawn != 1 || st.Delivered != 0 {
		t.Fatalf("withdrawn %d, delivered %d; want 1 and 0", st.Withdrawn, st.Delivered)
	}
}
