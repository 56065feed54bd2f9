package console

import (
	"context"
	"sync"
	"time"

	"github.com/natsdelay/natsdelay/bridge"
)

// totalsSource is what the rate sampler reads: the service's running
// totals.
type totalsSource interface {
	Totals() bridge.Totals
}

// sample is the service's totals at one moment.
type sample struct {
	at time.Time
	t  bridge.Totals
}

// rates is a ring of the last samples of the service's totals: the
// overview's rates and lateness over the last minutes are differences
// between them, read from the service itself.
type rates struct {
	mu   sync.Mutex
	ring []sample // oldest first once full: ring[next:], ring[:next]
	next int
	full bool
}

func newRates(n int) *rates { return &rates{ring: make([]sample, n)} }

func (r *rates) add(s sample) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ring[r.next] = s
	r.next = (r.next + 1) % len(r.ring)
	if r.next == 0 {
		r.full = true
	}
}

// all returns the samples, oldest first.
func (r *rates) all() []sample {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.full {
		return append([]sample(nil), r.ring[:r.next]...)
	}
	return append(append([]sample(nil), r.ring[r.next:]...), r.ring[:r.next]...)
}

// sample takes a sample every SampleEvery until ctx ends; it owns no
// other goroutine.
func (c *Console) sample(ctx context.Context) {
	defer close(c.done)
	t := time.NewTicker(c.cfg.SampleEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.takeSample()
		}
	}
}

// takeSample adds the service's totals now to the ring, if it runs.
func (c *Console) takeSample() {
	if s := c.service(); s != nil {
		c.rates.add(sample{at: c.cfg.Now(), t: s.Totals()})
	}
}

// window is the rates over one span: from a sample to now.
type window struct {
	Span                      string
	Seconds                   float64
	Ingest, Deliver, Ack      float64 // per second
	Deliveries                uint64
	LateP50, LateP99, LateMax string
}

// windowOf is the rates from the oldest sample at most span before now
// to the totals now; ok is false without such a sample.
func windowOf(samples []sample, now sample, span time.Duration, name string) (window, bool) {
	var from *sample
	for i := range samples {
		if now.at.Sub(samples[i].at) <= span+span/20 && samples[i].at.Before(now.at) {
			from = &samples[i]
			break
		}
	}
	if from == nil {
		return window{}, false
	}
	return between(*from, now, name), true
}

// between is the rates from a to b.
func between(a, b sample, name string) window {
	secs := b.at.Sub(a.at).Seconds()
	w := window{Span: name, Seconds: secs}
	if secs <= 0 {
		return w
	}
	w.Ingest = float64(sub(b.t.Ingested, a.t.Ingested)) / secs
	w.Deliver = float64(sub(b.t.Delivered, a.t.Delivered)) / secs
	w.Ack = float64(sub(b.t.Acked, a.t.Acked)) / secs
	late := make([]uint64, len(b.t.Late))
	for i := range late {
		if i < len(a.t.Late) {
			late[i] = sub(b.t.Late[i], a.t.Late[i])
		} else {
			late[i] = b.t.Late[i]
		}
		w.Deliveries += late[i]
	}
	w.LateP50, w.LateP99, w.LateMax = quantile(late, 0.5), quantile(late, 0.99), quantile(late, 1)
	return w
}

// sub is a-b, 0 if the counter went back (a new service's totals).
func sub(a, b uint64) uint64 {
	if a < b {
		return 0
	}
	return a - b
}

// quantile names the lateness bucket that holds the q-quantile of the
// counts: "≤ 2ms", "> 1m5.536s", or "–" without deliveries.
func quantile(counts []uint64, q float64) string {
	var total uint64
	for _, n := range counts {
		total += n
	}
	if total == 0 {
		return "–"
	}
	rank := uint64(q*float64(total) + 0.5)
	rank = max(rank, 1)
	var seen uint64
	for i, n := range counts {
		seen += n
		if seen >= rank {
			if i < len(bridge.LatenessBounds) {
				return "≤ " + bridge.LatenessBounds[i].String()
			}
			break
		}
	}
	return "> " + bridge.LatenessBounds[len(bridge.LatenessBounds)-1].String()
}
