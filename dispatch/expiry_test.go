package dispatch_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/dispatch"
	"github.com/natsdelay/natsdelay/keys"
)

// heldDeadLetters is the fake publisher whose first dead letter waits
// until release is closed; entered is closed once it waits.
type heldDeadLetters struct {
	*fakePublisher
	entered, release chan struct{}
	calls            chan struct{}
}

func (p *heldDeadLetters) DeadLetter(subject string, k keys.Key, m *delaystore.StoredMessage, attempt uint32, reason string) error {
	select {
	case p.calls <- struct{}{}:
	default:
	}
	if len(p.calls) == 1 {
		select {
		case <-p.entered:
		default:
			close(p.entered)
			<-p.release
		}
	}
	return p.fakePublisher.DeadLetter(subject, k, m, attempt, reason)
}

// TestDispatcher_SettlingAtRedelivery_SweepLeavesIt checks that a message
// being settled when its ack wait runs out is settled once: the expiry
// sweep (Expire) that reads it before the dead letter and the delete are
// done must leave it to them. Before, the flight was only marked
// settling, so the sweep dead-lettered the message a second time, and
// counted it expired twice (or once beside its Delay-Max-Deliver).
func TestDispatcher_SettlingAtRedelivery_SweepLeavesIt(t *testing.T) {
	for _, tc := range []struct {
		name        string
		maxDeliver  uint32
		wantReason  string
		wantExpired uint64
	}{
		{"expired at its redelivery", 0, "expired", 1},
		{"at its max deliver, expired meanwhile", 1, "max-deliver", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The clock jumps past the message's expiry once it has gone
			// out, so that it expires between its delivery and the end of
			// its ack wait however slow the machine.
			var skew atomic.Int64
			var held *heldDeadLetters
			h := newWrappedHarness(t, delaystore.RepositoryConfig{}, func(p *fakePublisher) dispatch.Publisher {
				held = &heldDeadLetters{fakePublisher: p, entered: make(chan struct{}), release: make(chan struct{}), calls: make(chan struct{}, 8)}
				return held
			}, func(c *dispatch.Config) {
				c.AckWait = 50 * time.Millisecond
				c.MaxDeliver = tc.maxDeliver
				c.DeadLetterSubject = "dead"
				c.DeadLetterExpired = true
				c.Now = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
			})
			// Let a dead letter still held go before the harness closes,
			// should the test stop early.
			var once sync.Once
			release := func() { once.Do(func() { close(held.release) }) }
			t.Cleanup(release)
			m := msgAt("ttl", time.Now())
			m.ExpireAtNs = time.Now().Add(time.Hour).UnixNano()
			k := h.schedule(m)[0]
			if d := h.next(30 * time.Second); d.key != k {
				t.Fatalf("delivered %v, want %v", d.key, k)
			}
			skew.Store(int64(2 * time.Hour))
			// Unanswered, the message comes up again after its ack wait,
			// past its expiry, and is settled: its dead letter waits.
			select {
			case <-held.entered:
			case <-time.After(30 * time.Second):
				t.Fatal("the message was not dead-lettered when its ack wait ran out")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := h.d.Expire(ctx, []keys.Key{k}); err != nil {
				t.Fatalf("Expire: %v", err)
			}
			release()
			checkFor(t, 30*time.Second, func() error {
				if _, err := h.repo.Get(k); err == nil {
					return errors.New("still stored")
				}
				return nil
			})
			if n := len(held.calls); n != 1 {
				t.Fatalf("dead-lettered %d times, want once", n)
			}
			select {
			case dl := <-h.pub.dead:
				if dl.reason != tc.wantReason {
					t.Fatalf("dead letter reason %q, want %q", dl.reason, tc.wantReason)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("no dead letter")
			}
			if st := h.d.Stats(); st.Expired != tc.wantExpired {
				t.Fatalf("expired %d, want %d", st.Expired, tc.wantExpired)
			}
		})
	}
}
