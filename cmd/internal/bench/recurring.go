package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/natsdelay/natsdelay/bridge/wire"
)

// JetStream's headers on a message fired by a repeating schedule: the
// schedule's subject, and the planned time of its next firing.
const (
	jsSchedulerHeader    = "Nats-Scheduler"
	jsScheduleNextHeader = "Nats-Schedule-Next"
)

// recurIdleCron is the spec of the idle schedules: midnight on New
// Year's Day, in UTC, so weeks or months away.
const recurIdleCron = "0 0 1 1 *"

// recurDelivery is one delivery of an occurrence, as the consumer saw it.
type recurDelivery struct {
	sched int   // schedule index
	at    int64 // receipt, Unix ns
	// planned is natsdelay's Delay-Occurrence; for JetStream it is worked
	// out after the run from next (see jsPlanned).
	planned int64
	// next is JetStream's Nats-Schedule-Next, Unix ns (0 for natsdelay).
	next int64
	// id tells deliveries apart: natsdelay's tag, JetStream's stream
	// sequence of the fired message.
	id string
}

// recurLog collects deliveries in arrival order. It is safe for
// concurrent use.
type recurLog struct {
	count atomic.Int64 // for the progress bar
	mu    sync.Mutex
	ds    []recurDelivery
	bad   int // deliveries whose headers could not be read
}

func (l *recurLog) add(d recurDelivery) {
	l.count.Add(1)
	l.mu.Lock()
	l.ds = append(l.ds, d)
	l.mu.Unlock()
}

func (l *recurLog) badOne() {
	l.mu.Lock()
	l.bad++
	l.mu.Unlock()
}

func (l *recurLog) snapshot() ([]recurDelivery, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.ds), l.bad
}

// recurGrace is how long a run waits after its window for the last
// occurrences planned within it.
func (c Config) recurGrace() time.Duration { return 2*c.RecurEvery + time.Second }

// runRecurring measures recurring schedules: RecurSchedules schedules
// every RecurEvery on a subject each, for RecurDuration, in natsdelay and
// as JetStream message schedules, then natsdelay with RecurIdle schedules
// far in the future.
func (e *env) runRecurring(ctx context.Context) (*RecurringResult, error) {
	res := &RecurringResult{Schedules: e.cfg.RecurSchedules, EveryMs: ms(e.cfg.RecurEvery), WindowS: e.cfg.RecurDuration.Seconds(), GraceMs: ms(e.cfg.recurGrace())}
	d, err := e.recurDelay()
	if err != nil {
		return res, fmt.Errorf("bench: recurring natsdelay: %w", err)
	}
	res.Systems = append(res.Systems, d)
	j, err := e.recurJetStream(ctx)
	if err != nil {
		return res, fmt.Errorf("bench: recurring jetstream: %w", err)
	}
	res.Systems = append(res.Systems, j)
	if d.P99Ms > 0 {
		res.P99Ratio = j.P99Ms / d.P99Ms
	}
	if res.Idle, err = e.recurIdle(); err != nil {
		return res, fmt.Errorf("bench: recurring idle: %w", err)
	}
	return res, nil
}

// recurDelay runs the schedules in natsdelay, in this process beside the
// server as the fire phase does. Every schedule starts on the same whole
// second, as JetStream's do (it rounds a schedule's start to the second).
func (e *env) recurDelay() (_ RecurLateness, err error) {
	n, every := e.cfg.RecurSchedules, e.cfg.RecurEvery
	dsvc, err := e.openDelay(filepath.Join(e.dir, "recurring"))
	if err != nil {
		return RecurLateness{}, err
	}
	defer func() { err = errors.Join(err, dsvc.close()) }()
	prefix := e.plain + ".rec."
	log := &recurLog{}
	nc, err := e.connect("bench-recurring-consumer")
	if err != nil {
		return RecurLateness{}, err
	}
	defer nc.Close()
	sub, err := nc.Subscribe(prefix+"*", func(m *nats.Msg) {
		now := time.Now()
		_ = m.Respond(nil)
		i, ierr := strconv.Atoi(strings.TrimPrefix(m.Subject, prefix))
		occ, oerr := time.Parse(time.RFC3339Nano, m.Header.Get(wire.HeaderOccurrence))
		if ierr != nil || oerr != nil {
			log.badOne()
			return
		}
		log.add(recurDelivery{sched: i, at: now.UnixNano(), planned: occ.UnixNano(), id: m.Header.Get(wire.HeaderTag)})
	})
	if err == nil {
		_ = sub.SetPendingLimits(-1, -1)
		err = nc.Flush()
	}
	if err != nil {
		return RecurLateness{}, fmt.Errorf("subscribe: %w", err)
	}
	// The lead leaves time to ingest them all at 20,000 a second.
	lead := time.Second + time.Duration(float64(n)/20_000*float64(time.Second))
	start := time.Now().Add(lead).Truncate(time.Second).Add(time.Second)
	msg := func(i int) *nats.Msg {
		h := nats.Header{}
		h.Set(wire.HeaderEvery, every.String())
		h.Set(wire.HeaderAt, start.UTC().Format(time.RFC3339Nano))
		return &nats.Msg{Subject: e.ingest + "." + prefix + strconv.Itoa(i), Header: h, Data: e.payload}
	}
	mark := e.markCPU(0)
	_, failed, err := pipelined(e.conns[0], n, e.cfg.Outstanding, e.cfg.Timeout, msg, delayOK, new(atomic.Int64))
	if err == nil && failed > 0 {
		err = fmt.Errorf("%d of %d schedules refused", failed, n)
	}
	if err != nil {
		return RecurLateness{}, err
	}
	leadMissed := time.Now().After(start)
	first := make([]int64, n)
	for i := range first {
		first[i] = start.UnixNano()
	}
	end := start.Add(e.cfg.RecurDuration)
	e.recurWait(SystemDelay, end, log)
	cpu := mark.since()
	_ = sub.Unsubscribe()
	ds, bad := log.snapshot()
	r := recurStats(SystemDelay, first, int64(every), end.UnixNano(), ds)
	r.Unreadable, r.CPU, r.LeadMissed = r.Unreadable+bad, cpu, leadMissed
	return r, nil
}

// recurWait shows progress and waits until the window ends and the grace
// after it has passed.
func (e *env) recurWait(system string, end time.Time, log *recurLog) {
	total := e.cfg.RecurSchedules * int(e.cfg.RecurDuration/e.cfg.RecurEvery)
	p := startProgress(e.cfg.Progress, "recurring "+system, total, &log.count)
	defer p.done()
	t := time.NewTimer(time.Until(end.Add(e.cfg.recurGrace())))
	defer t.Stop()
	<-t.C
}

// recurJetStream runs the schedules as JetStream message schedules,
// "@every <RecurEvery>", one subject each, fired into one target subject
// that a pull consumer reads and ACKs.
func (e *env) recurJetStream(ctx context.Context) (_ RecurLateness, err error) {
	n, every := e.cfg.RecurSchedules, e.cfg.RecurEvery
	const phase = "recurring"
	s, err := e.stream(ctx, phase)
	if err != nil {
		return RecurLateness{}, err
	}
	defer func() { err = errors.Join(err, e.deleteStream(context.Background(), s)) }()
	cons, err := s.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable:       "bench",
		FilterSubject: e.fired + "." + phase,
		AckPolicy:     jetstream.AckExplicitPolicy,
		MaxAckPending: 100_000,
	})
	if err != nil {
		return RecurLateness{}, fmt.Errorf("create consumer: %w", err)
	}
	prefix := e.sched + "." + phase + "."
	log := &recurLog{}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		now := time.Now()
		_ = m.Ack()
		h := m.Headers()
		i, ierr := strconv.Atoi(strings.TrimPrefix(h.Get(jsSchedulerHeader), prefix))
		next, nerr := time.Parse(time.RFC3339Nano, h.Get(jsScheduleNextHeader))
		md, merr := m.Metadata()
		if ierr != nil || nerr != nil || merr != nil {
			log.badOne()
			return
		}
		log.add(recurDelivery{sched: i, at: now.UnixNano(), next: next.UnixNano(), id: strconv.FormatUint(md.Sequence.Stream, 10)})
	}, jetstream.PullMaxMessages(4096))
	if err != nil {
		return RecurLateness{}, fmt.Errorf("consume: %w", err)
	}
	stopped := false
	stop := func() {
		if !stopped {
			cc.Stop()
			<-cc.Closed()
			stopped = true
		}
	}
	defer stop()

	spec := "@every " + every.String()
	msg := func(i int) *nats.Msg {
		h := nats.Header{}
		h.Set(jetstream.ScheduleHeader, spec)
		h.Set(jetstream.ScheduleTargetHeader, e.fired+"."+phase)
		return &nats.Msg{Subject: prefix + strconv.Itoa(i), Header: h, Data: e.payload}
	}
	mark := e.markCPU(0)
	_, failed, err := pipelined(e.conns[0], n, e.cfg.Outstanding, e.cfg.Timeout, msg, jsOK, new(atomic.Int64))
	if err == nil && failed > 0 {
		err = fmt.Errorf("%d of %d schedules refused", failed, n)
	}
	if err != nil {
		return RecurLateness{}, err
	}
	first, start, err := jsFirstPlanned(ctx, s, prefix, n, every)
	if err != nil {
		return RecurLateness{}, err
	}
	end := time.Unix(0, start).Add(e.cfg.RecurDuration)
	e.recurWait(SystemJS, end, log)
	cpu := mark.since()
	stop()
	ds, bad := log.snapshot()
	jsPlanned(first, ds)
	r := recurStats(SystemJS, first, int64(every), end.UnixNano(), ds)
	r.Unreadable, r.CPU = r.Unreadable+bad, cpu
	return r, nil
}

// jsFirstPlanned returns the first planned time of each of the n
// schedules under prefix in s, as the server works it out: the time it
// stored the schedule, rounded to the second, plus the interval. The
// schedule message stays in the stream while the schedule repeats, so its
// stored time can be read back. start is the earliest of them.
func jsFirstPlanned(ctx context.Context, s jetstream.Stream, prefix string, n int, every time.Duration) (first []int64, start int64, err error) {
	first = make([]int64, n)
	start = math.MaxInt64
	for i := range n {
		rm, err := s.GetLastMsgForSubject(ctx, prefix+strconv.Itoa(i))
		if err != nil {
			return nil, 0, fmt.Errorf("read back schedule %d: %w", i, err)
		}
		first[i] = rm.Time.Round(time.Second).Add(every).UnixNano()
		start = min(start, first[i])
	}
	return first, start, nil
}

// jsPlanned sets the planned time of every JetStream delivery in ds, in
// arrival order: a schedule's first firing is planned at first[sched], and
// each later one at the Nats-Schedule-Next of the firing before it, which
// is the time the server planned it for. A delivery of a stream sequence
// already delivered (and ACKed) is a redelivery: it is counted, and takes
// the planned time it had the first time (recurStats counts it). The
// consumer gets the firings of one schedule in stream order, which is the
// order they fired.
func jsPlanned(first []int64, ds []recurDelivery) {
	prevNext := map[int]int64{}
	seen := map[string]int64{}
	for i := range ds {
		d := &ds[i]
		if p, ok := seen[d.id]; ok {
			d.planned = p
			continue
		}
		if p, ok := prevNext[d.sched]; ok {
			d.planned = p
		} else if d.sched >= 0 && d.sched < len(first) {
			d.planned = first[d.sched]
		}
		prevNext[d.sched] = d.next
		seen[d.id] = d.planned
	}
}

// recurStats sums up the deliveries of one system. Schedule i's planned
// times are first[i] plus whole intervals; those before end are the
// window's. Lateness is over the first delivery of each planned time in
// the window; a planned time with none is missed. A planned time
// delivered under two ids (tags, stream sequences) is doubled, and so is
// every delivery of an id after the first: the consumer ACKs each
// delivery at once, so a second one came after the ACK.
func recurStats(system string, first []int64, every, end int64, ds []recurDelivery) RecurLateness {
	r := RecurLateness{System: system}
	type occ struct {
		at  int64
		ids int
	}
	seenID := map[string]bool{}
	per := make([]map[int64]*occ, len(first))
	for i := range per {
		per[i] = map[int64]*occ{}
	}
	for _, d := range ds {
		if d.sched < 0 || d.sched >= len(first) {
			r.Unreadable++
			continue
		}
		r.Deliveries++
		if seenID[d.id] {
			r.Doubled++
			continue
		}
		seenID[d.id] = true
		o := per[d.sched][d.planned]
		if o == nil {
			o = &occ{at: d.at}
			per[d.sched][d.planned] = o
		}
		o.ids++
		o.at = min(o.at, d.at)
	}
	var late []time.Duration
	for i, byPlanned := range per {
		for t := first[i]; t < end; t += every {
			r.Planned++
			o := byPlanned[t]
			if o == nil {
				r.Missed++
				continue
			}
			r.Delivered++
			if o.ids > 1 {
				r.Doubled += o.ids - 1
			}
			if o.at < t {
				r.Early++
			}
			late = append(late, time.Duration(o.at-t))
		}
		for t := range byPlanned {
			if t < first[i] || (t-first[i])%every != 0 {
				r.OffPlan++
			}
		}
	}
	slices.Sort(late)
	if len(late) > 0 {
		q := func(p float64) float64 { return ms(late[min(int(p*float64(len(late))), len(late)-1)]) }
		r.P50Ms, r.P99Ms, r.MaxMs = q(0.50), q(0.99), ms(late[len(late)-1])
	}
	return r
}

// memHandedBack waits until natsdelay has released memory since its count
// of releases was released (see --idle-release), and reads its memory
// then; nil where it does not count them (released < 0) or did not
// release within the wait, which is a finding, not a failure.
func (e *env) memHandedBack(d service, released int64) (*MemSample, error) {
	if released < 0 {
		return nil, nil
	}
	// Each reading asks natsdelay for a collection, so once a second.
	deadline := time.Now().Add(e.releaseWait())
	for time.Now().Before(deadline) {
		mem, err := d.mem()
		if err != nil {
			return nil, err
		}
		if mem.Releases > released {
			return &mem, nil
		}
		time.Sleep(time.Second)
	}
	return nil, nil
}

// recurIdle starts natsdelay as the scale phase does (its own process
// when the config names a command), adds RecurIdle schedules whose first
// occurrence is months away, one subject each, and measures its memory
// before and after, the CPU time to take them in and to sit idle with
// them, and the time to start again on them.
func (e *env) recurIdle() (_ *RecurIdleResult, err error) {
	n := e.cfg.RecurIdle
	dir := filepath.Join(e.dir, "recurring-idle")
	d, err := e.openService(dir)
	if err != nil {
		return nil, err
	}
	defer func() {
		if d != nil {
			err = errors.Join(err, d.close())
		}
	}()
	res := &RecurIdleResult{Schedules: n, Spec: recurIdleCron, OwnProcess: len(e.cfg.ServiceCommand) > 0, IdleS: e.cfg.RecurIdleFor.Seconds()}
	if res.MemBefore, err = d.mem(); err != nil {
		return nil, fmt.Errorf("memory before: %w", err)
	}
	prefix := e.plain + ".idle."
	msg := func(i int) *nats.Msg {
		h := nats.Header{}
		h.Set(wire.HeaderCron, recurIdleCron)
		return &nats.Msg{Subject: e.ingest + "." + prefix + strconv.Itoa(i), Header: h, Data: e.payload}
	}
	var done atomic.Int64
	p := startProgress(e.cfg.Progress, "recurring idle fill", n, &done)
	mark := e.markCPU(d.pid())
	el, failed, err := pipelined(e.conns[0], n, e.cfg.Outstanding, e.cfg.Timeout, msg, delayOK, &done)
	res.IngestCPU = mark.since()
	p.done()
	if err == nil && failed > 0 {
		err = fmt.Errorf("%d of %d schedules refused", failed, n)
	}
	if err != nil {
		return nil, fmt.Errorf("take in the schedules: %w", err)
	}
	res.IngestRate = float64(n) / el.Seconds()
	if res.MemAfter, err = d.mem(); err != nil {
		return nil, fmt.Errorf("memory after: %w", err)
	}
	_, res.RSSPeak = d.rss()

	// Idle: nothing is due, nothing arrives; what it costs is the
	// process's own timers and housekeeping.
	mark = e.markCPU(d.pid())
	time.Sleep(e.cfg.RecurIdleFor)
	res.IdleCPU = mark.since()
	if res.MemIdle, err = e.memHandedBack(d, res.MemBefore.Releases); err != nil {
		return nil, fmt.Errorf("memory once idle: %w", err)
	}

	cerr := d.close()
	d = nil
	if cerr != nil {
		return nil, cerr
	}
	t0 := time.Now()
	if d, err = e.openService(dir); err != nil {
		return nil, fmt.Errorf("restart: %w", err)
	}
	res.RestartMs = ms(time.Since(t0))
	t0 = time.Now()
	if res.PendingAfterRestart, err = d.pending(); err != nil {
		return nil, fmt.Errorf("INFO after the restart: %w", err)
	}
	res.InfoMs = ms(time.Since(t0))
	if res.PendingAfterRestart != uint64(n) {
		return res, fmt.Errorf("%d pending after the restart, want the %d schedules", res.PendingAfterRestart, n)
	}
	res.MemRestarted, err = d.mem()
	return res, err
}
