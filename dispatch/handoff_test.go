package dispatch_test

import (
	"bytes"
	"encoding/binary"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/delaystore/pebblestore"
	"github.com/natsdelay/natsdelay/dispatch"
	"github.com/natsdelay/natsdelay/keys"
)

// handOff stores msg as the group commit does (ScheduleOnce, one synced
// commit) and tells the dispatcher with NotifyMessage; it returns the key
// and whether the message was handed off.
func (h *harness) handOff(msg *delaystore.StoredMessage) (keys.Key, bool) {
	h.t.Helper()
	epoch, told := h.d.Ingesting(msg.FireAtNs)
	defer told()
	res, err := h.repo.ScheduleOnce([]delaystore.Once{{Msg: msg}}, 0, time.Now().UnixNano(), delaystore.Sync)
	if err != nil {
		h.t.Fatal(err)
	}
	return res[0].Key, h.d.NotifyMessage(res[0].Scheduled, res[0].FireAtNs, msg, epoch)
}

// blockingPublisher holds the delivery of one subject until released, and
// says when it holds one.
type blockingPublisher struct {
	*fakePublisher
	subject string
	held    chan keys.Key
	release chan struct{}
	once    sync.Once
}

// newBlockingPublisher holds f's deliveries of subject until free. NB:
// call freeAtEnd once the dispatcher is made, so that a failed test frees
// them before the dispatcher's Close waits for the pass they hold.
func newBlockingPublisher(f *fakePublisher, subject string) *blockingPublisher {
	return &blockingPublisher{fakePublisher: f, subject: subject, held: make(chan keys.Key, 1), release: make(chan struct{})}
}

func (p *blockingPublisher) freeAtEnd(t *testing.T) { t.Cleanup(p.free) }

func (p *blockingPublisher) free() { p.once.Do(func() { close(p.release) }) }

func (p *blockingPublisher) Deliver(k keys.Key, m *delaystore.StoredMessage, attempt uint32) error {
	if m.Subject == p.subject {
		p.held <- k
		<-p.release
	}
	return p.fakePublisher.Deliver(k, m, attempt)
}

// gatedStore holds the range scans of one topic until released, and says
// when it holds one; it counts the reads of every topic's messages.
type gatedStore struct {
	delaystore.Store
	topic   uint64
	held    chan struct{}
	release chan struct{}

	mu    sync.Mutex
	reads map[uint64]int
}

func (s *gatedStore) topicOf(k []byte) (uint64, bool) {
	if len(k) != keys.Len && len(k) != 8 && len(k) != keys.Len+1 {
		return 0, false
	}
	return binary.BigEndian.Uint64(k[:8]), true
}

func (s *gatedStore) count(k []byte) {
	if h, ok := s.topicOf(k); ok {
		s.mu.Lock()
		s.reads[h]++
		s.mu.Unlock()
	}
}

func (s *gatedStore) Scan(opts delaystore.IterOptions, yield func(key, value []byte) bool) error {
	s.count(opts.LowerBound)
	if h, ok := s.topicOf(opts.LowerBound); ok && s.held != nil && h == s.topic {
		s.held <- struct{}{}
		<-s.release
	}
	return s.Store.Scan(opts, yield)
}

func (s *gatedStore) Get(k []byte) ([]byte, error) {
	s.count(k)
	return s.Store.Get(k)
}

func (s *gatedStore) readsOf(subject string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reads[keys.TopicHash(subject)]
}

// openGated opens a repository on a gatedStore in memory, closed at the
// end of the test.
func openGated(t *testing.T) (*gatedStore, *delaystore.Repository) {
	t.Helper()
	inner, err := pebblestore.Open(pebblestore.Config{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	st := &gatedStore{Store: inner, reads: map[uint64]int{}}
	repo, err := delaystore.OpenRepository(st, delaystore.RepositoryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = repo.Close()
		_ = inner.Close()
	})
	return st, repo
}

// startOn starts a dispatcher on repo publishing through pub, closed at
// the end of the test.
func startOn(t *testing.T, repo *delaystore.Repository, pub dispatch.Publisher, fake *fakePublisher, mod func(*dispatch.Config)) *harness {
	t.Helper()
	cfg := dispatch.Config{AckWait: 10 * time.Second, Logger: slog.New(slog.NewTextHandler(t.Output(), nil))}
	if mod != nil {
		mod(&cfg)
	}
	d, err := dispatch.New(repo, pub, cfg)
	if err != nil {
		t.Fatal(err)
	}
	fake.d = d
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return &harness{t: t, repo: repo, d: d, pub: fake}
}

// TestDispatcher_NotifyMessage_OlderMessageUnread_GoesFirst checks per
// subject order against a message on disk that the dispatcher has not
// read: a subject's older message, stored before the start and still
// beyond the frontier's first read (a pass's worth of one entry), while a
// newer one of the subject, due at once, is committed. The newer one
// must not be handed off, and goes out after the older one.
func TestDispatcher_NotifyMessage_OlderMessageUnread_GoesFirst(t *testing.T) {
	_, repo := openGated(t)
	now := time.Now()
	// In due order: other's first, then s's older message.
	old, err := repo.Schedule([]*delaystore.StoredMessage{msgAt("other", now.Add(-10*time.Second)), msgAt("s", now.Add(-5*time.Second))}, delaystore.Sync)
	if err != nil {
		t.Fatal(err)
	}
	fake := newFakePublisher()
	pub := newBlockingPublisher(fake, "other")
	h := startOn(t, repo, pub, fake, func(c *dispatch.Config) { c.PassLimit = 1 })
	pub.freeAtEnd(t)
	// The first pass read other's entry alone and is publishing it: s's
	// older message is on disk, its entry not yet read.
	if k := <-pub.held; k != old[0].Key {
		t.Fatalf("held the delivery of %v, want other's %v", k, old[0].Key)
	}
	newer, handed := h.handOff(msgAt("s", now.Add(-5*time.Second+time.Millisecond)))
	if handed {
		t.Fatal("handed off a message whose subject has an older one unread")
	}
	pub.free()
	var got []keys.Key
	for len(got) < 2 {
		if d := h.next(30 * time.Second); d.subject == "s" {
			got = append(got, d.key)
		}
	}
	if got[0] != old[1].Key || got[1] != newer {
		t.Fatalf("s delivered %v, want the older %v then the newer %v", got, old[1].Key, newer)
	}
}

// TestDispatcher_NotifyMessage_OlderCommittedAfter_BeyondScans_Delivered
// checks a message committed after a newer one of its subject was handed
// off, its key below the hand-off's (published later with a shorter
// delay), both in time buckets no pass has scanned yet: a pass is held
// publishing another subject's message meanwhile. Such a message is told
// to the frontier alone, not to its topic, and the frontier's read passes
// an entry below its topic's cursor as taken: with the cursor moved past
// it by the hand-off, it was never delivered.
func TestDispatcher_NotifyMessage_OlderCommittedAfter_BeyondScans_Delivered(t *testing.T) {
	_, repo := openGated(t)
	fake := newFakePublisher()
	pub := newBlockingPublisher(fake, "other")
	h := startOn(t, repo, pub, fake, nil)
	pub.freeAtEnd(t)
	// NB: due a little later, so that the frontier, not a scan, reads it:
	// due at once, it could arrive while the first pass had scanned up to
	// its millisecond, go to its topic, and leave its due entry for the
	// frontier to read after the pass (see arrivedLocked); with that read
	// still to come, nothing is handed off below.
	h.schedule(msgAt("other", time.Now().Add(100*time.Millisecond)))
	<-pub.held
	// The held pass scanned up to the millisecond it began in, before now.
	begun := time.Now()
	checkFor(t, 30*time.Second, func() error {
		if time.Now().Before(begun.Add(20 * time.Millisecond)) {
			return errNotYet
		}
		return nil
	})
	// Both due, both after the held pass's millisecond, the older first.
	base := time.Now()
	newer, handed := h.handOff(msgAt("s", base.Add(-2*time.Millisecond)))
	if !handed {
		t.Fatal("a message due now, its subject new, was not handed off")
	}
	older, handed := h.handOff(msgAt("s", base.Add(-10*time.Millisecond)))
	if handed {
		t.Fatal("handed off a message below its subject's cursor")
	}
	pub.free()
	got := map[keys.Key]bool{}
	for !got[newer] || !got[older] {
		d := h.next(30 * time.Second)
		got[d.key] = true
		if err := h.ack(d.key, dispatch.Ack{Kind: dispatch.AckDone}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDispatcher_NotifyMessage_DueNow_HandedOffWithNoRead checks that a
// message due when committed, of a subject with nothing else pending but
// a delivery in flight, is handed off: it goes out after that delivery,
// with no read of the subject's messages.
func TestDispatcher_NotifyMessage_DueNow_HandedOffWithNoRead(t *testing.T) {
	st, repo := openGated(t)
	fake := newFakePublisher()
	h := startOn(t, repo, fake, fake, nil)
	at := soon()
	first := h.schedule(msgAt("s", at))[0]
	if d := h.next(30 * time.Second); d.key != first {
		t.Fatalf("delivered %v, want %v", d.key, first)
	}
	// Due, and after the first: above its subject's cursor.
	later := at.Add(time.Millisecond)
	checkFor(t, 30*time.Second, func() error {
		if time.Now().Before(later.Add(time.Millisecond)) {
			return errNotYet
		}
		return nil
	})
	reads := st.readsOf("s")
	k, handed := h.handOff(msgAt("s", later))
	if !handed {
		t.Fatal("a message due now, its subject idle, was not handed off")
	}
	d := h.next(30 * time.Second)
	if d.key != k || d.attempt != 1 {
		t.Fatalf("delivered %v attempt %d, want the handed-off %v attempt 1", d.key, d.attempt, k)
	}
	if n := st.readsOf("s") - reads; n != 0 {
		t.Fatalf("the handed-off message cost %d reads of its subject, want none", n)
	}
	if err := h.ack(k, dispatch.Ack{Kind: dispatch.AckDone}); err != nil {
		t.Fatal(err)
	}
	checkFor(t, 30*time.Second, func() error {
		if _, err := repo.Get(k); err == nil {
			return errNotYet
		}
		return nil
	})
	if n := h.d.HandedOffForTest(); n != 1 {
		t.Fatalf("handed off %d, want 1", n)
	}
}

// TestDispatcher_NotifyMessage_ScannedBeforeTold_NotTwice checks that a
// message a scan took between its commit and NotifyMessage, as a pass
// that began meanwhile does, is not handed off again.
func TestDispatcher_NotifyMessage_ScannedBeforeTold_NotTwice(t *testing.T) {
	h := newHarness(t, 0, nil)
	first := h.schedule(msgAt("warm", soon()))[0]
	if d := h.next(30 * time.Second); d.key != first {
		t.Fatalf("delivered %v, want %v", d.key, first)
	}
	past := time.Now().Add(-time.Second)
	b := msgAt("s", past)
	epoch := h.d.Epoch()
	res, err := h.repo.ScheduleOnce([]delaystore.Once{{Msg: b}}, 0, time.Now().UnixNano(), delaystore.Sync)
	if err != nil {
		t.Fatal(err)
	}
	// The scan that another message of s brings reads b too.
	m := h.schedule(msgAt("s", past))[0]
	for _, want := range []keys.Key{res[0].Key, m} {
		if d := h.next(30 * time.Second); d.key != want {
			t.Fatalf("delivered %v, want %v", d.key, want)
		}
	}
	if h.d.NotifyMessage(res[0].Scheduled, res[0].FireAtNs, b, epoch) {
		t.Fatal("handed off a message in flight")
	}
	// Settled and forgotten, its topic dropped or not, it is not handed
	// off either.
	for _, k := range []keys.Key{res[0].Key, m} {
		if err := h.ack(k, dispatch.Ack{Kind: dispatch.AckDone}); err != nil {
			t.Fatal(err)
		}
	}
	checkFor(t, 30*time.Second, func() error {
		if h.d.InFlight(res[0].Key) || h.d.Subject("s").InFlight != 0 {
			return errNotYet
		}
		if _, err := h.repo.Get(res[0].Key); err == nil {
			return errNotYet
		}
		return nil
	})
	h.schedule(msgAt("warm", soon()))
	h.next(30 * time.Second) // a pass forgot what was settled
	if h.d.NotifyMessage(res[0].Scheduled, res[0].FireAtNs, b, epoch) {
		t.Fatal("handed off a message settled since its commit")
	}
	marker := h.schedule(msgAt("s", soon()))[0]
	if d := h.next(30 * time.Second); d.key != marker {
		t.Fatalf("delivered %v attempt %d, want the marker %v: a message went out twice", d.key, d.attempt, marker)
	}
}

// TestDispatcher_NotifyMessage_ScannedAfterHandOff_StaysBehind checks that
// a subject's message handed off while a pass is scanning other subjects
// goes out before one of its subject that comes after it through the due
// scan of that same pass.
func TestDispatcher_NotifyMessage_ScannedAfterHandOff_StaysBehind(t *testing.T) {
	st, repo := openGated(t)
	fake := newFakePublisher()
	h := startOn(t, repo, fake, fake, nil)
	st.topic, st.held, st.release = keys.TopicHash("x"), make(chan struct{}, 1), make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(st.release) }) }
	t.Cleanup(free)
	// Two entries, so x is scanned as a range, which the store holds.
	// NB: due at the same time: at two, a pass that falls between them
	// (a loaded machine) reads each alone, with no range scan to hold.
	now := time.Now()
	at := soon()
	h.schedule(msgAt("x", at), msgAt("x", at))
	select {
	case <-st.held:
	case <-time.After(30 * time.Second):
		t.Fatal("no pass scanned x's two messages as a range in 30s")
	}
	// The pass has taken what was handed off before it, and is scanning x.
	b, handed := h.handOff(msgAt("s", now.Add(-time.Second)))
	if !handed {
		t.Fatal("not handed off")
	}
	b2 := h.schedule(msgAt("s", now.Add(-time.Second)))[0]
	free()
	var got []keys.Key
	for len(got) < 2 {
		if d := h.next(30 * time.Second); d.subject == "s" {
			got = append(got, d.key)
		}
	}
	if got[0] != b || got[1] != b2 {
		t.Fatalf("s delivered %v, want the handed-off %v then %v", got, b, b2)
	}
}

var errNotYet = errorString("not yet")

// soon is a fire time a little ahead: its message is told to the
// frontier, not to its topic (it is past what passes have scanned), so
// the pass that delivers it began its read of the due index after it was
// committed, and left the frontier clear.
func soon() time.Time { return time.Now().Add(20 * time.Millisecond) }

type errorString string

func (e errorString) Error() string { return string(e) }

// TestDispatcher_NotifyMessage_Hazards_NotHandedOff checks that a message
// due now is not handed off while its subject is held back or something
// older could be ahead of it, and that it still goes out, in order, when
// that ends. Both are committed while a pass is publishing (no other
// pass runs meanwhile), and a message of another subject, handed off just
// before, shows that only its subject's state held it back.
func TestDispatcher_NotifyMessage_Hazards_NotHandedOff(t *testing.T) {
	past := func() time.Time { return time.Now().Add(-time.Second) }
	for _, tc := range []struct {
		name string
		mod  func(*dispatch.Config, *atomic.Bool)
		// hold holds s back before the message comes, and returns what
		// lets it go, which is expected to deliver want more of s first.
		hold func(t *testing.T, h *harness, on *atomic.Bool) (free func(), want int)
		msg  func() *delaystore.StoredMessage
		// all: nothing at all is handed off meanwhile.
		all bool
	}{
		{name: "paused", hold: func(t *testing.T, h *harness, _ *atomic.Bool) (func(), int) {
			setLimit(t, h, delaystore.Limit{Pattern: "s", Paused: true})
			return func() { setLimit(t, h, delaystore.Limit{Pattern: "s"}) }, 0
		}},
		{name: "at its in-flight limit", mod: func(c *dispatch.Config, _ *atomic.Bool) { c.SubjectMaxInFlight = 1 },
			hold: func(t *testing.T, h *harness, _ *atomic.Bool) (func(), int) {
				k := h.schedule(msgAt("s", past()))[0]
				if d := h.next(30 * time.Second); d.key != k {
					t.Fatalf("delivered %v, want %v", d.key, k)
				}
				return func() {
					if err := h.ack(k, dispatch.Ack{Kind: dispatch.AckDone}); err != nil {
						t.Fatal(err)
					}
				}, 0
			}},
		{name: "rate", hold: func(t *testing.T, h *harness, _ *atomic.Bool) (func(), int) {
			setLimit(t, h, delaystore.Limit{Pattern: "s", Rate: 1000})
			return func() {}, 0
		}},
		{name: "frozen", mod: func(c *dispatch.Config, on *atomic.Bool) {
			s := keys.TopicHash("s")
			c.Frozen = func(h uint64) bool { return h == s && on.Load() }
		}, hold: func(t *testing.T, h *harness, on *atomic.Bool) (func(), int) {
			on.Store(true)
			if err := h.d.ReloadLimits(); err != nil {
				t.Fatal(err)
			}
			return func() {
				on.Store(false)
				if err := h.d.ReloadLimits(); err != nil {
					t.Fatal(err)
				}
			}, 0
		}},
		{name: "under a grouped limit", hold: func(t *testing.T, h *harness, _ *atomic.Bool) (func(), int) {
			// NB: room to spare: only a scan admits a message to its
			// group, so one handed off would not count in it.
			setLimit(t, h, delaystore.Limit{Pattern: "s", Whole: true, MaxInFlight: 100})
			return func() {}, 0
		}},
		{name: "another writer's commit untold", all: true, hold: func(t *testing.T, h *harness, _ *atomic.Bool) (func(), int) {
			return h.d.Committing(time.Now().UnixNano()), 0
		}},
		{name: "backing off", hold: func(t *testing.T, h *harness, _ *atomic.Bool) (func(), int) {
			h.pub.setAbsent("s", true)
			h.schedule(msgAt("s", past()))
			checkFor(t, 30*time.Second, func() error {
				if h.pub.bounces() == 0 || h.d.Subject("s").InFlight != 0 {
					return errNotYet
				}
				return nil
			})
			return func() { h.pub.setAbsent("s", false) }, 1
		}},
		{name: "with a Delay-Id", msg: func() *delaystore.StoredMessage {
			m := msgAt("s", past())
			m.ClientId = "id"
			return m
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var on atomic.Bool
			var pub *blockingPublisher
			h := newWrappedHarness(t, delaystore.RepositoryConfig{}, func(f *fakePublisher) dispatch.Publisher {
				pub = newBlockingPublisher(f, "other")
				return pub
			}, func(c *dispatch.Config) {
				if tc.mod != nil {
					tc.mod(c, &on)
				}
			})
			pub.freeAtEnd(t)
			free, want := func() {}, 0
			if tc.hold != nil {
				free, want = tc.hold(t, h, &on)
			}
			h.schedule(msgAt("other", soon()))
			<-pub.held
			// NB: the control first: a message not handed off is told
			// to the frontier, which then has an entry to read.
			if _, handed := h.handOff(msgAt("control", past())); handed == tc.all {
				t.Fatalf("a message of an idle subject handed off: %v, want %v", handed, !tc.all)
			}
			msg := msgAt("s", past())
			if tc.msg != nil {
				msg = tc.msg()
			}
			k, handed := h.handOff(msg)
			if handed {
				t.Fatal("handed off")
			}
			pub.free()
			free()
			var got []keys.Key
			for len(got) < want+1 {
				if d := h.next(30 * time.Second); d.subject == "s" {
					got = append(got, d.key)
				}
			}
			if got[want] != k {
				t.Fatalf("s delivered %v, want %v last", got, k)
			}
		})
	}
}

// TestDispatcher_NotifyMessage_FencedOrExpired_NotHandedOff checks that a
// dispatcher whose fence is down hands nothing off, and that an expired
// message is not handed off.
func TestDispatcher_NotifyMessage_FencedOrExpired_NotHandedOff(t *testing.T) {
	var fenced atomic.Bool
	h := newHarness(t, 0, func(c *dispatch.Config) { c.Fence = func() bool { return !fenced.Load() } })
	// A pass has read the frontier and scanned past what is due, once
	// the first message handed off goes out.
	past := func() time.Time { return time.Now().Add(-time.Second) }
	h.schedule(msgAt("control", soon()))
	h.next(30 * time.Second)
	fenced.Store(true)
	k, handed := h.handOff(msgAt("t", past()))
	if handed {
		t.Fatal("handed off while fenced")
	}
	fenced.Store(false)
	if d := h.next(30 * time.Second); d.key != k {
		t.Fatalf("delivered %v, want %v", d.key, k)
	}
	// Told while fenced, t's message was read by the pass that sent it.
	m := msgAt("s", past())
	m.ExpireAtNs = time.Now().Add(-time.Millisecond).UnixNano()
	if _, handed := h.handOff(m); handed {
		t.Fatal("an expired message was handed off")
	}
}

// TestDispatcher_NotifyMessage_PausedBeforeItsPass_WaitsForResume checks
// that a message handed off, and paused before the pass that would send
// it, goes out only once resumed.
func TestDispatcher_NotifyMessage_PausedBeforeItsPass_WaitsForResume(t *testing.T) {
	var pub *blockingPublisher
	h := newWrappedHarness(t, delaystore.RepositoryConfig{}, func(f *fakePublisher) dispatch.Publisher {
		pub = newBlockingPublisher(f, "other")
		return pub
	}, nil)
	pub.freeAtEnd(t)
	h.schedule(msgAt("other", soon()))
	<-pub.held
	k, handed := h.handOff(msgAt("s", time.Now().Add(-time.Second)))
	if !handed {
		t.Fatal("not handed off")
	}
	setLimit(t, h, delaystore.Limit{Pattern: "s", Paused: true})
	pub.free()
	if d := h.next(30 * time.Second); d.subject != "other" {
		t.Fatalf("delivered %s, want other's", d.subject)
	}
	// The paused subject's message waits; another goes out after it.
	b, _ := h.handOff(msgAt("control", time.Now().Add(-time.Second)))
	if d := h.next(30 * time.Second); d.key != b {
		t.Fatalf("delivered %v (%s) while s is paused, want control's %v", d.key, d.subject, b)
	}
	setLimit(t, h, delaystore.Limit{Pattern: "s"})
	if d := h.next(30 * time.Second); d.key != k || d.attempt != 1 {
		t.Fatalf("delivered %v attempt %d, want %v attempt 1", d.key, d.attempt, k)
	}
}

func setLimit(t *testing.T, h *harness, l delaystore.Limit) {
	t.Helper()
	if err := h.repo.SetLimit(l); err != nil {
		t.Fatal(err)
	}
	if err := h.d.ReloadLimits(); err != nil {
		t.Fatal(err)
	}
}

// TestDispatcher_CommittedBehindTheFrontier_NotYetTold_NotOvertaken checks
// per-subject order for a commit the dispatcher is not yet told of: two
// messages of one subject, the older due before the due index's frontier
// (its entry is never read: its commit tells its topic), the newer after
// it. A pass that reads the newer entry meanwhile must not take it alone:
// its topic's scan starting at the newer one's key sent it out before the
// older one, which went out when told, after it.
func TestDispatcher_CommittedBehindTheFrontier_NotYetTold_NotOvertaken(t *testing.T) {
	for _, writer := range []struct {
		name string
		// begin counts a commit due at earliestNs in before it, and
		// returns how to tell of each message after it, and when done.
		begin func(h *harness, earliestNs int64) (tell func(delaystore.Outcome, *delaystore.StoredMessage), done func())
	}{
		{"the group commit", func(h *harness, earliestNs int64) (func(delaystore.Outcome, *delaystore.StoredMessage), func()) {
			epoch, done := h.d.Ingesting(earliestNs)
			return func(o delaystore.Outcome, m *delaystore.StoredMessage) {
				h.d.NotifyMessage(o.Scheduled, o.FireAtNs, m, epoch)
			}, done
		}},
		{"another writer", func(h *harness, earliestNs int64) (func(delaystore.Outcome, *delaystore.StoredMessage), func()) {
			done := h.d.Committing(earliestNs)
			return func(o delaystore.Outcome, _ *delaystore.StoredMessage) { h.d.Notify(o.Scheduled, o.FireAtNs) }, done
		}},
	} {
		t.Run(writer.name, func(t *testing.T) {
			h := newHarness(t, 0, nil)
			// The frontier reads e's entry before its pass delivers e.
			eAt := time.Now()
			e := h.schedule(msgAt("e", eAt))[0]
			if d := h.next(30 * time.Second); d.key != e {
				t.Fatalf("delivered %v, want e's %v", d.key, e)
			}
			in := []delaystore.Once{{Msg: msgAt("s", eAt.Add(-5*time.Millisecond))}, {Msg: msgAt("s", time.Now())}}
			tell, done := writer.begin(h, in[0].Msg.FireAtNs)
			res, err := h.repo.ScheduleOnce(in, 0, time.Now().UnixNano(), delaystore.Sync)
			if err != nil {
				t.Fatal(err)
			}
			older, newer := res[0].Key, res[1].Key
			// A pass reads the newer one's entry before the commit tells
			// of them.
			c := h.schedule(msgAt("c", time.Now()))[0]
			var got []keys.Key
			for d := h.next(30 * time.Second); d.key != c; d = h.next(30 * time.Second) {
				got = append(got, d.key)
			}
			for i := range res {
				tell(res[i], in[i].Msg)
			}
			done()
			for len(got) < 2 {
				got = append(got, h.next(30*time.Second).key)
			}
			if got[0] != older || got[1] != newer {
				t.Fatalf("s delivered %v, want the older %v then the newer %v", got, older, newer)
			}
		})
	}
}

// TestDispatcher_CommittedBelowTheCursor_NotYetTold_NotOvertaken checks
// per-subject order for a batch of the group commit committed, and not
// yet told of, that holds a message below its subject's cursor (published
// with a shorter delay than one already delivered) and one above it: a
// pass that scanned the subject from its cursor in that moment took the
// newer one alone, and the older one, once told, went out after it,
// though both were on disk together.
func TestDispatcher_CommittedBelowTheCursor_NotYetTold_NotOvertaken(t *testing.T) {
	h := newHarness(t, 0, nil)
	// x is delivered and left unanswered: s's cursor is past it, and s
	// stays in memory.
	xAt := time.Now()
	x := h.schedule(msgAt("s", xAt))[0]
	if d := h.next(30 * time.Second); d.key != x {
		t.Fatalf("delivered %v, want x's %v", d.key, x)
	}
	in := []delaystore.Once{{Msg: msgAt("s", xAt.Add(-5*time.Millisecond))}, {Msg: msgAt("s", time.Now())}}
	epoch, storing, done := h.d.IngestingKeys(in[0].Msg.FireAtNs)
	res, err := h.repo.ScheduleOnceNoted(in, 0, time.Now().UnixNano(), delaystore.Sync, storing)
	if err != nil {
		t.Fatal(err)
	}
	older, newer := res[0].Key, res[1].Key
	if bytes.Compare(older[:], x[:]) >= 0 || bytes.Compare(newer[:], x[:]) <= 0 {
		t.Fatalf("keys: older %v and newer %v, want them either side of x's %v", older, newer, x)
	}
	// A pass scans s, from its cursor, before the commit tells of them:
	// the newer one's entry is read.
	c := h.schedule(msgAt("c", time.Now()))[0]
	var got []keys.Key
	for d := h.next(30 * time.Second); d.key != c; d = h.next(30 * time.Second) {
		got = append(got, d.key)
	}
	for i := range res {
		h.d.NotifyMessage(res[i].Scheduled, res[i].FireAtNs, in[i].Msg, epoch)
	}
	done()
	for len(got) < 2 {
		got = append(got, h.next(30*time.Second).key)
	}
	if got[0] != older || got[1] != newer {
		t.Fatalf("s delivered %v, want the older %v then the newer %v", got, older, newer)
	}
}
