package idle

import (
	"sync"
	"testing"
	"time"
)

// harness runs a Watcher on a clock the test turns by hand: each timer
// the Watcher asks for arrives on asked, and fires when the test sends on
// it. Releases and the loop's going back to sleep arrive on their channels.
type harness struct {
	t        *testing.T
	w        *Watcher
	asked    chan chan time.Time
	released chan struct{}
	slept    chan struct{}
	inUse    chan bool // answers to InUse, one per call, when set
}

func start(t *testing.T, min uint64, withInUse bool) *harness {
	h := &harness{t: t, asked: make(chan chan time.Time, 16), released: make(chan struct{}, 16), slept: make(chan struct{}, 16)}
	cfg := Config{
		Quiet:       time.Second,
		MinActivity: min,
		Release:     func() { h.released <- struct{}{} },
		After: func(time.Duration) <-chan time.Time {
			c := make(chan time.Time, 1)
			h.asked <- c
			return c
		},
		asleep: func() { h.slept <- struct{}{} },
	}
	if withInUse {
		h.inUse = make(chan bool, 16)
		cfg.InUse = func() bool { return <-h.inUse }
	}
	h.w = Start(cfg)
	t.Cleanup(h.w.Close)
	return h
}

// tick waits for the Watcher to ask for a timer and fires it. The Watcher
// must not have released since the last look: a release comes before the
// next ask.
func (h *harness) tick() {
	h.t.Helper()
	c := <-h.asked
	h.noRelease()
	c <- time.Time{}
}

func (h *harness) noRelease() {
	h.t.Helper()
	select {
	case <-h.released:
		h.t.Fatal("released during a burst")
	default:
	}
}

// sleeps waits for the loop to go back to sleep and reports whether it
// released first.
func (h *harness) sleeps() bool {
	h.t.Helper()
	<-h.slept
	select {
	case <-h.released:
		return true
	default:
		return false
	}
}

// closeAsleep closes the Watcher and checks that, asleep, it asked for no
// timer and released nothing more: Close returns once the loop has.
func (h *harness) closeAsleep() {
	h.t.Helper()
	h.w.Close()
	select {
	case <-h.asked:
		h.t.Fatal("asked for a timer while asleep")
	default:
	}
	select {
	case <-h.released:
		h.t.Fatal("released again with no work in between")
	default:
	}
}

// Guarantee: memory is handed back once after a burst, once it has been
// quiet for a whole Quiet, and the Watcher then sleeps (no timer, no
// release) until the next work.
func TestWatcher_ReleasesOnceAfterBurst(t *testing.T) {
	h := start(t, 0, false)
	h.w.Touch(5)
	h.tick() // the Touch that woke it falls in this period
	h.tick() // quiet
	if !h.sleeps() {
		t.Fatal("no release after a quiet period")
	}
	h.closeAsleep()
}

// Guarantee: nothing is released while work goes on: each period with a
// Touch postpones the release by a period.
func TestWatcher_NotWhileBusy(t *testing.T) {
	h := start(t, 0, false)
	h.w.Touch(1)
	for range 5 {
		c := <-h.asked
		h.noRelease()
		h.w.Touch(1) // work during this period
		c <- time.Time{}
	}
	h.tick() // quiet: the last Touch fell in the period before
	if !h.sleeps() {
		t.Fatal("no release once the work stopped")
	}
	// A second burst gets its own release.
	h.w.Touch(1)
	h.tick()
	h.tick()
	if !h.sleeps() {
		t.Fatal("no release after the second burst")
	}
	h.closeAsleep()
}

// Guarantee: nothing is released while InUse reports work under way
// (deliveries waiting for an answer), however quiet.
func TestWatcher_NotWhileInUse(t *testing.T) {
	h := start(t, 0, true)
	h.w.Touch(1)
	h.tick()
	for range 3 {
		h.inUse <- true
		h.tick()
	}
	h.inUse <- false
	h.tick()
	if !h.sleeps() {
		t.Fatal("no release once nothing was in use")
	}
	h.closeAsleep()
}

// Guarantee: a trickle of work below MinActivity does not make the
// service release; the work adds up over bursts until it does.
func TestWatcher_MinActivity(t *testing.T) {
	h := start(t, 10, false)
	h.w.Touch(4)
	h.tick()
	h.tick()
	if h.sleeps() {
		t.Fatal("released after 4 of 10")
	}
	h.w.Touch(6)
	h.tick()
	h.tick()
	if !h.sleeps() {
		t.Fatal("no release after 10 of 10")
	}
	h.w.Touch(9)
	h.tick()
	h.tick()
	if h.sleeps() {
		t.Fatal("released after 9 more, below 10 since the last release")
	}
	h.closeAsleep()
}

// Guarantee: Touch from many goroutines at once is safe (under -race)
// and wakes the Watcher once: the burst ends in one release.
func TestWatcher_ConcurrentTouch(t *testing.T) {
	h := start(t, 8000, false)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 1000 {
				h.w.Touch(1)
			}
		})
	}
	wg.Wait()
	h.tick() // the period of the touches
	h.tick() // quiet
	if !h.sleeps() {
		t.Fatal("no release after 8,000 touches, with MinActivity 8,000")
	}
	h.closeAsleep()
}

// Guarantee: Close stops the goroutine whether it sleeps or waits for a
// timer, and may be called twice.
func TestWatcher_Close(t *testing.T) {
	h := start(t, 0, false)
	h.w.Close()
	h.w.Close()

	h = start(t, 0, false)
	h.w.Touch(1)
	<-h.asked // waiting for a timer that never fires
	h.w.Close()
}
