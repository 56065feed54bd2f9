// Package bench runs natsdelay side by side with JetStream message
// schedules (ADR-51) in one process, on one nats-server, and reports
// ingest rate, fire lateness, end-to-end rate, and natsdelay's behaviour
// with many pending messages and with expiry.
//
// Both systems get the same messages over the same client code: only the
// server side differs. The cluster phase, run only when asked for, sets
// natsdelay as one `serve` process beside a cluster of three, and beside
// JetStream schedules on an R3 stream of three embedded servers; the cells
// phase, likewise, ingests into one cell, a fleet of cells and as many
// independent nodes the load partitions by hand. Either can run each node
// as a machine of its own, in a cgroup with a CPU quota and with its data
// on a tmpfs (see machine.go). Timings are of the whole system on this machine,
// client included; nothing here asserts on them.
package bench

import (
	"bufio"
	"context"
	"errors"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// Run runs every phase with cfg and returns what it measured. It blocks
// until the run is done, and stops everything it started before it
// returns, also on error, when Results holds the phases that finished.
func Run(ctx context.Context, cfg Config) (res *Results, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if err := cfg.checkMachines(); err != nil {
		return nil, err
	}
	res = &Results{StartedAt: time.Now().UTC(), Host: host(), Config: summary(cfg)}
	if len(cfg.Phases) > 0 {
		res.Config.Phases = cfg.Phases
	}
	res.Host.Embedded = cfg.NATSURL == ""
	start := time.Now()
	res.Host.LoadBefore = loadavg()
	steal0, total0 := cpuSteal()
	defer func() {
		res.Seconds = time.Since(start).Seconds()
		res.Host.LoadAfter = loadavg()
		res.Host.StealPct = -1
		if steal1, total1 := cpuSteal(); total1 > total0 {
			res.Host.StealPct = 100 * float64(steal1-steal0) / float64(total1-total0)
		}
	}()

	// NB: every phase gets a fresh env, so a fresh embedded nats-server.
	// JetStream keeps the schedule state of a deleted stream in the Go heap
	// for a while (about 60 MB after the ingest phase), and in one process
	// every later phase, natsdelay's included, would pay for marking it.
	phase := func(name string, run func(e *env) error) (err error) {
		if !cfg.runs(name) {
			return nil
		}
		e, err := newEnv(cfg, name)
		if err != nil {
			return err
		}
		defer func() { err = errors.Join(err, e.close()) }()
		if res.Host.NATS == "" {
			res.Host.NATS = e.conns[0].ConnectedServerVersion()
		}
		if res.JetStreamSync == nil && e.srv != nil {
			if c := e.srv.JetStreamConfig(); c != nil {
				res.JetStreamSync = &JetStreamSync{Always: c.SyncAlways, Interval: c.SyncInterval.String()}
			}
		}
		return run(e)
	}
	phases := []struct {
		name, title string
		run         func(e *env) error
	}{
		{PhaseIngest, "ingest", func(e *env) (err error) { res.Ingest, err = e.runIngest(ctx); return err }},
		{PhaseFire, "fire", func(e *env) (err error) { res.Fire, err = e.runFire(ctx); return err }},
		{PhaseEndToEnd, "end to end", func(e *env) (err error) { res.EndToEnd, err = e.runEndToEnd(ctx); return err }},
		{PhaseScale, "scale and expiry", func(e *env) (err error) { res.Scale, res.Expiry, err = e.runScale(); return err }},
		{PhaseWaves, "waves", func(e *env) (err error) { res.Waves, err = e.runWaves(); return err }},
		{PhaseRecur, "recurring", func(e *env) (err error) { res.Recurring, err = e.runRecurring(ctx); return err }},
		{PhaseFlow, "flow", func(e *env) (err error) { res.Flow, err = e.runFlow(ctx); return err }},
		{PhaseEvents, "events", func(e *env) (err error) { res.Events, err = e.runEvents(ctx); return err }},
		{PhaseFloor, "floor", func(e *env) (err error) { res.Floor, err = e.runFloor(ctx); return err }},
		{PhaseCluster, "cluster", func(e *env) (err error) { res.Cluster, err = e.runCluster(ctx); return err }},
		{PhaseCells, "cells", func(e *env) (err error) { res.Cells, err = e.runCells(ctx); return err }},
	}
	for _, p := range phases {
		if err := phase(p.name, func(e *env) error {
			cfg.Logger.Info(p.title)
			return p.run(e)
		}); err != nil {
			return res, err
		}
	}
	return res, nil
}

func summary(c Config) ConfigSummary {
	return ConfigSummary{
		PayloadSize: c.PayloadSize, IngestMsgs: c.IngestMsgs, Outstanding: c.Outstanding, Requesters: c.Requesters,
		FireMsgs: c.FireMsgs, FireRates: c.FireRates, FireLeadMs: float64(c.FireLead) / float64(time.Millisecond), FireRecurring: c.FireRecurring,
		EndToEndMsgs: c.EndToEndMsgs, ScalePending: c.ScalePending, ScaleSubjects: c.ScaleSubjects, ScaleDue: c.ScaleDue, ScaleDueRuns: c.ScaleDueRuns,
		ExpiredMsgs: c.ExpiredMsgs, ExpiryInterval: c.ExpiryInterval.String(), Waves: c.Waves, WaveSubjects: c.WaveSubjects,
		RecurSchedules: c.RecurSchedules, RecurEvery: c.RecurEvery.String(), RecurDuration: c.RecurDuration.String(),
		RecurIdle: c.RecurIdle, RecurIdleFor: c.RecurIdleFor.String(),
		JSSyncAlways: c.JSSyncAlways, ServerProcess: c.ServerPID > 0, OwnProcess: c.OwnProcess,
		Phases: Phases(),
	}
}

// host names the CPU from /proc/cpuinfo, where there is one.
func host() Host {
	h := Host{Cores: runtime.NumCPU(), GoVersion: runtime.Version()}
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return h
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			h.CPU = strings.TrimSpace(v)
			break
		}
	}
	return h
}

// loadavg is the first three fields of /proc/loadavg, or "".
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// cpuSteal reads the steal and total CPU time from the first line of
// /proc/stat, in clock ticks; zeros where there is none.
func cpuSteal() (steal, total uint64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0
	}
	// user nice system idle iowait irq softirq steal [guest guest_nice],
	// where guest time is already counted in user and nice.
	for i, v := range f[1:9] {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, 0
		}
		total += n
		if i == 7 {
			steal = n
		}
	}
	return steal, total
}
