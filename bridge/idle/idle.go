// Package idle runs an action once a service has gone quiet after a burst
// of work: the service hands back the memory the burst made it keep.
//
// # Basics
//
// The service calls Touch for its work as it happens (a commit to the
// store, with how many writes it held). A Watcher asleep since its last
// release is woken by the first Touch; from then on it looks once every
// Quiet: if there was no Touch during the last Quiet and InUse reports
// nothing under way, it calls Release, once, and sleeps again until the
// next Touch. So an idle service costs it nothing, a busy one an atomic
// add per commit and a wake-up per Quiet, and the release comes between
// one and two Quiet after the last work.
//
// # Caveats
//
// A release only follows MinActivity units of work since the last one: a
// trickle of work (a message a minute) would otherwise make the service
// release after every message, for nothing, since a trickle makes it keep
// little.
package idle

import (
	"sync"
	"sync/atomic"
	"time"
)

// Config configures a Watcher.
type Config struct {
	// Quiet is how long without a Touch makes the service idle. Required.
	Quiet time.Duration
	// MinActivity is the work (the sum of Touch's n) since the last
	// release that makes one worth it; 0 means any.
	MinActivity uint64
	// InUse, if not nil, reports work under way that Touch does not see
	// end (deliveries waiting for an answer): no release while it does.
	// It is called once per Quiet at most, and only once quiet.
	InUse func() bool
	// Release hands the memory back. Required. It runs on the Watcher's
	// goroutine, never twice at once.
	Release func()
	// After is the clock, for tests; nil means time.After.
	After func(time.Duration) <-chan time.Time

	// asleep, if not nil, is called each time the loop goes back to sleep
	// after a burst, released or not: tests synchronise on it.
	asleep func()
}

// Watcher calls Config.Release once after each burst of work. Start it
// with Start and stop it with Close.
type Watcher struct {
	cfg Config
	// work counts Touch's units since Start.
	work atomic.Uint64
	// touched is set by Touch and cleared by the loop at each look: a
	// look that finds it set saw work during the last Quiet.
	touched atomic.Bool
	wake    chan struct{} // cap 1: the first Touch after a release
	done    chan struct{}
	wg      sync.WaitGroup
	once    sync.Once
}

// Start starts a Watcher, asleep until the first Touch.
func Start(cfg Config) *Watcher {
	if cfg.After == nil {
		cfg.After = time.After
	}
	w := &Watcher{cfg: cfg, wake: make(chan struct{}, 1), done: make(chan struct{})}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		w.run()
	}()
	return w
}

// Touch records n units of work. It is cheap and safe for concurrent use:
// an atomic add, and a load that finds the flag set while work goes on.
func (w *Watcher) Touch(n int) {
	w.work.Add(uint64(n))
	if !w.touched.Load() && w.touched.CompareAndSwap(false, true) {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

// Close stops the Watcher and waits for its goroutine, and for a release
// under way. It is safe to call twice.
func (w *Watcher) Close() {
	w.once.Do(func() { close(w.done) })
	w.wg.Wait()
}

func (w *Watcher) run() {
	var releasedAt uint64 // work at the last release
	awake := false
	for {
		if !awake {
			select {
			case <-w.wake:
			case <-w.done:
				return
			}
			awake = true
		}
		select {
		case <-w.cfg.After(w.cfg.Quiet):
		case <-w.done:
			return
		}
		if w.touched.Swap(false) {
			continue // work during the last Quiet
		}
		if w.cfg.InUse != nil && w.cfg.InUse() {
			continue
		}
		if work := w.work.Load(); work-releasedAt >= w.cfg.MinActivity {
			w.cfg.Release()
			releasedAt = work
		}
		awake = false
		if w.cfg.asleep != nil {
			w.cfg.asleep()
		}
		// A Touch since the look above set touched again and sent a
		// wake-up, or one before it left a wake-up that the look has
		// accounted for. Drop the wake-up and go by the flag, so a
		// release is neither repeated with no work between nor missed
		// after work.
		select {
		case <-w.wake:
		default:
		}
		if w.touched.Load() {
			awake = true
		}
	}
}
