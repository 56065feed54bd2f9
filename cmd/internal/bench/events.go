package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/nats-io/nats.go"
)

// EventsResult is the events phase: natsdelay's end to end (due-now
// messages scheduled, delivered and ACKed, as the e2e phase runs it) with
// lifecycle events off and on, in alternating runs on one server, each
// on a fresh store. With events on, a subscriber tails every event, as
// `nats sub '$DELAY.EVENT.>'` would.
type EventsResult struct {
	Msgs int `json:"msgs"`
	// Off and On are every run of each, in the order they ran (Off first
	// in even rounds, On first in odd ones, so that drift on a shared
	// machine falls on both).
	Off []EndToEndResult `json:"off"`
	On  []EndToEndResult `json:"on"`
	// Received is how many events the tail got in each On run;
	// Published and Dropped what the service counted (-1 where unknown).
	Received  []int64 `json:"events_received"`
	Published []int64 `json:"events_published"`
	Dropped   []int64 `json:"events_dropped"`
}

// median is the median of vs (the mean of the middle two for an even
// count), NaN for none.
func median(vs []float64) float64 {
	if len(vs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// rates and perMsg are the figures of runs, for medians.
func rates(runs []EndToEndResult) []float64 {
	out := make([]float64, len(runs))
	for i, r := range runs {
		out[i] = r.Rate
	}
	return out
}

func perMsg(runs []EndToEndResult, cpu func(CPU) float64) []float64 {
	out := make([]float64, len(runs))
	for i, r := range runs {
		out[i] = perMsgUs(cpu(r.CPU), r.Msgs)
	}
	return out
}

// runEvents runs EventsRounds rounds of an end-to-end run of natsdelay
// with events off and one with them on.
func (e *env) runEvents(ctx context.Context) (*EventsResult, error) {
	n := e.cfg.EndToEndMsgs
	res := &EventsResult{Msgs: n}
	for round := range e.cfg.EventsRounds {
		order := []bool{false, true}
		if round%2 == 1 {
			order = []bool{true, false}
		}
		for _, on := range order {
			r, received, published, dropped, err := e.eventsRun(ctx, round, on)
			if err != nil {
				return res, err
			}
			if !on {
				res.Off = append(res.Off, r)
				continue
			}
			res.On = append(res.On, r)
			res.Received = append(res.Received, received)
			res.Published = append(res.Published, published)
			res.Dropped = append(res.Dropped, dropped)
		}
	}
	return res, nil
}

// eventsRun is one end-to-end run of natsdelay with events on or off, and,
// when on, the events a tail received and the service published and
// dropped.
func (e *env) eventsRun(ctx context.Context, round int, on bool) (r EndToEndResult, received, published, dropped int64, err error) {
	phase := "eventsoff" + strconv.Itoa(round)
	if on {
		phase = "eventson" + strconv.Itoa(round)
	}
	var count atomic.Int64
	var tail *nats.Subscription
	if on {
		// NB: no pending limit, so the tail drops nothing: every event
		// the service publishes is delivered and counted.
		tail, err = e.conns[len(e.conns)-1].Subscribe(e.events+".>", func(*nats.Msg) { count.Add(1) })
		if err != nil {
			return r, 0, 0, 0, fmt.Errorf("bench: tail %s.>: %w", e.events, err)
		}
		defer func() { _ = tail.Unsubscribe() }()
		_ = tail.SetPendingLimits(-1, -1)
		if err := e.conns[len(e.conns)-1].Flush(); err != nil {
			return r, 0, 0, 0, err
		}
	}
	e.withEvents = on
	defer func() { e.withEvents = false }()
	rec := newRecorder(e.cfg.EndToEndMsgs)
	run, err := e.startSystem(ctx, SystemDelay, phase, rec)
	if err != nil {
		return r, 0, 0, 0, err
	}
	r, err = e.endToEnd(run, rec, e.cfg.EndToEndMsgs)
	published, dropped = -1, -1
	if on && err == nil {
		// Every event of the run is told once its message is settled:
		// wait until the tail has them, or the service counted them as
		// dropped, before the service stops.
		want := int64(3 * r.Msgs)
		err = poll(e.cfg.Timeout, func() (bool, error) {
			published, dropped = run.events()
			return published >= 0 && published+dropped >= want && count.Load() >= published, nil
		})
		if err != nil {
			err = fmt.Errorf("bench: waiting for %d events (published %d, dropped %d, received %d): %w", want, published, dropped, count.Load(), err)
		}
	}
	if err = errors.Join(err, run.stop()); err != nil {
		return r, 0, 0, 0, fmt.Errorf("bench: events %s: %w", phase, err)
	}
	r.System = SystemDelay + map[bool]string{false: " events off", true: " events on"}[on]
	return r, count.Load(), published, dropped, nil
}

// eventStats reads the service's counts of events published and dropped
// from an exposition of its metrics; -1, -1 where it has none.
func eventStats(exposition []byte) (published, dropped int64) {
	published, dropped = -1, -1
	for line := range strings.Lines(string(exposition)) {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		v, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			continue
		}
		switch {
		case f[0] == "natsdelay_events_published_total":
			published = int64(v)
		case strings.HasPrefix(f[0], "natsdelay_events_dropped_total{"):
			dropped = max(dropped, 0) + int64(v)
		}
	}
	return published, dropped
}

// writeEvents prints the events phase: the median rate and CPU time per
// message with events off and on, and what became of the events.
func writeEvents(p func(string, ...any), er *EventsResult, own bool) {
	p("events: %s due-now msgs scheduled+delivered+ACKed, %d runs each, medians\tbetter\tevents off\tevents on\ton vs off\t", num(float64(er.Msgs)), len(er.On))
	off, on := median(rates(er.Off)), median(rates(er.On))
	p("  msgs/s\t%s\t%s\t%s\t%s\t", higher, num(off), num(on), versus(on, off, higher))
	p("  msgs/s of each run\t\t%s\t%s\t\t", nums(rates(er.Off)), nums(rates(er.On)))
	cpu := func(label string, f func(CPU) float64) {
		a, b := median(perMsg(er.Off, f)), median(perMsg(er.On, f))
		p("  %s\t%s\t%s\t%s\t%s\t", label, lower, dec(a), dec(b), versus(b, a, lower))
		p("  %s of each run\t\t%s\t%s\t\t", label, decs(perMsg(er.Off, f)), decs(perMsg(er.On, f)))
	}
	if own {
		cpu("CPU µs/msg, natsdelay process", func(c CPU) float64 { return c.Service })
	}
	cpu(cpuLabel(own, false), func(c CPU) float64 { return c.Bench })
	msgs := int64(er.Msgs * len(er.On))
	p("  events per msg: published %s, received by the tail %s, dropped %s (of 3: scheduled, delivered, acked)\t\t\t\t\t",
		ratio(sum(er.Published), msgs), ratio(sum(er.Received), msgs), ratio(sum(er.Dropped), msgs))
	p("")
}

// sum is the sum of vs, or -1 where one is unknown (-1).
func sum(vs []int64) int64 {
	var s int64
	for _, v := range vs {
		if v < 0 {
			return -1
		}
		s += v
	}
	return s
}

// ratio is a/b with two decimals, or "-" where a is unknown.
func ratio(a, b int64) string {
	if a < 0 || b <= 0 {
		return "-"
	}
	return dec(float64(a) / float64(b))
}

// nums is num of each of vs, space-separated.
func nums(vs []float64) string {
	s := make([]string, len(vs))
	for i, v := range vs {
		s[i] = num(v)
	}
	return strings.Join(s, " ")
}
