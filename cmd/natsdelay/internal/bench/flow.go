package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"natsdelay/bridge/wire"
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
	RatedDelivered int64      `json:"rated_delivered"`
	Alone          FireResult `json:"alone"`
	Beside         FireResult `json:"beside"`
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
			stopLoad, err = e.flowLoad(phase, &rated)
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
// limits <phase>.rated to flowRatedRate and schedules FlowRated due now
// there, with a consumer that ACKs them, counting them in delivered.
func (e *env) flowLoad(phase string, delivered *atomic.Int64) (stop func() error, err error) {
	paused, rated := e.plain+"."+phase+".paused", e.plain+"."+phase+".rated"
	if err := e.apiRequest(wire.VerbPause, wire.PatternRequest{Pattern: paused}); err != nil {
		return nil, err
	}
	if err := e.apiRequest(wire.VerbLimitsSet, wire.Limit{Pattern: rated, Rate: flowRatedRate}); err != nil {
		return nil, err
	}
	nc, err := e.connect("bench-flow-rated")
	if err != nil {
		return nil, err
	}
	sub, err := nc.Subscribe(rated, func(m *nats.Msg) {
		_ = m.Respond(nil)
		delivered.Add(1)
	})
	if err == nil {
		_ = sub.SetPendingLimits(-1, -1)
		err = nc.Flush()
	}
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("bench: subscribe %s: %w", rated, err)
	}
	stop = func() error {
		err := nc.FlushTimeout(5 * time.Second)
		nc.Close()
		return err
	}
	for _, s := range []struct {
		subj string
		n    int
	}{{paused, e.cfg.FlowPaused}, {rated, e.cfg.FlowRated}} {
		p := startProgress(e.cfg.Progress, "flow: schedule "+s.subj, s.n, new(atomic.Int64))
		_, failed, err := pipelined(e.conns[0], s.n, e.cfg.Outstanding, e.cfg.Timeout,
			func(int) *nats.Msg { return e.delayMsg(s.subj, time.Now().Truncate(time.Millisecond)) }, delayOK, new(atomic.Int64))
		p.done()
		if err == nil && failed > 0 {
			err = fmt.Errorf("bench: %d of %d schedules on %s refused", failed, s.n, s.subj)
		}
		if err != nil {
			return nil, errors.Join(err, stop())
		}
	}
	return stop, nil
}

// apiRequest makes one request of natsdelay's API, failing on an error answer.
func (e *env) apiRequest(verb string, body any) error {
	data, err := json.Marshal(body)
	if err != nil {
		return err
	}
	rep, err := e.conns[0].Request(e.api+"."+verb, data, e.cfg.Timeout)
	if err != nil {
		return fmt.Errorf("bench: %s: %w", verb, err)
	}
	if err := wire.ParseError(rep.Header, rep.Data); err != nil {
		return fmt.Errorf("bench: %s: %w", verb, err)
	}
	return nil
}
