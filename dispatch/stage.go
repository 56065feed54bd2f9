package dispatch

import (
	"bytes"
	"time"
)

// Staging: when many occurrences planned ahead fall due in the same
// millisecond (a thousand schedules "every second", all on the second),
// their passes read them before that millisecond, while the CPU is
// free, and at its time only publish. A pass that reads 4,096 subjects
// spends about as long reading them as publishing them, so a burst read
// on time goes out in twice the time it takes to publish it.
//
// A staged pass is a pass run at the burst's time, at, instead of now:
// the frontier reads the due index up to at, and the scans take as
// flights what is due by at, as a pass at at would. What the passes at
// at would have done is unchanged; what can happen between the read and
// at is what needs an argument:
//
//   - Nothing goes out early: the staged passes publish once the clock
//     reads at or later.
//   - Nothing was due before at when the passes were staged (the loop
//     would not sleep otherwise), and they take no redelivery or
//     hand-off: those stay for the pass after them.
//   - A message that arrives meanwhile below a staged flight's key, on
//     its subject (due before at, published with a shorter delay) would
//     go out after it if the flight were published: its arrival rewinds
//     the topic (rewindLocked), and a staged flight above a rewind is
//     taken back with every later one of its subject, which the next
//     pass scans again in order. A bounce of an earlier delivery of the
//     subject rewinds it the same way.
//   - A later staged pass does not scan a topic with flights staged by
//     an earlier one, as a pass does not scan a topic with messages
//     handed off: a message that arrived below them would go out in
//     the later pass, after them.
//   - A subject paused or frozen meanwhile gets its staged flights back,
//     as a hand-off's are (takeHandedLocked); a message canceled,
//     replaced or moved meanwhile is skipped by publish, as between any
//     pass's scan and its publish; the fence is checked per message.
//   - The staged flights count as taken by a pass (Unsettled), and the
//     passes are under way until they are published (passStart).
//
// The price is the wait: the loop does nothing else until at, so a
// message that arrives due now meanwhile goes out up to StageAhead late.
// That is why only a burst is staged.

// stagedPass is a pass's deliveries, read, not yet published.
type stagedPass struct {
	out    []outgoing
	pass   uint64
	probed []*topic
}

// maxStagedPasses bounds how many passes stage one burst: the rest of it
// is read on time, as before.
const maxStagedPasses = 8

// staging decides, for a loop due to wake in wait at at, whether to
// stage the passes of at now, and otherwise how long to sleep: a burst
// due later than StageAhead from now wakes the loop StageAhead before it,
// to stage it then.
func (d *Dispatcher) staging(at int64, wait time.Duration) (bool, time.Duration) {
	if wait <= 0 || d.cfg.StageAhead <= 0 || d.bucketMs != 0 {
		// NB: within a coarse bucket keys are in publish order, not
		// fire order; only a scan on time sorts what is due.
		return false, wait
	}
	d.mu.Lock()
	burst := d.mu.ahead.dueAt(at) >= d.cfg.StageMin && len(d.mu.handed) == 0
	d.mu.Unlock()
	switch {
	case !burst:
		return false, wait
	case wait > d.cfg.StageAhead:
		return false, wait - d.cfg.StageAhead
	}
	return d.fenceHeld(), wait
}

// stage reads the passes due at at, up to maxStagedPasses of them, waits
// for at, and publishes them in order.
func (d *Dispatcher) stage(at int64) {
	// NB: the planner plans the next burst's occurrences from at on,
	// when they come within its look-ahead: left to it, it began to at
	// the very moment this burst went out.
	d.stagingNow.Store(true)
	defer d.stagingNow.Store(false)
	var staged []stagedPass
	for len(staged) < maxStagedPasses {
		p, more := d.readAhead(at)
		staged = append(staged, p)
		if !more || d.nowNs() >= at {
			break
		}
	}
	if !d.sleepUntil(at) {
		return
	}
	d.stagedPasses.Add(uint64(len(staged)))
	d.burst.begin()
	defer d.burst.end()
	for _, p := range staged {
		now := d.nowNs()
		p.out = d.unstage(p, now)
		d.deliverPass(p, now)
	}
}

// readAhead is a pass at at, run now, that publishes nothing: the
// frontier reads up to at, and the due topics' scans take what is due by
// then. It reports whether more may be due by at than it took.
func (d *Dispatcher) readAhead(at int64) (stagedPass, bool) {
	d.signaledAt.Store(0)
	d.advanceFrontier(at)
	d.mu.Lock()
	pass := d.beginPassLocked(d.nowNs())
	budget := min(d.cfg.PassLimit, d.cfg.MaxInFlight-len(d.mu.flights.byKey))
	d.mu.Unlock()
	var out []outgoing
	var probed []*topic
	if budget > 0 {
		probed = d.scanDue(at, pass, budget, &out)
	}
	d.mu.Lock()
	for _, o := range out {
		o.f.topic.staged++
	}
	more := budget > 0 && len(out) >= budget
	d.mu.Unlock()
	return stagedPass{out: out, pass: pass, probed: probed}, more
}

// sleepUntil waits until the clock reads at, and reports false if the
// dispatcher closed first. A wake-up meanwhile (a message arrived, say)
// only makes it look at the clock again: what woke it is the next
// pass's to do, after the staged passes.
func (d *Dispatcher) sleepUntil(at int64) bool {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		wait := time.Duration(at - d.nowNs())
		if wait <= 0 {
			return true
		}
		timer.Reset(wait)
		select {
		case <-d.done:
			return false
		case <-d.wake:
		case <-timer.C:
		}
	}
}

// unstage returns the deliveries of p to publish now: those of a subject
// paused or frozen meanwhile, or rewound below them, are taken back for
// their subject's next scan.
func (d *Dispatcher) unstage(p stagedPass, now int64) []outgoing {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := p.out[:0]
	for _, o := range p.out {
		f, t := o.f, o.f.topic
		t.staged--
		if d.mu.flights.byKey[f.key] != f || f.state == stateSettling {
			out = append(out, o) // publish skips it, as any pass does
			continue
		}
		overtaken := t.rewind != nil && bytes.Compare(t.rewind, f.key[:]) < 0
		if overtaken || d.heldBackLocked(t) {
			d.unsendLocked(f)
			d.mu.subjects.reschedule(t, now)
			continue
		}
		out = append(out, o)
	}
	return out
}
