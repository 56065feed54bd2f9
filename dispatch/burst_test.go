package dispatch_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/dispatch"
)

// Guarantee: memory follows what is in flight, so a burst that is over
// leaves nothing behind: after 5,000 messages on as many subjects are
// delivered and ACKed, the dispatcher's maps are back to small (each was
// copied since it held more than 1,024 entries, or never did), its arrays
// too, and the deleter holds no write.
func TestDispatcher_Burst_LeavesNothingBehind(t *testing.T) {
	h := newHarness(t, 0, func(c *dispatch.Config) { c.AttemptWriteDelay = time.Hour })
	const n = 5000
	now := time.Now()
	msgs := make([]*delaystore.StoredMessage, n)
	for i := range msgs {
		msgs[i] = msgAt(fmt.Sprintf("burst.s%d", i), now)
	}
	h.schedule(msgs...)
	// Every delivery is taken before any is ACKed, so all are in flight at
	// once, and the ACKs come as one burst.
	got := make([]delivery, n)
	for i := range got {
		got[i] = h.next(10 * time.Second)
	}
	done := make(chan error, n)
	for _, d := range got {
		h.d.Ack(d.key, dispatch.Ack{Kind: dispatch.AckDone}, func(err error) { done <- err })
	}
	for range n {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	checkFor(t, 10*time.Second, func() error {
		if st := h.d.Stats(); st.Topics != 0 || st.InFlight != 0 {
			return fmt.Errorf("%d subjects, %d in flight; want none", st.Topics, st.InFlight)
		}
		return nil
	})
	held := h.d.HeldForTest()
	const small = 1024
	for name, v := range map[string]int{
		"topics map": held.Topics, "flights map": held.Flights, "unsent map": held.Unsent, "canceled map": held.Canceled,
		"due heap": held.Due, "timer heap": held.Timers, "idle list": held.Idle, "committed list": held.Committed,
		"deleter queue": held.DeleterDue, "deleter waiting updates": held.DeleterWait,
	} {
		if v > small {
			t.Errorf("%s keeps room for %d entries after the burst; want at most %d", name, v, small)
		}
	}
	if held.DeleterOps != 0 {
		t.Errorf("deleter holds %d writes after the burst; want none", held.DeleterOps)
	}
}

// gatedPublisher is fakePublisher whose Flush waits until gate is closed.
type gatedPublisher struct {
	*fakePublisher
	gate chan struct{}
}

func (p *gatedPublisher) Flush(ctx context.Context) error {
	<-p.gate
	return p.fakePublisher.Flush(ctx)
}

// Guarantee: a message ACKed before its delivery's flush came back is not
// rewritten with its attempt count: the delete is all it gets, and the
// deleter keeps nothing of it (before, the count waited there, with the
// message, for the AttemptWriteDelay, and then read the store under the
// write lock to find it gone). A message still in flight gets its count
// queued as before.
func TestDispatcher_AckBeforeFlush_NoAttemptWrite(t *testing.T) {
	gp := &gatedPublisher{gate: make(chan struct{})}
	wrap := func(p *fakePublisher) dispatch.Publisher { gp.fakePublisher = p; return gp }
	h := newWrappedHarness(t, delaystore.RepositoryConfig{}, wrap, func(c *dispatch.Config) {
		c.AttemptWriteDelay = time.Hour
		c.PassLimit = 1 // the second pass waits for the first one's flush
	})
	a := h.schedule(msgAt("gate.a", time.Now()))[0]
	h.next(10 * time.Second) // pass 1 published a; its flush waits at the gate
	b := h.schedule(msgAt("gate.b", time.Now()))[0]
	h.next(10 * time.Second) // pass 2 published b and waits for room to queue its flush
	// NB: no pass can run now, so a's flight is not forgotten when its
	// delete commits: its flush finds it settling.
	if err := h.ack(a, dispatch.Ack{Kind: dispatch.AckDone}); err != nil {
		t.Fatal(err)
	}
	close(gp.gate)
	checkFor(t, 10*time.Second, func() error {
		if st := h.d.Stats(); st.InFlight != 1 {
			return fmt.Errorf("%d in flight; want b alone", st.InFlight)
		}
		if !h.d.QueuedWriteForTest(b) {
			return fmt.Errorf("b's attempt count not queued yet")
		}
		return nil
	})
	if h.d.QueuedWriteForTest(a) {
		t.Fatal("the deleter holds an attempt write of a, ACKed and deleted")
	}
}

// Guarantee: the service goes idle (and hands memory back) only when
// the dispatcher has nothing under way or soon: Busy is false with
// nothing due within the horizon, true with a message due within it, and
// true while a delivery is in flight, until its ACK has settled it.
func TestDispatcher_Busy(t *testing.T) {
	h := newHarness(t, 0, nil)
	checkFor(t, 10*time.Second, func() error {
		if h.d.Busy(10 * time.Second) {
			return fmt.Errorf("busy with nothing stored")
		}
		return nil
	})
	h.schedule(msgAt("busy.later", time.Now().Add(time.Hour)))
	checkFor(t, 10*time.Second, func() error {
		if !h.d.Busy(2 * time.Hour) {
			return fmt.Errorf("not busy with a message due within the horizon")
		}
		return nil
	})
	// NB: the schedule's notice may have started a pass, which is busy
	// while it runs; once it ends, nothing is due within the horizon.
	checkFor(t, 10*time.Second, func() error {
		if h.d.Busy(10 * time.Second) {
			return fmt.Errorf("busy with the only message due in an hour")
		}
		return nil
	})
	h.schedule(msgAt("busy.now", time.Now()))
	d := h.next(10 * time.Second)
	if !h.d.Busy(10 * time.Second) {
		t.Fatal("not busy with a delivery in flight")
	}
	if err := h.ack(d.key, dispatch.Ack{Kind: dispatch.AckDone}); err != nil {
		t.Fatal(err)
	}
	checkFor(t, 10*time.Second, func() error {
		if h.d.Busy(10 * time.Second) {
			return fmt.Errorf("still busy after the ACK settled the delivery")
		}
		return nil
	})
}
