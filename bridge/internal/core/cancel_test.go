package core_test

import (
	"context"
	"maps"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/natsdelay/natsdelay/bridge/internal/core"
	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/dispatch/recur"
	"github.com/natsdelay/natsdelay/keys"
)

// heldGetStore holds the first Get that Service.Cancel makes after arm
// until release is closed: its read of the occurrence before it deletes
// it. Reads by anything else (the dispatcher planning occurrences ahead
// reads the same key) go through.
type heldGetStore struct {
	delaystore.Store
	mu      sync.Mutex
	armed   bool
	read    chan struct{} // closed once the held Get has read
	release chan struct{}
}

func (s *heldGetStore) arm() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.armed = true
}

func (s *heldGetStore) Get(key []byte) ([]byte, error) {
	v, err := s.Store.Get(key)
	s.mu.Lock()
	held := s.armed && calledFrom("core.(*Service).Cancel")
	if held {
		s.armed = false
	}
	s.mu.Unlock()
	if held {
		close(s.read)
		<-s.release
	}
	return v, err
}

// calledFrom reports whether a function whose name ends in name is on the
// calling goroutine's stack.
func calledFrom(name string) bool {
	pcs := make([]uintptr, 64)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs)])
	for {
		f, more := frames.Next()
		if strings.HasSuffix(f.Function, name) {
			return true
		}
		if !more {
			return false
		}
	}
}

// TestService_Cancel_PlannedMeanwhile checks that canceling the pending
// occurrence of a recurring schedule ends the schedule even when the
// dispatcher plans that occurrence, storing its successor, between
// Cancel's read of it and its delete: the guarantee is that a CANCEL
// answered "canceled" leaves no occurrence of the schedule to come. Under
// catch-up none the planning deletes a missed occurrence unsent, and the
// CANCEL must still end the schedule rather than answer 404; under
// catch-up all the successor of a missed occurrence is due at once, so the
// schedule may move on twice before the delete.
func TestService_Cancel_PlannedMeanwhile(t *testing.T) {
	for _, tt := range []struct {
		name    string
		every   time.Duration
		missed  time.Duration // how long before its fire time the occurrence was planned for
		catchUp delaystore.CatchUp
		plans   int // commits of plans to wait for before the delete
		out     int // how many of the planned went out at least, the canceled one aside
	}{
		{"planned", time.Hour, 0, recur.One, 1, 0},
		{"skipped by catch-up none", 100 * time.Millisecond, time.Second, recur.None, 1, 0},
		{"planned twice by catch-up all", time.Second, 1500 * time.Millisecond, recur.All, 2, 1},
		// The third plan is the planner's, ahead of time, of the
		// occurrence after the one due at once: the CANCEL withdraws it.
		{"planned thrice, the last ahead", time.Second, 1500 * time.Millisecond, recur.All, 3, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st := &heldGetStore{Store: memStore(t), read: make(chan struct{}), release: make(chan struct{})}
			planned := make(chan struct{}, 16)
			p := newPublisher()
			s := open(t, st, p, func(c *core.Config) {
				c.Repository.AdvanceHook = func(at delaystore.AdvanceStage) {
					switch at {
					case delaystore.AdvanceBeforeCommit:
						// NB: no plan commits before Cancel has read the
						// occurrence from the store: a commit would put it
						// back in the memory the repository reads first.
						select {
						case <-st.read:
						case <-st.release:
						}
					case delaystore.AdvanceAfterCommit:
						planned <- struct{}{}
					}
				}
			})
			// NB: after open, so it runs before the Service's Close: a
			// failed check must not leave a read held and Close waiting.
			var releaseOnce sync.Once
			release := func() { releaseOnce.Do(func() { close(st.release) }) }
			t.Cleanup(release)
			due := time.Now().Add(300 * time.Millisecond)
			occ := due.Add(-tt.missed)
			k := schedule(t, s, &delaystore.StoredMessage{Subject: "rec.cancel", ClientId: "J", FireAtNs: due.UnixNano(),
				Recurrence: &delaystore.Recurrence{EveryNs: int64(tt.every), Id: "J", OccurrenceNs: occ.UnixNano(), Seq: 1, CatchUp: tt.catchUp}})

			// Cancel reads the occurrence, still unplanned, and is held
			// there until the dispatcher has planned it. NB: the
			// repository serves what it wrote itself from memory; dropped
			// here (and no plan commits before the read), the read goes to
			// the store, where it can be held.
			s.Repository().ReleaseMemory()
			st.arm()
			canceled := make(chan error, 1)
			go func() { canceled <- s.Cancel(context.Background(), k) }()
			select {
			case <-st.read:
			case <-time.After(wait):
				t.Fatal("Cancel never read the occurrence")
			}
			for range tt.plans {
				select {
				case <-planned:
				case <-time.After(wait):
					t.Fatal("the occurrence was never planned")
				}
			}
			release()
			select {
			case err := <-canceled:
				if err != nil {
					t.Fatalf("Cancel: %v", err)
				}
			case <-time.After(wait):
				t.Fatal("Cancel never returned")
			}
			repo := s.Repository()
			if n := repo.Schedules(); n != 0 {
				t.Errorf("%d schedules after Cancel, want 0", n)
			}
			if _, err := repo.LookupSchedule("rec.cancel", "J"); err == nil {
				t.Error("the schedule has an occurrence to come after Cancel")
			}
			// NB: an occurrence that went out meanwhile, other than the
			// canceled one, finishes its delivery; nothing else is left,
			// not even one planned ahead and withdrawn by the CANCEL,
			// which would stay pending until its time. How many went out
			// depends on how long the CANCEL took: under catch-up all
			// the planner may reach the next one (due a second after the
			// missed one) before the CANCEL takes the planner's lock.
			left := pendingOf(t, s, "rec.cancel")
			if len(left) < tt.out {
				t.Errorf("%d pending after Cancel, want at least the %d that went out", len(left), tt.out)
			}
			wentOut(t, p, left)
			if tt.catchUp == recur.None {
				// NB: counted once Advance returned to the dispatcher, which
				// may be after the hook let Cancel go on.
				deadline := time.Now().Add(wait)
				for s.Stats().Skipped != 1 && time.Now().Before(deadline) {
					time.Sleep(time.Millisecond)
				}
				if n := s.Stats().Skipped; n != 1 {
					t.Errorf("skipped %d, want the 1 missed occurrence", n)
				}
			}
		})
	}
}

// pendingOf lists the keys of the pending messages of subject.
func pendingOf(t *testing.T, s *core.Service, subject string) []keys.Key {
	t.Helper()
	var ks []keys.Key
	if err := s.List(subject, nil, func(k keys.Key, _ *delaystore.StoredMessage) bool {
		ks = append(ks, k)
		return true
	}); err != nil {
		t.Fatal(err)
	}
	return ks
}

// wentOut checks that each of ks is delivered through p: a message left
// pending after a CANCEL of its schedule must be one that went out.
func wentOut(t *testing.T, p *publisher, ks []keys.Key) {
	t.Helper()
	want := make(map[keys.Key]bool, len(ks))
	for _, k := range ks {
		want[k] = true
	}
	timeout := time.After(wait)
	for len(want) > 0 {
		select {
		case k := <-p.delivered:
			delete(want, k)
		case <-timeout:
			t.Errorf("pending after Cancel and never delivered: %v", slices.Collect(maps.Keys(want)))
			return
		}
	}
}

// TestService_ReplaceByID_DeletesOccurrencePlannedAhead checks that a
// publish that replaces a recurring schedule by its Delay-Id leaves
// nothing of the replaced schedule pending once it is answered: the
// occurrence the planner planned ahead, stored and not yet out, is
// deleted with the successor the replace takes, not left pending (shown
// by GET and LIST, and delivered after a restart, which forgets that it
// was withdrawn) until its time.
func TestService_ReplaceByID_DeletesOccurrencePlannedAhead(t *testing.T) {
	planned := make(chan struct{}, 16)
	p := newPublisher()
	// NB: the clock stands still, so nothing of the schedule falls due
	// during the test; the planner's reads, every half second, still
	// plan the occurrence within its look-ahead.
	now := time.Now()
	s := open(t, memStore(t), p, func(c *core.Config) {
		c.Now = func() time.Time { return now }
		c.Repository.AdvanceHook = func(at delaystore.AdvanceStage) {
			if at == delaystore.AdvanceAfterCommit {
				planned <- struct{}{}
			}
		}
	})
	due := now.Add(300 * time.Millisecond)
	old := schedule(t, s, &delaystore.StoredMessage{Subject: "rec.replace", ClientId: "J", FireAtNs: due.UnixNano(), Payload: []byte("old"),
		Recurrence: &delaystore.Recurrence{EveryNs: int64(time.Hour), Id: "J", OccurrenceNs: due.UnixNano(), Seq: 1, CatchUp: recur.One}})
	select {
	case <-planned:
	case <-time.After(wait):
		t.Fatal("the occurrence was never planned ahead")
	}
	if n := len(pendingOf(t, s, "rec.replace")); n != 2 {
		t.Fatalf("%d pending once planned ahead, want the occurrence and its successor", n)
	}

	// The same (subject, Delay-Id) again: a new schedule replaces the old.
	at := now.Add(time.Hour)
	nk := schedule(t, s, &delaystore.StoredMessage{Subject: "rec.replace", ClientId: "J", FireAtNs: at.UnixNano(), Payload: []byte("new"),
		Recurrence: &delaystore.Recurrence{EveryNs: int64(2 * time.Hour), Id: "J", OccurrenceNs: at.UnixNano(), Seq: 1, CatchUp: recur.One}})
	left := pendingOf(t, s, "rec.replace")
	if len(left) != 1 || left[0] != nk {
		t.Errorf("pending once the replace is answered: %v, want only the new schedule's %v (the old occurrence was %v)", left, nk, old)
	}
	if n := s.Repository().Schedules(); n != 1 {
		t.Errorf("%d schedules, want the new one", n)
	}
	select {
	case k := <-p.delivered:
		t.Errorf("%v delivered, want nothing before its time", k)
	default:
	}
}
