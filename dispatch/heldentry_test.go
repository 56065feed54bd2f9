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
	"github.com/natsdelay/natsdelay/keys"
)

// TestDispatcher_HeldTopic_EntriesPassedWhileHeldDelivered checks that a
// subject held at its in-flight limit delivers every message that fell
// due while it was held, in order. The frontier passes a held subject's
// due-index entries (its scan resumes at its cursor when room comes), so
// that scan must read the subject's range, not only the one entry that
// brought the subject back into memory. Before, the subject kept the
// point read of that first entry: the scan after the limit took just
// that message, moved the cursor past it, and the message that fell due
// while the subject was held was never read again (a later entry moved
// the cursor past it too), or only once something re-read the subject
// from a lower key, after later messages of its subject.
//
// The clock is stepped, so each read of the due index sees exactly the
// entries named, however slow the machine: the held subject's second
// message falls due only after the subject is held.
func TestDispatcher_HeldTopic_EntriesPassedWhileHeldDelivered(t *testing.T) {
	var skew atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	h := newHarness(t, 0, func(c *dispatch.Config) {
		c.MaxInFlight, c.SubjectMaxInFlight = 64, 1
		c.AckWait = time.Hour // no redelivery while the clock is stepped
		c.Now = now
	})
	want := func(what string, k keys.Key) {
		t.Helper()
		if d := h.next(30 * time.Second); d.key != k {
			t.Fatalf("delivered %v (%s), want %s %v", d.key, d.subject, what, k)
		}
	}

	// The first message takes the subject's one slot.
	first := h.schedule(msgAt("held", now()))[0]
	want("the first message", first)
	base := now()
	second := h.schedule(msgAt("held", base.Add(time.Minute)))[0]
	third := h.schedule(msgAt("held", base.Add(2*time.Minute)))[0]

	// The second falls due: the frontier brings the subject back with
	// its entry, and the subject, at its limit, is held. The message on
	// another subject wakes the loop and tells that the pass is over.
	skew.Add(int64(90 * time.Second))
	want("the wake-up on another subject", h.schedule(msgAt("other.1", now()))[0])
	if s := h.d.Subject("held"); !s.Limited {
		t.Fatalf("subject state %+v, want held at its limit", s)
	}

	// The third falls due while the subject is held: the frontier passes
	// its entry.
	skew.Add(int64(time.Minute))
	want("the wake-up on another subject", h.schedule(msgAt("other.2", now()))[0])

	// Room, one slot at a time: the held messages go out in order.
	for _, next := range []struct {
		what   string
		acked  keys.Key
		wanted keys.Key
	}{{"the second message", first, second}, {"the third message, due while its subject was held", second, third}} {
		if err := h.ack(next.acked, dispatch.Ack{Kind: dispatch.AckDone}); err != nil {
			t.Fatal(err)
		}
		want(next.what, next.wanted)
	}
}

// TestDispatcher_MoveRefused_MessageStillDelivered checks that a message
// whose move is refused (its MoveFunc fails) is still delivered. While a
// move runs the message is marked settled, so a scan of its subject
// passes it; the refusal takes the mark back, and must bring the message
// back to its subject's scans too. Before, it stayed behind the cursor,
// and was delivered only after a restart.
func TestDispatcher_MoveRefused_MessageStillDelivered(t *testing.T) {
	var skew atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	h := newHarness(t, 0, func(c *dispatch.Config) {
		c.AckWait = time.Hour
		c.Now = now
	})
	base := now()
	moved := h.schedule(msgAt("moved", base.Add(time.Minute)))[0]
	after := h.schedule(msgAt("moved", base.Add(2*time.Minute)))[0]
	refused := errors.New("refused")
	_, err := h.d.Move(moved, func(*delaystore.StoredMessage) (int64, error) {
		// Both fall due while the move runs; the scan of their subject
		// passes the one being moved.
		skew.Add(int64(3 * time.Minute))
		if err := h.d.ReloadLimits(); err != nil { // wakes the loop
			return 0, err
		}
		if d := h.next(30 * time.Second); d.key != after {
			return 0, fmt.Errorf("delivered %v during the move, want %v", d.key, after)
		}
		return 0, refused
	}, "test", delaystore.Sync)
	if !errors.Is(err, refused) {
		t.Fatalf("Move: %v, want the refusal", err)
	}
	if d := h.next(30 * time.Second); d.key != moved {
		t.Fatalf("delivered %v, want the message whose move was refused %v", d.key, moved)
	}
}

// failingDeadLetters is the fake publisher whose dead letters fail, each
// once release is closed; entered is closed when the first one waits.
type failingDeadLetters struct {
	*fakePublisher
	entered, release chan struct{}
	once             sync.Once
}

func (p *failingDeadLetters) DeadLetter(string, keys.Key, *delaystore.StoredMessage, uint32, string) error {
	p.once.Do(func() { close(p.entered) })
	<-p.release
	return errors.New("dead-letter subject down")
}

// TestDispatcher_TermNotDeadLettered_MessageStillDelivered checks that a
// message whose +TERM cannot be dead-lettered is still delivered. The
// +TERM marks it settled while its dead letter is published, so a scan of
// its subject passes it; when the dead letter fails the message stays
// pending, and must come back to its subject's scans. Before, it stayed
// behind the cursor, and was delivered only after a restart.
func TestDispatcher_TermNotDeadLettered_MessageStillDelivered(t *testing.T) {
	var failing *failingDeadLetters
	h := newWrappedHarness(t, delaystore.RepositoryConfig{}, func(p *fakePublisher) dispatch.Publisher {
		failing = &failingDeadLetters{fakePublisher: p, entered: make(chan struct{}), release: make(chan struct{})}
		return failing
	}, func(c *dispatch.Config) {
		c.MaxInFlight, c.SubjectMaxInFlight = 64, 1
		c.AckWait = time.Hour
		c.DeadLetterSubject = "dead"
		c.NoRespondersBackoff, c.NoRespondersMaxBackoff = 10*time.Millisecond, 10*time.Millisecond
	})
	var once sync.Once
	release := func() { once.Do(func() { close(failing.release) }) }
	t.Cleanup(release)
	at := time.Now()
	ks := h.schedule(msgAt("termed", at), msgAt("termed", at), msgAt("termed", at))
	want := func(what string, k keys.Key) {
		t.Helper()
		if d := h.next(30 * time.Second); d.key != k {
			t.Fatalf("delivered %v, want %s %v", d.key, what, k)
		}
	}
	want("the first message", ks[0])

	// The second, held behind the first by the subject's limit, is
	// TERMed: its dead letter waits, and so does the +TERM (its answer
	// below ends the goroutine).
	termed := make(chan error, 1)
	go h.d.Ack(ks[1], dispatch.Ack{Kind: dispatch.AckTerm}, func(err error) { termed <- err })
	select {
	case <-failing.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the +TERM did not dead-letter the message")
	}
	// Room: the scan passes the TERMed message and takes the third.
	if err := h.ack(ks[0], dispatch.Ack{Kind: dispatch.AckDone}); err != nil {
		t.Fatal(err)
	}
	want("the third message, the second being TERMed", ks[2])
	release()
	select {
	case err := <-termed:
		if err == nil {
			t.Fatal("the +TERM succeeded, though its dead letter failed")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the +TERM was not answered")
	}
	// The dead letter failed: the message is still pending, and goes out
	// once its subject has room.
	if err := h.ack(ks[2], dispatch.Ack{Kind: dispatch.AckDone}); err != nil {
		t.Fatal(err)
	}
	want("the message whose dead letter failed", ks[1])
}
