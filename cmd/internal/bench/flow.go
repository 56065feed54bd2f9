package bench

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge/wire"
)

// flowRatedRate is the rate limit of the flow phase's rate-limited
// subject, in msgs/s: low enough that it is held by its rate the whole
// run, so the phase measures a subject waiting for tokens beside the
// measured one.
const flowRatedRate = 1000

// FlowResult is the flow phase: the fire lateness of an unlimited subject
// alone, and again beside a paused subject with many messages due and a
// rate-limited subject with a backlog.
type FlowResult struct {
	Rate float64 `json:"rate"`
	Msgs int     `json:"msgs"`
	// Paused is how many messages were due on the paused subject, and
	// Rated on the rate-limited one, limited to RatedRate msgs/s.
	Paused    int     `json:"paused_due"`
	Rated     int     `json:"rated_due"`
	RatedRate float64 `json:"rated_rate"`
	// RatedDelivered is how many of Rated were delivered during the run.
	RatedDelivered int64 `json:"rated_delivered"`
	// SettleS is how long natsdelay took, after the paused and rated
	// messages were written, to become idle before the measured run (-1:
	// not within settleLimit): the store's flushes and compactions of a
	// million writes are the aftermath of writing them, not of flow
	// control, and would be measured otherwise.
	SettleS float64    `json:"settle_s"`
	Alone   FireResult `json:"alone"`
	Beside  FireResult `json:"beside"`
	// P99Ratio is Beside's p99 over Alone's.
	P99Ratio float64 `json:"p99_ratio"`
}

// runFlow fires FlowMsgs at FlowRate on one subject, first alone, then
// beside a paused pattern with FlowPaused due and a subject limited to
// flowRatedRate with FlowRated due, each on a fresh natsdelay.
func (e *env) runFlow(ctx context.Context) (*FlowResult, error) {
	c := e.cfg
	res := &FlowResult{Rate: c.FlowRate, Msgs: c.FlowMsgs, Paused: c.FlowPaused, Rated: c.FlowRated, RatedRate: flowRatedRate}
	for _, beside := range []bool{false, true} {
		phase := map[bool]string{false: "flowalone", true: "flowbeside"}[beside]
		rec := newRecorder(c.FlowMsgs)
		run, err := e.startSystem(ctx, SystemDelay, phase, rec)
		if err != nil {
			return res, err
		}
		stopLoad := func() error { return nil }
		var rated atomic.Int64
		if beside {
			stopLoad, res.SettleS, err = e.flowLoad(phase, run.pid, &rated)
			if err != nil {
				return res, errors.Join(err, run.stop())
			}
		}
		r, err := e.fire(run, rec, c.FlowMsgs, c.FlowRate, c.FireLead)
		if err = errors.Join(err, stopLoad(), run.stop()); err != nil {
			return res, fmt.Errorf("bench: flow %s: %w", phase, err)
		}
		if beside {
			res.Beside, res.RatedDelivered = r, rated.Load()
		} else {
			res.Alone = r
		}
	}
	if res.Alone.P99Ms > 0 {
		res.P99Ratio = res.Beside.P99Ms / res.Alone.P99Ms
	}
	return res, nil
}

// flowLoad pauses <phase>.paused and schedules FlowPaused due now there,
// waits for natsdelay (process pid, 0 for this one) to settle and returns
// how long that took (see FlowResult.SettleS), then limits <phase>.rated
// to flowRatedRate and schedules FlowRated due now there, with a consumer
// that ACKs them, counting them in delivered. The rated ones come last so
// that their subject is still held by its rate when the measured run
// starts, whatever the settling took.
func (e *env) flowLoad(phase string, pid int, delivered *atomic.Int64) (stop func() error, settleS float64, err error) {
	paused, rated := e.plain+"."+phase+".paused", e.plain+"."+phase+".rated"
	api := e.client(e.cfg.Timeout)
	if _, err := api.Pause(context.Background(), paused); err != nil {
		return nil, 0, fmt.Errorf("bench: pause %s: %w", paused, err)
	}
	if err := e.schedulePipelined(paused, e.cfg.FlowPaused); err != nil {
		return nil, 0, err
	}
	settleS = e.settle(pid)
	if _, err := api.SetLimit(context.Background(), wire.Limit{Pattern: rated, Rate: flowRatedRate}); err != nil {
		return nil, settleS, fmt.Errorf("bench: limit %s: %w", rated, err)
	}
	stop, err = e.ackingConsumer("bench-flow-rated", rated, func(*nats.Msg, time.Time) { delivered.Add(1) })
	if err != nil {
		return nil, settleS, err
	}
	if err := e.schedulePipelined(rated, e.cfg.FlowRated); err != nil {
		return nil, settleS, errors.Join(err, stop())
	}
	return stop, settleS, nil
}

// schedulePipelined schedules n messages due now on subj, pipelined.
func (e *env) schedulePipelined(subj string, n int) error {
	p := startProgress(e.cfg.Progress, "flow: schedule "+subj, n, new(atomic.Int64))
	_, failed, err := pipelined(e.conns[0], n, e.cfg.Outstanding, e.cfg.Timeout,
		func(int) *nats.Msg { return e.delayMsg(subj, time.Now().Truncate(time.Millisecond)) }, delayOK, new(atomic.Int64))
	p.done()
	if err == nil && failed > 0 {
		err = fmt.Errorf("bench: %d of %d schedules on %s refused", failed, n, subj)
	}
	return err
}
