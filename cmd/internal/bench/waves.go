package bench

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// forgetWait bounds how long a wave waits, after its last message is gone
// from the store, for the dispatcher to forget its subjects. It forgets
// them at the start of its next pass, which the last delete's commit
// starts, so this is slack rather than a cost.
const forgetWait = 10 * time.Second

// releaseWait bounds how long a wave waits, once drained, for natsdelay to
// hand memory back: it does so once quiet for its --idle-release (10s by
// default), between one and two of those after the wave's last write.
func (e *env) releaseWait() time.Duration {
	if e.cfg.IdleRelease > 0 {
		return 3*e.cfg.IdleRelease + 5*time.Second
	}
	return 45 * time.Second
}

// runWaves measures whether natsdelay's memory follows the subjects with
// work or every subject it has seen: Waves times, it schedules one due-now
// message on each of WaveSubjects subjects never used before, a consumer
// ACKs them all, and once the store has none left it reads natsdelay's
// memory. It reads it at idle first, before any wave.
func (e *env) runWaves() (wr *WavesResult, err error) {
	d, err := e.openService(filepath.Join(e.dir, "waves"))
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, d.close()) }()
	wr = &WavesResult{Subjects: e.cfg.WaveSubjects, OwnProcess: len(e.cfg.ServiceCommand) > 0}
	if wr.Idle, err = d.mem(); err != nil {
		return nil, err
	}
	last := wr.Idle
	for k := range e.cfg.Waves {
		w, err := e.wave(d, k, wr.Idle.DispatchSubjects, last.Releases)
		if err != nil {
			return nil, fmt.Errorf("bench: wave %d: %w", k+1, err)
		}
		wr.Waves = append(wr.Waves, w)
		last = w.Mem
		if w.Released != nil {
			last = *w.Released
		}
	}
	return wr, nil
}

// wave runs wave k on subjects <plain>.wave<k>.<i>, and waits for the
// dispatch subjects gauge to come down to idle before it reads memory.
// Where natsdelay counts its memory releases (released, the count before
// the wave, is not -1), it then waits for the release that follows the
// wave and reads memory again.
func (e *env) wave(d service, k int, idle, released int64) (WaveResult, error) {
	n := e.cfg.WaveSubjects
	prefix := e.plain + ".wave" + strconv.Itoa(k)
	rec := newRecorder(n)
	stop, err := e.delayConsumer(prefix+".>", rec)
	if err != nil {
		return WaveResult{}, err
	}
	p := startProgress(e.cfg.Progress, fmt.Sprintf("wave %d of %d", k+1, e.cfg.Waves), n, &rec.count)
	mark := e.markCPU(d.pid())
	start := time.Now()
	_, failed, err := pipelined(e.conns[0], n, e.cfg.Outstanding, e.cfg.Timeout,
		func(i int) *nats.Msg {
			return e.delayMsg(prefix+"."+strconv.Itoa(i), time.Now().Truncate(time.Millisecond))
		}, delayOK, new(atomic.Int64))
	if err == nil && failed > 0 {
		err = fmt.Errorf("%d of %d schedules refused", failed, n)
	}
	if err == nil {
		rec.wait(e.cfg.Timeout)
		if got := int(rec.count.Load()); got < n {
			err = fmt.Errorf("%d of %d delivered after %v", got, n, e.cfg.Timeout)
		}
	}
	if err == nil {
		err = poll(e.cfg.Timeout, func() (bool, error) {
			left, err := d.pending()
			return left == 0, err
		})
	}
	el := time.Since(start)
	cpu := mark.since()
	p.done()
	if err = errors.Join(err, stop()); err != nil {
		return WaveResult{}, err
	}
	// NB: not reaching idle is a finding, not a failure: the memory
	// figures then show what was kept.
	// Each reading asks natsdelay for a collection, so not every
	// millisecond as poll would.
	var mem MemSample
	deadline := time.Now().Add(forgetWait)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if mem, err = d.mem(); err != nil {
			return WaveResult{}, err
		}
		if mem.DispatchSubjects <= idle || time.Now().After(deadline) {
			break
		}
		<-tick.C
	}
	w := WaveResult{Seconds: el.Seconds(), Rate: float64(n) / el.Seconds(), CPU: cpu, Mem: mem}
	if released < 0 || mem.Releases < 0 {
		return w, nil
	}
	// Not handing memory back is a finding too: Released stays nil.
	// Each reading asks for a collection, so once a second.
	deadline = time.Now().Add(e.releaseWait())
	for mem.Releases <= released && time.Now().Before(deadline) {
		time.Sleep(time.Second)
		if mem, err = d.mem(); err != nil {
			return WaveResult{}, err
		}
	}
	if mem.Releases > released {
		w.Released = &mem
	}
	return w, nil
}
