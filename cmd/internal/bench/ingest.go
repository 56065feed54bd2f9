package bench

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// runIngest measures acknowledged scheduling of messages that do not fire
// during the run, pipelined and with concurrent requesters, for natsdelay,
// JetStream schedules and a core request/reply baseline.
func (e *env) runIngest(ctx context.Context) (res []IngestResult, err error) {
	n := e.cfg.IngestMsgs
	future := time.Now().Add(time.Hour)
	type target struct {
		system string
		msg    func(i int) *nats.Msg
		ok     replyOK
		// start returns, besides stop, natsdelay's own process, or 0.
		start func() (stop func() error, pid int, err error)
	}
	echo := "bench." + e.id + ".echo"
	targets := []target{
		{SystemDelay, func(int) *nats.Msg { return e.delayMsg(e.plain+".ingest", time.Time{}) }, delayOK,
			func() (func() error, int, error) {
				d, err := e.openMeasured(filepath.Join(e.dir, "ingest"))
				if err != nil {
					return nil, 0, err
				}
				return d.close, d.pid(), nil
			}},
		{SystemJS, func(i int) *nats.Msg { return e.jsMsg("ingest", i, future) }, jsOK,
			func() (func() error, int, error) {
				s, err := e.stream(ctx, "ingest")
				if err != nil {
					return nil, 0, err
				}
				return func() error { return e.deleteStream(ctx, s) }, 0, nil
			}},
		{SystemCore, func(int) *nats.Msg { return &nats.Msg{Subject: echo, Data: e.payload} }, anyOK,
			func() (func() error, int, error) { return e.startEcho(echo) }},
	}
	for _, t := range targets {
		stop, pid, err := t.start()
		if err != nil {
			return res, err
		}
		var done atomic.Int64
		p := startProgress(e.cfg.Progress, "ingest "+t.system+" pipelined", n, &done)
		mark := e.markCPU(pid)
		el, failed, err := pipelined(e.conns[0], n, e.cfg.Outstanding, e.cfg.Timeout, t.msg, t.ok, &done)
		cpu := mark.since()
		p.done()
		if err == nil {
			res = append(res, ingestResult(t.system, "pipelined", n, failed, el, cpu))
			done.Store(0)
			// Later indexes, so JetStream's per-subject schedules are new
			// ones rather than replacements of the pipelined run's.
			msg := func(i int) *nats.Msg { return t.msg(n + i) }
			p = startProgress(e.cfg.Progress, "ingest "+t.system+" requesters", n, &done)
			mark = e.markCPU(pid)
			el, failed, err = requesters(e.conns, n, e.cfg.Requesters, e.cfg.Timeout, msg, t.ok, &done)
			cpu = mark.since()
			p.done()
			if err == nil {
				res = append(res, ingestResult(t.system, "requesters", n, failed, el, cpu))
			}
		}
		if err = errors.Join(err, stop()); err != nil {
			return res, fmt.Errorf("bench: ingest %s: %w", t.system, err)
		}
	}
	return res, nil
}

// startEcho starts the core baseline's responder on subject echo, on a
// connection of its own, and returns its stop and 0 (it is no process of
// natsdelay's).
func (e *env) startEcho(echo string) (func() error, int, error) {
	nc, err := e.connect("bench-echo")
	if err != nil {
		return nil, 0, err
	}
	// The answer is as small as natsdelay's, so the baseline
	// differs only in what the server side does.
	reply := []byte(`{"tag":"000000000000000000000000000000000000000000000000","subject":"x","fire_at":"2026-01-01T00:00:00.000Z"}`)
	sub, err := nc.Subscribe(echo, func(m *nats.Msg) { _ = m.Respond(reply) })
	if err == nil {
		_ = sub.SetPendingLimits(-1, -1)
		err = nc.Flush()
	}
	if err != nil {
		nc.Close()
		return nil, 0, fmt.Errorf("bench: echo responder: %w", err)
	}
	return func() error { nc.Close(); return nil }, 0, nil
}

// ingestResult is a run's figures. natsdelay runs inside the bench
// process in this phase, so cpu has no figure of its own for it.
func ingestResult(system, mode string, n, failed int, el time.Duration, cpu CPU) IngestResult {
	return IngestResult{System: system, Mode: mode, Msgs: n, Failed: failed, Seconds: el.Seconds(), Rate: float64(n) / el.Seconds(), CPU: cpu}
}
