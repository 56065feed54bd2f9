package core_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/natsdelay/natsdelay/bridge/internal/core"
	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/delaystore/pebblestore"
	"github.com/natsdelay/natsdelay/delaystore/storetest"
	"github.com/natsdelay/natsdelay/dispatch"
	"github.com/natsdelay/natsdelay/keys"
)

// TestMain fails the package's tests if any goroutine outlives them: the
// recovery loop and each generation's goroutines have an owner that stops
// them.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// wait bounds every wait for an event; a passing test never waits this
// long.
const wait = 30 * time.Second

// publisher records deliveries on a channel; no NATS is involved.
type publisher struct {
	delivered chan keys.Key
}

func newPublisher() *publisher { return &publisher{delivered: make(chan keys.Key, 64)} }

func (p *publisher) Deliver(k keys.Key, _ *delaystore.StoredMessage, _ uint32) error {
	p.delivered <- k
	return nil
}

func (p *publisher) DeadLetter(string, keys.Key, *delaystore.StoredMessage, uint32, string) error {
	return nil
}

func (p *publisher) Flush(context.Context) error { return nil }

func memStore(tb testing.TB) delaystore.Store {
	tb.Helper()
	st, err := pebblestore.Open(pebblestore.Config{InMemory: true})
	if err != nil {
		tb.Fatal(err)
	}
	return st
}

// open runs a Service over st with p, closed when tb ends.
func open(tb testing.TB, st delaystore.Store, p dispatch.Publisher, mod func(*core.Config), opts ...core.Option) *core.Service {
	tb.Helper()
	var cfg core.Config
	cfg.Logger = slog.New(slog.NewTextHandler(tb.Output(), nil))
	if mod != nil {
		mod(&cfg)
	}
	s, err := core.Open(st, p, cfg, opts...)
	if err != nil {
		tb.Fatalf("Open: %v", err)
	}
	tb.Cleanup(func() {
		if err := s.Close(); err != nil {
			tb.Errorf("Close: %v", err)
		}
	})
	return s
}

// schedule stores msg through the group commit and returns its key.
func schedule(tb testing.TB, s *core.Service, msg *delaystore.StoredMessage) keys.Key {
	tb.Helper()
	type result struct {
		k   keys.Key
		err error
	}
	done := make(chan result, 1)
	if err := s.Schedule(msg, func(k keys.Key, err error) { done <- result{k, err} }); err != nil {
		tb.Fatalf("Schedule: %v", err)
	}
	select {
	case r := <-done:
		if r.err != nil {
			tb.Fatalf("Schedule: %v", r.err)
		}
		return r.k
	case <-time.After(wait):
		tb.Fatal("Schedule never answered")
	}
	return keys.Key{}
}

func next(tb testing.TB, ch <-chan keys.Key) keys.Key {
	tb.Helper()
	select {
	case k := <-ch:
		return k
	case <-time.After(wait):
		tb.Fatal("nothing delivered")
	}
	return keys.Key{}
}

// TestService_Schedule_DeliversAndAcks checks the life of one message
// through Go calls alone: stored, delivered when due, settled by an ACK,
// and gone from the counts.
func TestService_Schedule_DeliversAndAcks(t *testing.T) {
	p := newPublisher()
	s := open(t, memStore(t), p, nil)
	k := schedule(t, s, &delaystore.StoredMessage{Subject: "orders.a", FireAtNs: time.Now().UnixNano()})
	if got := next(t, p.delivered); got != k {
		t.Fatalf("delivered %s, want %s", got, k)
	}
	acked := make(chan error, 1)
	if err := s.Ack(k, dispatch.Ack{Kind: dispatch.AckDone}, func(err error) { acked <- err }); err != nil {
		t.Fatal(err)
	}
	if err := <-acked; err != nil {
		t.Fatalf("Ack: %v", err)
	}
	if _, err := s.Get(k); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("Get after ACK = %v, want a 404", err)
	}
	// NB: Delivered is counted after the flush that follows the delivery,
	// which may come after the ACK.
	if st := s.Stats(); st.Acked != 1 {
		t.Fatalf("stats = %+v, want one acked", st)
	}
}

// TestService_Counts_ByKey checks INFO's counts and the API's reads on a
// message due in a minute and a half: not due, within the hour, found by
// Get, Lookup and List, and gone after Cancel.
func TestService_Counts_ByKey(t *testing.T) {
	s := open(t, memStore(t), newPublisher(), nil)
	k := schedule(t, s, &delaystore.StoredMessage{Subject: "orders.b", ClientId: "x", FireAtNs: time.Now().Add(90 * time.Second).UnixNano()})
	c, err := s.Counts()
	if err != nil {
		t.Fatal(err)
	}
	if c.Pending != 1 || c.Subjects != 1 || c.DueNow != 0 || c.NextMinute != 0 || c.NextHour != 1 || c.NextDay != 1 {
		t.Fatalf("counts = %+v", c)
	}
	if got, err := s.Lookup("orders.b", "x"); err != nil || got != k {
		t.Fatalf("Lookup = %v, %v; want %v", got, err, k)
	}
	var listed []keys.Key
	if err := s.List("orders.b", nil, func(k keys.Key, _ *delaystore.StoredMessage) bool { listed = append(listed, k); return true }); err != nil || len(listed) != 1 {
		t.Fatalf("List = %v, %v", listed, err)
	}
	if err := s.Cancel(context.Background(), k); err != nil {
		t.Fatal(err)
	}
	if err := s.Cancel(context.Background(), k); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("second Cancel = %v, want a 404", err)
	}
}

// reopener counts reopens and hands out fresh in-memory stores.
type reopener struct {
	mu sync.Mutex
	n  int
	t  *testing.T
}

func (r *reopener) reopen() (delaystore.Store, error) {
	r.mu.Lock()
	r.n++
	r.mu.Unlock()
	return memStore(r.t), nil
}

func waitReady(t *testing.T, s *core.Service) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for s.Ready() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("not ready: %v", s.Ready())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestService_StorageFault_ReplacesGeneration checks that a failed commit
// makes the Service answer 503 at once and recover by itself on a
// reopened store, with its counters kept.
func TestService_StorageFault_ReplacesGeneration(t *testing.T) {
	st := storetest.NewFailingStore(memStore(t))
	r := &reopener{t: t}
	s := open(t, st, newPublisher(), func(c *core.Config) {
		c.ReopenBackoff, c.ReopenMaxBackoff = time.Millisecond, 10*time.Millisecond
	}, core.WithReopen(r.reopen))
	st.Break()
	done := make(chan error, 1)
	if err := s.Schedule(&delaystore.StoredMessage{Subject: "a", FireAtNs: time.Now().Add(time.Hour).UnixNano()}, func(_ keys.Key, err error) { done <- err }); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, wire.ErrUnavailable) {
		t.Fatalf("Schedule on a failing store = %v, want a 503", err)
	}
	waitReady(t, s)
	r.mu.Lock()
	n := r.n
	r.mu.Unlock()
	if n == 0 {
		t.Fatal("ready again without a reopen")
	}
	schedule(t, s, &delaystore.StoredMessage{Subject: "a", FireAtNs: time.Now().Add(time.Hour).UnixNano()})
}

// TestService_Suspend_Resume checks that a generation can be stopped and
// started for a reason other than a fault: while suspended every call is a
// 503 naming the reason, and Resume brings a new generation up.
func TestService_Suspend_Resume(t *testing.T) {
	r := &reopener{t: t}
	s := open(t, memStore(t), newPublisher(), nil, core.WithReopen(r.reopen))
	reason := errors.New("not the leader")
	s.Suspend(reason)
	err := s.Schedule(&delaystore.StoredMessage{Subject: "a"}, func(keys.Key, error) { t.Error("done called") })
	if !errors.Is(err, wire.ErrUnavailable) || s.Ready() == nil || !errors.Is(s.Down(), reason) {
		t.Fatalf("while suspended: Schedule = %v, Ready = %v, Down = %v", err, s.Ready(), s.Down())
	}
	s.Resume()
	waitReady(t, s)
	schedule(t, s, &delaystore.StoredMessage{Subject: "a", FireAtNs: time.Now().Add(time.Hour).UnixNano()})
}

// openSuspendedWithDue opens, with p and suspended for reason, a Service
// on an in-memory store that holds one message due now, and returns it
// and the message's key. The store stays open across the Service's
// reopens (see WithReopen).
func openSuspendedWithDue(t *testing.T, p dispatch.Publisher, reason error) (*core.Service, keys.Key) {
	t.Helper()
	st := memStore(t)
	t.Cleanup(func() { _ = st.Close() })
	repo, err := delaystore.OpenRepository(st, delaystore.DefaultRepositoryConfig())
	if err != nil {
		t.Fatal(err)
	}
	res, err := repo.Schedule([]*delaystore.StoredMessage{{Subject: "due", FireAtNs: time.Now().UnixNano()}}, delaystore.Sync)
	if err != nil {
		t.Fatal(err)
	}
	_ = repo.Close()
	s := open(t, keepOpen{st}, p, func(c *core.Config) { c.StartSuspended = reason },
		core.WithReopen(func() (delaystore.Store, error) { return keepOpen{st}, nil }))
	return s, res[0].Key
}

// TestService_StartSuspended_DeliversOnlyAfterResume checks what a node
// of a cluster needs: opened suspended, the Service runs nothing on the
// store (no dispatcher exists to deliver the message due in it, calls are
// a 503 naming the reason) until Resume, which opens the store through
// Reopen; WaitUp returns once it takes work, and the due message is then
// delivered.
func TestService_StartSuspended_DeliversOnlyAfterResume(t *testing.T) {
	p := newPublisher()
	reason := errors.New("not the leader")
	s, due := openSuspendedWithDue(t, p, reason)
	err := s.Schedule(&delaystore.StoredMessage{Subject: "a"}, func(keys.Key, error) { t.Error("done called") })
	if !errors.Is(err, wire.ErrUnavailable) || !errors.Is(s.Down(), reason) || s.Ready() == nil {
		t.Fatalf("suspended at start: Schedule = %v, Down = %v, Ready = %v", err, s.Down(), s.Ready())
	}
	if s.Dispatcher() != nil || s.Stats().Delivered != 0 {
		t.Fatalf("suspended at start, a generation runs: dispatcher %v, stats %+v", s.Dispatcher(), s.Stats())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	if err := s.WaitUp(ctx); err == nil {
		t.Fatal("WaitUp returned nil while suspended")
	}
	cancel()

	s.Resume()
	ctx, cancel = context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := s.WaitUp(ctx); err != nil {
		t.Fatalf("WaitUp after Resume: %v", err)
	}
	if err := s.Down(); err != nil {
		t.Fatalf("up, but Down = %v", err)
	}
	if got := next(t, p.delivered); got != due {
		t.Fatalf("delivered %s, want %s", got, due)
	}
}

// TestService_Open_StartSuspendedNeedsReopen checks that a Service that
// starts suspended without a way to open its store is refused at Open.
func TestService_Open_StartSuspendedNeedsReopen(t *testing.T) {
	var cfg core.Config
	cfg.StartSuspended = errors.New("follower")
	if _, err := core.Open(memStore(t), newPublisher(), cfg); !errors.Is(err, core.ErrInvalidConfig) || !containsErr(err, "WithReopen") {
		t.Fatalf("Open = %v, want ErrInvalidConfig about WithReopen", err)
	}
}

// keepOpen is a store whose Close leaves the store open, as a replicated
// store's does: the Service closes and reopens it at will.
type keepOpen struct{ delaystore.Store }

func (keepOpen) Close() error { return nil }

// TestService_Open_ReportsEverySetting checks that Open refuses bad
// settings of every nested config at once and closes the store.
func TestService_Open_ReportsEverySetting(t *testing.T) {
	var cfg core.Config
	cfg.Delivery.AckWait, cfg.Repository.TimeBucket, cfg.Expiry.Interval, cfg.MaxBatch = -1, -1, -1, -1
	_, err := core.Open(memStore(t), nil, cfg)
	if !errors.Is(err, core.ErrInvalidConfig) {
		t.Fatalf("Open = %v, want ErrInvalidConfig", err)
	}
	for _, want := range []string{"AckWait", "TimeBucket", "Interval", "MaxBatch", "no publisher"} {
		if !containsErr(err, want) {
			t.Errorf("Open error %q does not mention %s", err, want)
		}
	}
}

func containsErr(err error, s string) bool {
	return err != nil && strings.Contains(err.Error(), s)
}

// TestService_Close_ReportsDispatcherCloseError checks that Close returns
// the error of a dispatcher that could not commit what it had queued (an
// attempt count, written late by AttemptWriteDelay): the store failed at
// close, and the caller is told so instead of a clean nil.
func TestService_Close_ReportsDispatcherCloseError(t *testing.T) {
	st := storetest.NewFailingStore(memStore(t))
	p := newPublisher()
	s, err := core.Open(st, p, core.Config{
		Logger:   slog.New(slog.NewTextHandler(t.Output(), nil)),
		Delivery: dispatch.Config{AttemptWriteDelay: time.Hour},
	})
	if err != nil {
		t.Fatal(err)
	}
	k := schedule(t, s, &delaystore.StoredMessage{Subject: "a", FireAtNs: time.Now().UnixNano()})
	if got := next(t, p.delivered); got != k {
		t.Fatalf("delivered %v, want %v", got, k)
	}
	st.Break()
	if err := s.Close(); !errors.Is(err, delaystore.ErrFailed) {
		t.Fatalf("Close = %v, want the dispatcher's failed commit", err)
	}
}
