package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/trace"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/natsdelay/natsdelay/bridge/wire"
)

// recorder collects the lateness of deliveries: arrival time minus the
// intended fire time in the Bench-Fire-At header.
type recorder struct {
	n     int
	count atomic.Int64 // deliveries, for the progress bar
	all   chan struct{}

	mu struct {
		sync.Mutex
		late        []time.Duration
		first, last time.Time
	}
}

func newRecorder(n int) *recorder {
	r := &recorder{n: n, all: make(chan struct{})}
	r.mu.late = make([]time.Duration, 0, n)
	return r
}

func (r *recorder) record(h nats.Header) { r.recordAt(h, time.Now()) }

// recordAt records a delivery that arrived at now. Consumers that answer
// take the time, answer, and then record, so that the answer is on its way
// before a waiter learns that every delivery arrived and closes the
// connection.
func (r *recorder) recordAt(h nats.Header, now time.Time) {
	ns, err := strconv.ParseInt(h.Get(benchFireAt), 10, 64)
	if err != nil {
		// Not one of ours; it cannot happen with the run's own subjects.
		return
	}
	r.count.Add(1)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mu.first.IsZero() {
		r.mu.first = now
	}
	r.mu.last = now
	r.mu.late = append(r.mu.late, now.Sub(time.Unix(0, ns)))
	if len(r.mu.late) == r.n {
		close(r.all)
	}
}

// wait waits until n messages arrived or timeout passed.
func (r *recorder) wait(timeout time.Duration) {
	if r.n == 0 {
		return
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-r.all:
	case <-t.C:
	}
}

// result summarises what arrived. NB: a redelivery would count twice; with
// the default 30s ack wait there is none in a run.
func (r *recorder) result(system string, rate float64) FireResult {
	r.mu.Lock()
	defer r.mu.Unlock()
	late := slices.Clone(r.mu.late)
	slices.Sort(late)
	res := FireResult{System: system, OfferedRate: rate, Scheduled: r.n, Delivered: len(late)}
	if len(late) == 0 {
		return res
	}
	q := func(p float64) float64 { return ms(late[min(int(p*float64(len(late))), len(late)-1)]) }
	res.P50Ms, res.P90Ms, res.P99Ms, res.MaxMs = q(0.50), q(0.90), q(0.99), ms(late[len(late)-1])
	res.LatenessMs = make([]float64, len(late))
	for i, l := range late {
		// Fire times are whole milliseconds and both systems keep at least
		// that precision, so anything before the fire time is early.
		if l < 0 {
			res.Early++
		}
		res.LatenessMs[i] = ms(l)
	}
	if span := r.mu.last.Sub(r.mu.first); span > 0 && len(late) > 1 {
		res.DeliveredRate = float64(len(late)-1) / span.Seconds()
	}
	return res
}

// sysRun is one system set up for one phase: how to schedule for it, and
// a consumer that records and ACKs every delivery.
type sysRun struct {
	system string
	// pid is natsdelay's own process, or 0.
	pid int
	msg func(i int, at time.Time) *nats.Msg
	ok  replyOK
	// settled reports whether every delivery of n has been ACKed and the
	// ACK applied.
	settled func(n int) (bool, error)
	stop    func() error
	// events is what natsdelay counted of its lifecycle events:
	// published and dropped, -1 where unknown.
	events func() (published, dropped int64)
	// occurrences counts the deliveries of the FireRecurring schedules;
	// nil without them.
	occurrences *atomic.Int64
}

// startSystem sets up system for phase, delivering to rec.
func (e *env) startSystem(ctx context.Context, system, phase string, rec *recorder) (*sysRun, error) {
	switch system {
	case SystemDelay:
		d, err := e.openMeasured(filepath.Join(e.dir, phase))
		if err != nil {
			return nil, err
		}
		stopSub, err := e.delayConsumer(e.plain+"."+phase, rec)
		if err != nil {
			return nil, errors.Join(err, d.close())
		}
		var occurrences *atomic.Int64
		if e.cfg.FireRecurring > 0 {
			occurrences = new(atomic.Int64)
			stopRecur, err := e.fireRecurring(e.plain+"."+phase+".rec", occurrences)
			if err != nil {
				return nil, errors.Join(err, stopSub(), d.close())
			}
			stopFire := stopSub
			stopSub = func() error { return errors.Join(stopRecur(), stopFire()) }
		}
		return &sysRun{
			occurrences: occurrences,
			system:      system,
			pid:         d.pid(),
			msg:         func(_ int, at time.Time) *nats.Msg { return e.delayMsg(e.plain+"."+phase, at) },
			ok:          delayOK,
			settled: func(int) (bool, error) {
				some, err := d.hasPending(e.plain + "." + phase)
				return !some, err
			},
			stop:   func() error { return errors.Join(stopSub(), d.close()) },
			events: d.eventStats,
		}, nil
	case SystemJS:
		s, err := e.stream(ctx, phase)
		if err != nil {
			return nil, err
		}
		cons, err := s.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
			Durable:       "bench",
			FilterSubject: e.fired + "." + phase,
			AckPolicy:     jetstream.AckExplicitPolicy,
			MaxAckPending: 100_000,
		})
		if err != nil {
			return nil, errors.Join(fmt.Errorf("bench: create consumer: %w", err), e.deleteStream(ctx, s))
		}
		cc, err := cons.Consume(func(m jetstream.Msg) {
			now := time.Now()
			_ = m.Ack()
			rec.recordAt(m.Headers(), now)
		}, jetstream.PullMaxMessages(4096))
		if err != nil {
			return nil, errors.Join(fmt.Errorf("bench: consume: %w", err), e.deleteStream(ctx, s))
		}
		return &sysRun{
			system: system,
			msg:    func(i int, at time.Time) *nats.Msg { return e.jsMsg(phase, i, at) },
			ok:     jsOK,
			settled: func(n int) (bool, error) {
				ci, err := cons.Info(ctx)
				if err != nil {
					return false, err
				}
				return ci.Delivered.Consumer >= uint64(n) && ci.NumAckPending == 0, nil
			},
			stop: func() error {
				cc.Stop()
				<-cc.Closed()
				return e.deleteStream(ctx, s)
			},
		}, nil
	}
	return nil, fmt.Errorf("bench: unknown system %q", system)
}

// fireRecurring schedules FireRecurring recurring schedules in natsdelay,
// every second from a second on, one on each subject prefix.<i>, and
// ACKs their occurrences, counting them in delivered, on a connection of
// its own until stop. They
// share the store with the fire run's messages, so the planner, which
// plans occurrences ahead, works among them.
func (e *env) fireRecurring(prefix string, delivered *atomic.Int64) (stop func() error, err error) {
	stop, err = e.ackingConsumer("bench-fire-recurring", prefix+".*", func(*nats.Msg, time.Time) { delivered.Add(1) })
	if err != nil {
		return nil, err
	}
	msg := func(i int) *nats.Msg {
		h := nats.Header{}
		h.Set(wire.HeaderEvery, time.Second.String())
		h.Set(wire.HeaderDelay, time.Second.String())
		return &nats.Msg{Subject: e.ingest + "." + prefix + "." + strconv.Itoa(i), Header: h, Data: e.payload}
	}
	_, failed, err := pipelined(e.conns[0], e.cfg.FireRecurring, e.cfg.Outstanding, e.cfg.Timeout, msg, delayOK, new(atomic.Int64))
	if err == nil && failed > 0 {
		err = fmt.Errorf("bench: %d of %d recurring schedules refused", failed, e.cfg.FireRecurring)
	}
	if err != nil {
		return nil, errors.Join(err, stop())
	}
	return stop, nil
}

// delayConsumer subscribes to natsdelay's deliveries on subj on a
// connection of its own, recording and ACKing each.
func (e *env) delayConsumer(subj string, rec *recorder) (stop func() error, err error) {
	return e.ackingConsumer("bench-consumer", subj, func(m *nats.Msg, at time.Time) { rec.recordAt(m.Header, at) })
}

// ackingConsumer subscribes to subj on a connection of its own, named
// name, and ACKs each delivery, telling seen of it with the time it came.
// stop sends the last ACKs and closes the connection.
func (e *env) ackingConsumer(name, subj string, seen func(m *nats.Msg, at time.Time)) (stop func() error, err error) {
	nc, err := e.connect(name)
	if err != nil {
		return nil, err
	}
	sub, err := nc.Subscribe(subj, func(m *nats.Msg) {
		now := time.Now()
		_ = m.Respond(nil)
		seen(m, now)
	})
	if err == nil {
		_ = sub.SetPendingLimits(-1, -1)
		err = nc.Flush()
	}
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("bench: subscribe %s: %w", subj, err)
	}
	return func() error {
		// Flush sends the last ACKs before the connection goes.
		err := nc.FlushTimeout(5 * time.Second)
		nc.Close()
		return err
	}, nil
}

// fire schedules n messages due uniformly over n/rate, starting lead from
// now, and records how late they arrive.
func (e *env) fire(run *sysRun, rec *recorder, n int, rate float64, lead time.Duration) (FireResult, error) {
	window := time.Duration(float64(n) / rate * float64(time.Second))
	start := time.Now().Add(lead).Truncate(time.Millisecond)
	at := func(i int) time.Time {
		return start.Add(window * time.Duration(i) / time.Duration(max(n, 1))).Truncate(time.Millisecond)
	}
	p := startProgress(e.cfg.Progress, fmt.Sprintf("fire %s %.0f/s", run.system, rate), n, &rec.count)
	defer p.done()
	mark := e.markCPU(run.pid)
	_, failed, err := pipelined(e.conns[0], n, e.cfg.Outstanding, e.cfg.Timeout,
		func(i int) *nats.Msg { return run.msg(i, at(i)) }, run.ok, new(atomic.Int64))
	if err != nil {
		return FireResult{}, err
	}
	if failed > 0 {
		return FireResult{}, fmt.Errorf("bench: %d of %d schedules refused", failed, n)
	}
	missed := time.Now().After(start)
	rec.wait(time.Until(start.Add(window)) + e.cfg.Timeout)
	res := rec.result(run.system, rate)
	res.LeadMissed, res.CPU = missed, mark.since()
	if run.occurrences != nil {
		res.Occurrences = run.occurrences.Load()
	}
	return res, nil
}

// runFire runs fire for every offered rate and both systems.
func (e *env) runFire(ctx context.Context) (res []FireResult, err error) {
	for i, rate := range e.cfg.FireRates {
		for _, system := range []string{SystemDelay, SystemJS} {
			rec := newRecorder(e.cfg.FireMsgs)
			run, err := e.startSystem(ctx, system, "fire"+strconv.Itoa(i), rec)
			if err != nil {
				return res, err
			}
			var stopTrace func() error
			if e.cfg.TraceFile != "" && system == SystemDelay {
				name := e.cfg.TraceFile
				if i > 0 {
					name += "." + strconv.FormatFloat(rate, 'f', -1, 64)
				}
				if stopTrace, err = startTrace(name); err != nil {
					return res, errors.Join(err, run.stop())
				}
			}
			r, err := e.fire(run, rec, e.cfg.FireMsgs, rate, e.cfg.FireLead)
			if stopTrace != nil {
				err = errors.Join(err, stopTrace())
			}
			if err = errors.Join(err, run.stop()); err != nil {
				return res, fmt.Errorf("bench: fire %s at %.0f/s: %w", system, rate, err)
			}
			res = append(res, r)
		}
	}
	return res, nil
}

// runEndToEnd schedules due-now messages pipelined and measures until
// every one was delivered and its ACK applied.
func (e *env) runEndToEnd(ctx context.Context) (res []EndToEndResult, err error) {
	n := e.cfg.EndToEndMsgs
	for _, system := range []string{SystemDelay, SystemJS} {
		rec := newRecorder(n)
		run, err := e.startSystem(ctx, system, "e2e", rec)
		if err != nil {
			return res, err
		}
		r, err := e.endToEnd(run, rec, n)
		if err = errors.Join(err, run.stop()); err != nil {
			return res, fmt.Errorf("bench: end to end %s: %w", system, err)
		}
		res = append(res, r)
	}
	return res, nil
}

func (e *env) endToEnd(run *sysRun, rec *recorder, n int) (EndToEndResult, error) {
	p := startProgress(e.cfg.Progress, "end to end "+run.system, n, &rec.count)
	defer p.done()
	mark := e.markCPU(run.pid)
	start := time.Now()
	_, failed, err := pipelined(e.conns[0], n, e.cfg.Outstanding, e.cfg.Timeout,
		func(i int) *nats.Msg { return run.msg(i, time.Now().Truncate(time.Millisecond)) }, run.ok, new(atomic.Int64))
	if err != nil {
		return EndToEndResult{}, err
	}
	if failed > 0 {
		return EndToEndResult{}, fmt.Errorf("bench: %d of %d schedules refused", failed, n)
	}
	rec.wait(e.cfg.Timeout)
	if err := poll(e.cfg.Timeout, func() (bool, error) { return run.settled(n) }); err != nil {
		return EndToEndResult{}, fmt.Errorf("bench: waiting for ACKs to settle: %w", err)
	}
	el := time.Since(start)
	cpu := mark.since()
	d := rec.result(run.system, 0).Delivered
	return EndToEndResult{System: run.system, Msgs: n, Delivered: d, Seconds: el.Seconds(), Rate: float64(d) / el.Seconds(), CPU: cpu}, nil
}

// startTrace writes a runtime execution trace to file until stop.
func startTrace(file string) (stop func() error, err error) {
	f, err := os.Create(file)
	if err != nil {
		return nil, fmt.Errorf("bench: trace: %w", err)
	}
	if err := trace.Start(f); err != nil {
		return nil, errors.Join(fmt.Errorf("bench: trace: %w", err), f.Close())
	}
	return func() error {
		trace.Stop()
		return f.Close()
	}, nil
}

// poll calls cond every millisecond until it holds, fails, or timeout
// passes. The interval is short because what it times is short.
func poll(timeout time.Duration, cond func() (bool, error)) error {
	return pollEvery(time.Millisecond, timeout, cond)
}

// pollEvery is poll, calling cond every interval.
func pollEvery(interval, timeout time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not done after %v", timeout)
		}
		<-t.C
	}
}
