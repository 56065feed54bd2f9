package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/natsdelay/natsdelay/bridge/wire"

	"github.com/nats-io/nats.go"
)

// runScale measures natsdelay with ScalePending future messages pending,
// spread over ScaleSubjects subjects: memory, CPU time of the fill, disk, restart to first delivery and the lateness of a small due
// set next to the same set with nothing pending. Then, on the same store,
// how long the janitor takes to remove ExpiredMsgs expired messages.
func (e *env) runScale() (sr *ScaleResult, er *ExpiryResult, err error) {
	dir := filepath.Join(e.dir, "scale")
	d, err := e.openService(dir)
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		if d != nil {
			err = errors.Join(err, d.close())
		}
	}()
	sr = &ScaleResult{Pending: e.cfg.ScalePending, Subjects: e.cfg.ScaleSubjects, OwnProcess: len(e.cfg.ServiceCommand) > 0}
	if sr.MemEmpty, err = d.mem(); err != nil {
		return nil, nil, err
	}
	sr.RSSEmpty = sr.MemEmpty.RSSBytes
	if sr.InfoEmptyMs, err = e.timeInfo(); err != nil {
		return nil, nil, err
	}

	if sr.DueEmpty, sr.DueEmptyP99s, err = e.dueSets(e.plain + ".due0"); err != nil {
		return nil, nil, err
	}

	if err := e.scaleFill(d, sr); err != nil {
		return nil, nil, err
	}

	// Right after the fill the store compacts what was just written,
	// on the same cores; the due set is timed once that is over, as on a
	// store that has held its messages for a while.
	sr.SettleS = e.settle(d.pid())
	if sr.DuePending, sr.DuePendingP99s, err = e.dueSets(e.plain + ".due1"); err != nil {
		return nil, nil, err
	}
	if sr.MemPending, err = d.mem(); err != nil {
		return nil, nil, err
	}
	sr.RSSBytes, sr.RSSPeak = d.rss()
	if sr.InfoMs, err = e.timeInfo(); err != nil {
		return nil, nil, err
	}
	if sr.DiskBytes, err = du(dir); err != nil {
		return nil, nil, err
	}

	if d, sr.RestartMs, err = e.restartToFirstDelivery(dir, d); err != nil {
		return nil, nil, err
	}
	er, err = e.expiry(d)
	return sr, er, err
}

// scaleFill schedules ScalePending future messages on d, pipelined, and
// records the fill's rate and CPU time in sr.
func (e *env) scaleFill(d service, sr *ScaleResult) error {
	var done atomic.Int64
	p := startProgress(e.cfg.Progress, "scale fill", e.cfg.ScalePending, &done)
	mark := e.markCPU(d.pid())
	el, failed, err := pipelined(e.conns[0], e.cfg.ScalePending, e.cfg.Outstanding, e.cfg.Timeout,
		func(i int) *nats.Msg { return e.delayMsg(e.futureSubject(i), time.Time{}) }, delayOK, &done)
	sr.FillCPU = mark.since()
	p.done()
	if err == nil && failed > 0 {
		err = fmt.Errorf("bench: %d of %d schedules refused", failed, e.cfg.ScalePending)
	}
	if err != nil {
		return fmt.Errorf("bench: scale fill: %w", err)
	}
	sr.FillRate = float64(e.cfg.ScalePending) / el.Seconds()
	return nil
}

// restartToFirstDelivery times a restart: a message due now waits with no
// subscriber (natsdelay retries it without counting the attempt), d
// stops, and the clock runs from reopening the store in dir until the
// message is delivered. It returns the service to close at the end (d,
// or the reopened one, or nil) and the time in milliseconds.
func (e *env) restartToFirstDelivery(dir string, d service) (service, float64, error) {
	subj := e.plain + ".restart"
	if _, _, err := pipelined(e.conns[0], 1, 1, e.cfg.Timeout,
		func(int) *nats.Msg { return e.delayMsg(subj, time.Now().Truncate(time.Millisecond)) }, delayOK, new(atomic.Int64)); err != nil {
		return d, 0, err
	}
	if err := d.close(); err != nil {
		return nil, 0, err
	}
	rec := newRecorder(1)
	stop, err := e.delayConsumer(subj, rec)
	if err != nil {
		return nil, 0, err
	}
	t0 := time.Now()
	d, err = e.openService(dir)
	if err != nil {
		return d, 0, errors.Join(err, stop())
	}
	rec.wait(e.cfg.Timeout)
	rec.mu.Lock()
	first := rec.mu.first
	rec.mu.Unlock()
	if err := stop(); err != nil {
		return d, 0, err
	}
	if first.IsZero() {
		return d, 0, fmt.Errorf("bench: no delivery %v after restart", e.cfg.Timeout)
	}
	return d, ms(first.Sub(t0)), nil
}

// timeInfo asks natsdelay for INFO three times and returns the slowest
// answer's round trip in milliseconds: INFO counts what is pending and due,
// and its cost is what a monitoring poll pays.
func (e *env) timeInfo() (float64, error) {
	var slowest time.Duration
	for range 3 {
		t0 := time.Now()
		_, err := e.client(e.cfg.Timeout).Info(context.Background())
		el := time.Since(t0)
		if err != nil {
			return 0, fmt.Errorf("bench: INFO: %w", err)
		}
		slowest = max(slowest, el)
	}
	return ms(slowest), nil
}

// futureSubject is the subject of pending message i of the scale fill:
// the messages go round robin over ScaleSubjects subjects.
func (e *env) futureSubject(i int) string {
	return e.plain + ".future." + strconv.Itoa(i%e.cfg.ScaleSubjects)
}

// dueSets times the due set ScaleDueRuns times on subj and returns the
// run with the median p99 and every run's p99. One run's p99 is the 20th
// latest of 2,000 deliveries, which a single stall of the host moves.
func (e *env) dueSets(subj string) (FireResult, []float64, error) {
	runs := make([]FireResult, 0, e.cfg.ScaleDueRuns)
	p99s := make([]float64, 0, e.cfg.ScaleDueRuns)
	for i := range e.cfg.ScaleDueRuns {
		res, err := e.dueSet(subj + "." + strconv.Itoa(i))
		if err != nil {
			return FireResult{}, nil, err
		}
		runs = append(runs, res)
		p99s = append(p99s, res.P99Ms)
	}
	sorted := slices.Clone(runs)
	slices.SortFunc(sorted, func(a, b FireResult) int { return cmp.Compare(a.P99Ms, b.P99Ms) })
	return sorted[len(sorted)/2], p99s, nil
}

// settleLimit bounds how long the scale run waits for natsdelay to become
// idle after the fill.
const settleLimit = 3 * time.Minute

// settle waits until natsdelay's process (this one when pid is 0) uses
// under a tenth of a core over a second, and returns how long that took
// in seconds, or -1 if it did not within settleLimit.
func (e *env) settle(pid int) float64 {
	proc := "self"
	if pid != 0 {
		proc = strconv.Itoa(pid)
	}
	t0 := time.Now()
	for time.Since(t0) < settleLimit {
		c0, ok := procCPU(proc)
		w0 := time.Now()
		time.Sleep(time.Second)
		c1, ok1 := procCPU(proc)
		if !ok || !ok1 {
			return -1
		}
		if float64(c1-c0) < 0.1*float64(time.Since(w0)) {
			return time.Since(t0).Seconds()
		}
	}
	return -1
}

// dueSet delivers ScaleDue messages due over one second on subj through
// the running natsdelay and returns their lateness.
func (e *env) dueSet(subj string) (FireResult, error) {
	rec := newRecorder(e.cfg.ScaleDue)
	stop, err := e.delayConsumer(subj, rec)
	if err != nil {
		return FireResult{}, err
	}
	run := &sysRun{system: SystemDelay, ok: delayOK, msg: func(_ int, at time.Time) *nats.Msg { return e.delayMsg(subj, at) }}
	res, err := e.fire(run, rec, e.cfg.ScaleDue, float64(e.cfg.ScaleDue), e.cfg.FireLead)
	return res, errors.Join(err, stop())
}

// expiry adds ExpiredMsgs messages, all due at once with a short TTL, for
// a subscriber that takes them and never ACKs, as a crashed consumer
// would. Their deliveries wait out the ack wait (30s), so it is the
// janitor that finds them expired; expiry times from the moment they
// expire until the last is gone.
func (e *env) expiry(d service) (*ExpiryResult, error) {
	// The restart message's ACK may still be on its way.
	if err := poll(e.cfg.Timeout, func() (bool, error) {
		some, err := d.hasPending(e.plain + ".restart")
		return !some, err
	}); err != nil {
		return nil, fmt.Errorf("bench: restart message still pending: %w", err)
	}
	subj := e.plain + ".expired"
	rec := newRecorder(e.cfg.ExpiredMsgs)
	nc, err := e.connect("bench-no-ack")
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	sub, err := nc.Subscribe(subj, func(m *nats.Msg) { rec.record(m.Header) })
	if err == nil {
		_ = sub.SetPendingLimits(-1, -1)
		err = nc.Flush()
	}
	if err != nil {
		return nil, fmt.Errorf("bench: subscribe %s: %w", subj, err)
	}
	// The TTL leaves time to ingest and deliver them all before they
	// expire, at 20,000 msgs/s.
	ttl := time.Second + time.Duration(float64(e.cfg.ExpiredMsgs)/20_000*float64(time.Second))
	fireAt := time.Now().Truncate(time.Millisecond)
	expireAt := fireAt.Add(ttl)
	msg := func(int) *nats.Msg {
		m := e.delayMsg(subj, fireAt)
		m.Header.Set(wire.HeaderTTL, ttl.String())
		return m
	}
	_, failed, err := pipelined(e.conns[0], e.cfg.ExpiredMsgs, e.cfg.Outstanding, e.cfg.Timeout, msg, delayOK, new(atomic.Int64))
	if err == nil && failed > 0 {
		err = fmt.Errorf("bench: %d of %d schedules refused", failed, e.cfg.ExpiredMsgs)
	}
	if err != nil {
		return nil, fmt.Errorf("bench: expiry: %w", err)
	}
	if err := poll(ttl+e.cfg.Timeout, func() (bool, error) {
		some, err := d.hasPending(subj)
		return !some, err
	}); err != nil {
		return nil, fmt.Errorf("bench: expired messages still pending: %w", err)
	}
	return &ExpiryResult{
		Pending: e.cfg.ScalePending, Expired: e.cfg.ExpiredMsgs, InFlight: int(rec.count.Load()),
		TTLMs: ms(ttl), Ms: ms(time.Since(expireAt)),
	}, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func freeOSMemory() { debug.FreeOSMemory() }

// du is the size of the files under dir.
func du(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if de.Type().IsRegular() {
			fi, err := de.Info()
			if err != nil {
				return err
			}
			n += fi.Size()
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("bench: size of %s: %w", dir, err)
	}
	return n, nil
}
