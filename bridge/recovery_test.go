package bridge_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/natsdelay/natsdelay/bridge"
	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/delaystore/pebblestore"
	"github.com/natsdelay/natsdelay/delaystore/storetest"
)

// newFailingStore is an in-memory store whose commits fail once broken.
func newFailingStore(t *testing.T) *storetest.FailingStore {
	t.Helper()
	st, err := pebblestore.Open(pebblestore.Config{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	return storetest.NewFailingStore(st)
}

// requestStatus sends one ingest request and returns the error code and
// text of its reply, both empty on success.
func requestStatus(t *testing.T, nc *nats.Conn, subject string) (code, text string) {
	t.Helper()
	rep, err := nc.Request(subject, []byte("x"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return rep.Header.Get(wire.HeaderServiceErrorCode), rep.Header.Get(wire.HeaderServiceError)
}

// TestService_Recover_CloseWhileReopenFails checks that the recovery loop
// belongs to the Service: while Reopen keeps failing the service answers
// ingest with 503 "storage failing ...; recovering" and is not ready, and
// Close stops the loop and returns; TestMain finds any goroutine left.
func TestService_Recover_CloseWhileReopenFails(t *testing.T) {
	st := newFailingStore(t)
	reopens := make(chan struct{}, 100)
	s, nc := startServiceOn(t, st, func(c *bridge.Config) {
		c.ReopenBackoff = time.Millisecond
		c.ReopenMaxBackoff = 2 * time.Millisecond
	}, bridge.WithReopen(func() (delaystore.Store, error) {
		select {
		case reopens <- struct{}{}:
		default:
		}
		return nil, errors.New("test: still broken")
	}))
	if code, text := requestStatus(t, nc, "delay.r.x"); code != "" {
		t.Fatalf("before the fault: %s %s", code, text)
	}
	st.Break()
	code, text := requestStatus(t, nc, "delay.r.x")
	if code != "503" || !strings.Contains(text, "storage failing") || !strings.Contains(text, "injected") {
		t.Fatalf("commit under the fault: %q %q, want 503 storage failing with the cause", code, text)
	}
	for range 3 {
		select {
		case <-reopens:
		case <-time.After(10 * time.Second):
			t.Fatal("Reopen not called again")
		}
	}
	code, text = requestStatus(t, nc, "delay.r.x")
	if code != "503" || !strings.HasSuffix(text, "; recovering") || !strings.Contains(text, "injected") {
		t.Fatalf("ingest while recovering: %q %q, want 503 ending in \"; recovering\"", code, text)
	}
	if err := s.Ready(); err == nil || !strings.Contains(err.Error(), "storage failing") {
		t.Fatalf("Ready while recovering = %v, want storage failing", err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Close() }()
	select {
	case err := <-done:
		t.Logf("Close: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return while Reopen kept failing")
	}
}

// TestService_Recover_SwapsInReopenedStore checks that the service recovers
// by itself: after a commit fails the store, Reopen's store takes over,
// Ready is nil again, ingest succeeds, and the metrics and INFO tell what
// happened.
func TestService_Recover_SwapsInReopenedStore(t *testing.T) {
	st := newFailingStore(t)
	reg := prometheus.NewRegistry()
	reopened := make(chan struct{})
	s, nc := startServiceOn(t, st, func(c *bridge.Config) {
		c.ReopenBackoff = time.Millisecond
	}, bridge.WithReopen(func() (delaystore.Store, error) {
		// The store is memory-only: the reopened one is a new, empty
		// store, which is enough to show the swap.
		defer close(reopened)
		return pebblestore.Open(pebblestore.Config{InMemory: true})
	}), bridge.WithRegisterer(reg))
	st.Break()
	if code, _ := requestStatus(t, nc, "delay.r.x"); code != "503" {
		t.Fatalf("commit under the fault: code %q, want 503", code)
	}
	select {
	case <-reopened:
	case <-time.After(10 * time.Second):
		t.Fatal("Reopen not called")
	}
	deadline := time.Now().Add(10 * time.Second)
	for s.Ready() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("not ready after the reopen: %v", s.Ready())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if code, text := requestStatus(t, nc, "delay.r.x"); code != "" {
		t.Fatalf("after recovery: %s %s", code, text)
	}
	if n := bridge.Pending(s); n != 1 {
		t.Fatalf("pending in the reopened store = %d, want 1", n)
	}
	want := `
# HELP natsdelay_store_failures_total Times a write to disk failed the store (a failed WAL write or fsync, a full disk), each followed by a reopen.
# TYPE natsdelay_store_failures_total counter
natsdelay_store_failures_total 1
# HELP natsdelay_store_recovering 1 while the store has failed and is being reopened: ingest answers 503.
# TYPE natsdelay_store_recovering gauge
natsdelay_store_recovering 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "natsdelay_store_failures_total", "natsdelay_store_recovering"); err != nil {
		t.Fatal(err)
	}
	rep, err := nc.Request("$DELAY.API.INFO", nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(rep.Data), `"storage":"ok"`) {
		t.Fatalf("INFO after recovery: %s", rep.Data)
	}
}

// logSignal is a slog handler that sends each record's message whose text
// contains want on ch, without blocking, and drops the rest.
type logSignal struct {
	want string
	ch   chan string
}

func (h logSignal) Enabled(context.Context, slog.Level) bool { return true }
func (h logSignal) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, h.want) {
		select {
		case h.ch <- r.Message:
		default:
		}
	}
	return nil
}
func (h logSignal) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h logSignal) WithGroup(string) slog.Handler      { return h }

// TestService_Recover_RefailingStoreBacksOff checks that a store that
// fails again soon after it was reopened does not make the service flap: the
// recovery loop waits (here ReopenMaxBackoff, an hour) before the next
// reopen instead of reopening at once, the service stays unavailable
// meanwhile, and Close still returns at once.
func TestService_Recover_RefailingStoreBacksOff(t *testing.T) {
	first, second := newFailingStore(t), newFailingStore(t)
	var reopens atomic.Int32
	refailed := make(chan string, 1)
	s, nc := startServiceOn(t, first, func(c *bridge.Config) {
		c.ReopenBackoff = time.Hour
		c.ReopenMaxBackoff = time.Hour
		c.Logger = slog.New(logSignal{want: "failed again soon after it recovered", ch: refailed})
	}, bridge.WithReopen(func() (delaystore.Store, error) {
		if reopens.Add(1) > 1 {
			return nil, errors.New("test: reopened twice")
		}
		return second, nil
	}))
	first.Break()
	if code, _ := requestStatus(t, nc, "delay.r.x"); code != "503" {
		t.Fatalf("commit on the broken store: %q, want 503", code)
	}
	// The first reopen is at once.
	deadline := time.Now().Add(10 * time.Second)
	for s.Ready() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("not recovered onto the second store: %v", s.Ready())
		}
		time.Sleep(time.Millisecond)
	}
	second.Break()
	if code, _ := requestStatus(t, nc, "delay.r.x"); code != "503" {
		t.Fatalf("commit on the reopened, broken store: %q, want 503", code)
	}
	select {
	case <-refailed:
	case <-time.After(10 * time.Second):
		t.Fatal("the service did not say it waits before reopening a store that failed again")
	}
	if n := reopens.Load(); n != 1 {
		t.Fatalf("Reopen called %d times, want 1: a store that failed again was reopened without a wait", n)
	}
	if err := s.Ready(); err == nil || !strings.Contains(err.Error(), "storage failing") {
		t.Fatalf("Ready while waiting to reopen = %v, want storage failing", err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Close() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return while the recovery loop waited")
	}
}
