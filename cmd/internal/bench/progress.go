package bench

import (
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/schollz/progressbar/v3"
)

// progress shows a bar for one long phase on Config.Progress. The phase
// counts into done from its hot path; a ticker copies the count to the
// bar, so the bar's lock stays off the hot path.
type progress struct {
	stop chan struct{}
	wg   sync.WaitGroup
	bar  *progressbar.ProgressBar
}

// startProgress starts a bar of total steps that follows done. With a nil
// w it shows nothing; stop must still be called.
func startProgress(w io.Writer, desc string, total int, done *atomic.Int64) *progress {
	p := &progress{stop: make(chan struct{})}
	if w == nil {
		return p
	}
	p.bar = progressbar.NewOptions64(int64(total),
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(desc),
		progressbar.OptionSetWidth(30),
		progressbar.OptionShowCount(),
		progressbar.OptionShowIts(),
		progressbar.OptionSetItsString("msgs"),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionClearOnFinish(),
	)
	p.wg.Go(func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				_ = p.bar.Set64(done.Load())
			case <-p.stop:
				return
			}
		}
	})
	return p
}

// done stops the ticker, waits for it and clears the bar.
func (p *progress) done() {
	close(p.stop)
	p.wg.Wait()
	if p.bar != nil {
		_ = p.bar.Finish()
		_ = p.bar.Clear()
	}
}
