package gate_test

import (
	"errors"
	"testing"
	"time"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/delaystore/internal/gate"
)

// TestGate_Close_WaitsForCalls checks that Close waits for the calls in
// flight and turns later ones away, so an engine is never used after it
// released its files.
func TestGate_Close_WaitsForCalls(t *testing.T) {
	g := gate.New[int](nil)
	if err := g.Enter(); err != nil {
		t.Fatalf("Enter: %v", err)
	}
	g.Track(1)
	g.Track(2)
	g.Forget(2)
	closed := make(chan map[int]struct{})
	go func() {
		leaked, _, _ := g.Close()
		closed <- leaked
	}()
	select {
	case <-closed:
		t.Fatal("Close returned with a call in flight")
	case <-time.After(20 * time.Millisecond):
	}
	g.Exit()
	leaked := <-closed
	if _, ok := leaked[1]; len(leaked) != 1 || !ok {
		t.Errorf("leaked = %v, want the one iterator not forgotten", leaked)
	}
	if err := g.Enter(); !errors.Is(err, delaystore.ErrClosed) {
		t.Errorf("Enter after Close = %v, want ErrClosed", err)
	}
	if _, _, ok := g.Close(); ok {
		t.Error("second Close reported ok")
	}
}

// TestGate_Fail_Sticks checks that a failure, reported or found by check,
// turns every later call away with ErrFailed.
func TestGate_Fail_Sticks(t *testing.T) {
	cause := errors.New("disk on fire")
	g := gate.New[int](nil)
	err, first := g.Fail(cause)
	if !first || !errors.Is(err, delaystore.ErrFailed) || !errors.Is(err, cause) {
		t.Fatalf("Fail = %v, %v; want the first, wrapping ErrFailed and the cause", err, first)
	}
	if _, first := g.Fail(errors.New("again")); first {
		t.Error("second Fail reported first")
	}
	if err := g.Enter(); !errors.Is(err, cause) {
		t.Errorf("Enter after Fail = %v, want the cause", err)
	}
	if _, failed, _ := g.Close(); !errors.Is(failed, cause) {
		t.Errorf("Close failed = %v, want the cause", failed)
	}

	checked := gate.New[int](func() error { return cause })
	if err := checked.Enter(); !errors.Is(err, delaystore.ErrFailed) || !errors.Is(err, cause) {
		t.Errorf("Enter with a failing check = %v, want ErrFailed and the cause", err)
	}
}
