package dispatch_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/dispatch"
	"github.com/natsdelay/natsdelay/keys"
)

// refusingPublisher is the fake publisher with every Deliver refused, as
// a connection that is down refuses them; it counts the refusals.
type refusingPublisher struct {
	*fakePublisher
	refused atomic.Int64
}

func (p *refusingPublisher) Deliver(keys.Key, *delaystore.StoredMessage, uint32) error {
	p.refused.Add(1)
	return errors.New("nats: connection closed")
}

// warnCounter is a slog.Handler that counts the WARN records whose
// message starts with prefix, and passes every record on to next.
type warnCounter struct {
	prefix string
	n      *atomic.Int64 // shared with the handlers WithAttrs returns
	next   slog.Handler
}

func (w *warnCounter) Enabled(context.Context, slog.Level) bool { return true }

func (w *warnCounter) Handle(ctx context.Context, r slog.Record) error {
	if r.Level == slog.LevelWarn && strings.HasPrefix(r.Message, w.prefix) {
		w.n.Add(1)
	}
	return w.next.Handle(ctx, r)
}

func (w *warnCounter) WithAttrs(as []slog.Attr) slog.Handler {
	return &warnCounter{prefix: w.prefix, n: w.n, next: w.next.WithAttrs(as)}
}

func (w *warnCounter) WithGroup(g string) slog.Handler {
	return &warnCounter{prefix: w.prefix, n: w.n, next: w.next.WithGroup(g)}
}

// TestDispatcher_Outage_WarnsBounded checks that an outage of NATS, in
// which every delivery's publish fails, logs a bounded number of
// warnings, once per interval with the count held back, not one per
// failed publish.
func TestDispatcher_Outage_WarnsBounded(t *testing.T) {
	const subjects = 200
	warns := &warnCounter{prefix: "publishing delivery", n: new(atomic.Int64)}
	var rp *refusingPublisher
	wrap := func(p *fakePublisher) dispatch.Publisher { rp = &refusingPublisher{fakePublisher: p}; return rp }
	start := time.Now()
	h := newWrappedHarness(t, delaystore.RepositoryConfig{}, wrap, func(c *dispatch.Config) {
		warns.next = c.Logger.Handler()
		c.Logger = slog.New(warns)
	})
	msgs := make([]*delaystore.StoredMessage, subjects)
	for i := range msgs {
		msgs[i] = msgAt(fmt.Sprintf("s%d", i), time.Now())
	}
	h.schedule(msgs...)
	checkFor(t, 10*time.Second, func() error {
		if n := rp.refused.Load(); n < subjects {
			return fmt.Errorf("%d publishes refused, want %d", n, subjects)
		}
		return nil
	})
	// One warning per 10 s interval begun since the start, at most.
	if n, most := warns.n.Load(), int64(1+time.Since(start)/(10*time.Second)); n > most {
		t.Fatalf("%d warnings for %d failed publishes, want at most %d", n, rp.refused.Load(), most)
	}
}

// onceFailingPublisher is the fake publisher whose Deliver fails once, at
// its failAt-th call, as a connection that drops one publish and then
// takes deliveries again.
type onceFailingPublisher struct {
	*fakePublisher
	calls  atomic.Int64
	failAt int64
}

func (p *onceFailingPublisher) Deliver(k keys.Key, m *delaystore.StoredMessage, attempt uint32) error {
	if p.calls.Add(1) == p.failAt {
		return errors.New("nats: connection reconnecting")
	}
	return p.fakePublisher.Deliver(k, m, attempt)
}

// TestDispatcher_PublishFailsMidPass_RestOfSubjectStaysBehind checks order
// per subject when one publish fails in the middle of a pass and the next
// ones would succeed: the subject's later messages of that pass wait
// behind the failed one instead of going out before it.
func TestDispatcher_PublishFailsMidPass_RestOfSubjectStaysBehind(t *testing.T) {
	h := newWrappedHarness(t, delaystore.RepositoryConfig{}, func(p *fakePublisher) dispatch.Publisher {
		return &onceFailingPublisher{fakePublisher: p, failAt: 11}
	}, nil)
	now := time.Now().Add(50 * time.Millisecond)
	var batch []*delaystore.StoredMessage
	for i := range 100 {
		batch = append(batch, msgAt("failmidpass", now.Add(time.Duration(i)*time.Microsecond)))
	}
	ks := h.schedule(batch...)
	for i := range 100 {
		d := h.next(30 * time.Second)
		if d.key != ks[i] || d.attempt != 1 {
			t.Fatalf("delivery %d: %v attempt %d, want %v attempt 1", i, d.key, d.attempt, ks[i])
		}
	}
	select {
	case d := <-h.pub.deliveries:
		t.Fatalf("delivered %v twice", d.key)
	default:
	}
}
