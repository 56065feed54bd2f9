// Package gate holds the call gating and failure state that every engine of
// delaystore shares: a count of the calls in flight, which Close waits for;
// the closed and failed states that turn later calls away with
// delaystore.ErrClosed or the fault; and the open iterators that Close
// closes if their owners did not.
//
// It starts no goroutines.
package gate

import (
	"fmt"
	"sync"

	"github.com/natsdelay/natsdelay/delaystore"
)

// Gate gates the calls into one engine. The zero Gate is not usable; see
// New. It is safe for concurrent use.
//
// It counts calls rather than holding a lock across them, so that no
// lock is held across engine I/O and a Scan's yield may call the store
// again.
type Gate[I comparable] struct {
	// check, if not nil, is asked on every Enter, under the lock, whether
	// the engine failed in a way no call reported (pebblestore's released
	// disk reserve). A non-nil answer fails the Gate.
	check func() error

	mu     sync.Mutex
	closed bool
	failed error
	calls  int
	idle   sync.Cond // signalled when calls drops to zero
	iters  map[I]struct{}
}

// New returns an open Gate. check, if not nil, is called on every Enter
// with the Gate's lock held: it must be quick and must not call the Gate.
func New[I comparable](check func() error) *Gate[I] {
	g := &Gate[I]{check: check, iters: make(map[I]struct{})}
	g.idle.L = &g.mu
	return g
}

// Enter counts a call that uses the engine, or returns delaystore.ErrClosed
// once Close has begun, or the failure once the Gate failed. Every Enter
// that returns nil must be matched by Exit.
func (g *Gate[I]) Enter() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.closed:
		return delaystore.ErrClosed
	case g.failed != nil:
		return g.failed
	}
	if g.check != nil {
		if err := g.check(); err != nil {
			g.failed = fmt.Errorf("%w: %w", delaystore.ErrFailed, err)
			return g.failed
		}
	}
	g.calls++
	return nil
}

// Exit ends a call counted by Enter.
func (g *Gate[I]) Exit() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.calls--
	if g.calls == 0 {
		g.idle.Broadcast()
	}
}

// Call runs f as one call counted by the Gate: it returns Enter's error
// without calling f, or f's.
func (g *Gate[I]) Call(f func() error) error {
	if err := g.Enter(); err != nil {
		return err
	}
	defer g.Exit()
	return f()
}

// Iter opens an iterator as one counted call, and tracks it (see Track)
// when open says it holds engine resources that Close must release.
func (g *Gate[I]) Iter(open func() (it I, held bool, err error)) (I, error) {
	var it I
	err := g.Call(func() error {
		var held bool
		var err error
		if it, held, err = open(); err == nil && held {
			g.Track(it)
		}
		return err
	})
	return it, err
}

// Fail records that a write failed on I/O and returns the error, wrapping
// delaystore.ErrFailed, that every later call gets. first reports whether
// this call set it, so the caller logs the fault once.
func (g *Gate[I]) Fail(cause error) (err error, first bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.failed == nil {
		g.failed = fmt.Errorf("%w: %w", delaystore.ErrFailed, cause)
		return g.failed, true
	}
	return g.failed, false
}

// Track adds an open iterator to the set Close hands back.
func (g *Gate[I]) Track(it I) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.iters[it] = struct{}{}
}

// Forget removes a closed iterator from the set Close hands back.
func (g *Gate[I]) Forget(it I) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.iters, it)
}

// Close turns every later call away with delaystore.ErrClosed and waits
// for the calls in flight. It returns the iterators still open, which the
// caller closes, and the failure, if any. ok is false if Close had begun
// before: the caller then has nothing to release.
func (g *Gate[I]) Close() (leaked map[I]struct{}, failed error, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil, nil, false
	}
	g.closed = true
	for g.calls > 0 {
		g.idle.Wait()
	}
	leaked, g.iters = g.iters, nil
	return leaked, g.failed, true
}
