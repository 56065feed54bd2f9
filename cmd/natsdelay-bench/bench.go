package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/natsdelay/natsdelay/cmd/internal/bench"
	"github.com/natsdelay/natsdelay/cmd/internal/natsurl"
	"github.com/natsdelay/natsdelay/cmd/internal/usage"
)

// benchCmd runs natsdelay beside JetStream message schedules and reports
// both. A size flag left at 0 takes the default, or the --quick size.
type benchCmd struct {
	NATS         string   `name:"nats" help:"URL of a NATS server with JetStream to use (no auth); without it bench embeds one on a temp dir." placeholder:"URL"`
	Dir          string   `help:"Directory for the data dirs and the embedded JetStream store; default a temp dir, removed at the end." placeholder:"DIR"`
	JSONOut      string   `name:"json-out" help:"File to write every figure to, as JSON." default:"bench.json" placeholder:"FILE"`
	PNGOut       string   `name:"png-out" help:"File to draw the chart of fire lateness and throughput to." default:"bench.png" placeholder:"FILE"`
	Quick        bool     `help:"Tiny sizes, a smoke check that runs in ${quick_takes} on two cores; size flags still override them."`
	Quiet        bool     `help:"No progress bars."`
	JSSyncAlways bool     `name:"js-sync-always" help:"Make the embedded server fsync every JetStream write, as natsdelay syncs every ingest batch."`
	Phases       []string `help:"Phases to run, of ingest, fire, e2e, scale (scale includes expiry), waves, recurring, flow, events, floor, cluster and cells; default all but flow, events, floor, cluster and cells." placeholder:"PHASE,..."`
	ServeBinary  string   `name:"serve-binary" help:"natsdelay binary whose serve the scale, waves and cluster phases run (default the natsdelay next to this binary, else on the PATH), also to measure another version with the same bench." placeholder:"FILE"`
	Cluster      bool     `help:"Run the cluster phase: natsdelay as one node beside a cluster of three, ingest, fire lateness and failover; alone unless --phases names others."`
	Failovers    int      `help:"Leader kills of the cluster phase (default 5)."`
	Cells        int      `help:"Run the cells phase with this many cells: ingest into one cell, into that many cells of a fleet, and into as many independent nodes the requesters partition by hand; alone unless --phases names others (default 3 when --phases names cells)."`
	CellNodes    int      `name:"cell-nodes" help:"Nodes of each cell of the cells phase: 1, or 3 for a cluster (default 1)."`
	CellParts    int      `name:"cell-partitions" help:"The fleet's --partitions in the cells phase (default 12)."`
	CellReqs     []int    `name:"cell-requesters" help:"Synchronous requester counts of the cells phase (default 64,192)." placeholder:"N,..."`
	CellWarmup   int      `name:"cell-warmup" help:"Messages of the untimed run of each mode that each system of the cells phase takes before its timed rows, so that none is timed colder than another (default --ingest-msgs/4)."`
	NodeCPU      float64  `name:"node-cpu" help:"Run each natsdelay node of the cluster and cells phases in a cgroup of its own with this CPU quota in cores, every 10 ms, and its data on a tmpfs of its own, as a machine of its own; 0 shares this machine's cores and disk. Needs root." placeholder:"CORES"`
	NodeTmpfs    bool     `name:"node-tmpfs" help:"Put each node's data on a tmpfs of its own, without a CPU quota (--node-cpu implies it). Needs root."`
	NodeLogs     string   `name:"node-logs" help:"Keep the whole log of every node of the cluster and cells phases in this directory, a file a node." placeholder:"DIR"`
	Flow         bool     `help:"Run the flow phase: the fire lateness of an unlimited subject alone and beside a paused subject with many due and a rate-limited one; alone unless --phases names others."`
	FlowPaused   int      `name:"flow-paused" help:"Messages due on the paused subject of the flow phase (default 1000000)."`
	EventsRounds int      `name:"events-rounds" help:"Runs of --e2e-msgs the events phase makes with lifecycle events off, and as many with them on (default 3)."`
	FloorRounds  int      `name:"floor-rounds" help:"Runs of --e2e-msgs the floor phase makes of natsdelay, of the floor service and of the floor without a store, each (default 3). The floor phase needs --own-process."`
	FloorServe   string   `name:"floor-serve" hidden:"" help:"Serve as the floor phase's floor service, with this config (JSON), until SIGTERM."`
	OwnProcess   bool     `name:"own-process" help:"Run natsdelay as its own serve process in ingest, fire and end to end too, so their CPU time per message is natsdelay's apart (lateness then suffers from the two processes sharing the cores)."`
	NATSPID      int      `name:"nats-pid" help:"Process id of the nats-server at --nats, on this machine: each phase then reports its CPU time apart from the clients'." placeholder:"PID"`
	Trace        string   `name:"trace" help:"Write a runtime execution trace of each of natsdelay's fire runs to FILE (FILE.<rate> after the first rate), for go tool trace." placeholder:"FILE"`
	CPUProfile   string   `name:"cpuprofile" help:"Write a CPU profile of the whole run (both systems, clients and server) to FILE, for go tool pprof." placeholder:"FILE"`

	PayloadSize    int           `help:"Payload of every message in bytes (default 256)."`
	IngestMsgs     int           `help:"Messages per ingest run (default 100000)."`
	Outstanding    int           `help:"Unanswered messages of a pipelined run (default 4096)."`
	Requesters     int           `help:"Concurrent synchronous requesters (default 64)."`
	FireMsgs       int           `help:"Messages per fire run (default 50000)."`
	FireRates      []float64     `help:"Offered rates of the fire runs in msgs/s (default 25000,100000)." placeholder:"RATE,..."`
	FireLead       time.Duration `help:"How far ahead the first message of a fire run is due (default 1s + time to ingest at 20k/s)."`
	FireRecurring  int           `name:"fire-recurring" help:"Recurring schedules, every second on subjects of their own, that natsdelay holds during its fire runs, delivered and ACKed beside the measured messages (default 0)."`
	E2EMsgs        int           `name:"e2e-msgs" help:"Due-now messages of the end-to-end run (default 100000)."`
	ScalePending   int           `help:"Pending future messages of the scale and expiry runs (default 1000000)."`
	ScaleSubjects  int           `help:"Distinct subjects the pending messages of the scale run are spread over (default 1)."`
	ScaleDue       int           `help:"Messages of the due set timed with and without the pending ones (default 2000)."`
	ScaleDueRuns   int           `help:"Times the due set is timed in each case; the run with the median p99 is reported (default 5)."`
	ExpiredMsgs    int           `help:"Expired messages of the expiry run (default 10000)."`
	ExpiryInterval time.Duration `help:"natsdelay's janitor interval (default 1s)."`
	Waves          int           `help:"Waves of the waves run: each schedules one due-now message on each of --wave-subjects new subjects, drains them and reads natsdelay's memory (default 3)."`
	WaveSubjects   int           `help:"New subjects, one message each, of every wave (default 20000)."`
	RecurSchedules int           `help:"Recurring schedules, one subject each, of the recurring run, in natsdelay and in JetStream (default 10000)."`
	RecurEvery     time.Duration `help:"Their interval, whole seconds, at least 1s as JetStream's @every takes (default 1s)."`
	RecurDuration  time.Duration `help:"How long the recurring run measures them (default 30s)."`
	RecurIdle      int           `help:"Schedules far in the future whose memory and CPU cost the recurring run measures (default 100000)."`
	RecurIdleFor   time.Duration `help:"Idle interval whose CPU time the recurring run measures with them (default 5s)."`
	Timeout        time.Duration `help:"Bound on each wait for replies or deliveries (default 2m)."`
}

// config builds the run's sizes: the preset, then every flag that is set.
func (c *benchCmd) config() bench.Config {
	cfg := bench.DefaultConfig()
	if c.Quick {
		cfg = bench.Quick()
	}
	cfg.NATSURL, cfg.Dir, cfg.JSSyncAlways = c.NATS, c.Dir, c.JSSyncAlways
	set := func(dst *int, v int) {
		if v != 0 {
			*dst = v
		}
	}
	setD := func(dst *time.Duration, v time.Duration) {
		if v != 0 {
			*dst = v
		}
	}
	set(&cfg.PayloadSize, c.PayloadSize)
	set(&cfg.IngestMsgs, c.IngestMsgs)
	set(&cfg.Outstanding, c.Outstanding)
	set(&cfg.Requesters, c.Requesters)
	set(&cfg.FireMsgs, c.FireMsgs)
	set(&cfg.FireRecurring, c.FireRecurring)
	set(&cfg.EndToEndMsgs, c.E2EMsgs)
	set(&cfg.ScalePending, c.ScalePending)
	set(&cfg.ScaleSubjects, c.ScaleSubjects)
	set(&cfg.ScaleDue, c.ScaleDue)
	set(&cfg.ScaleDueRuns, c.ScaleDueRuns)
	set(&cfg.ExpiredMsgs, c.ExpiredMsgs)
	set(&cfg.Waves, c.Waves)
	set(&cfg.WaveSubjects, c.WaveSubjects)
	set(&cfg.RecurSchedules, c.RecurSchedules)
	set(&cfg.RecurIdle, c.RecurIdle)
	setD(&cfg.RecurEvery, c.RecurEvery)
	setD(&cfg.RecurDuration, c.RecurDuration)
	setD(&cfg.RecurIdleFor, c.RecurIdleFor)
	setD(&cfg.FireLead, c.FireLead)
	setD(&cfg.ExpiryInterval, c.ExpiryInterval)
	setD(&cfg.Timeout, c.Timeout)
	if len(c.FireRates) > 0 {
		cfg.FireRates = c.FireRates
	}
	cfg.Phases = c.Phases
	cfg.OwnProcess, cfg.ServerPID, cfg.TraceFile = c.OwnProcess, c.NATSPID, c.Trace
	if c.Cluster && !slices.Contains(cfg.Phases, bench.PhaseCluster) {
		cfg.Phases = append(slices.Clone(cfg.Phases), bench.PhaseCluster)
	}
	if c.Flow && !slices.Contains(cfg.Phases, bench.PhaseFlow) {
		cfg.Phases = append(slices.Clone(cfg.Phases), bench.PhaseFlow)
	}
	set(&cfg.FlowPaused, c.FlowPaused)
	set(&cfg.Failovers, c.Failovers)
	set(&cfg.EventsRounds, c.EventsRounds)
	set(&cfg.FloorRounds, c.FloorRounds)
	if c.Cells != 0 && !slices.Contains(cfg.Phases, bench.PhaseCells) {
		cfg.Phases = append(slices.Clone(cfg.Phases), bench.PhaseCells)
	}
	set(&cfg.Cells, c.Cells)
	set(&cfg.CellNodes, c.CellNodes)
	set(&cfg.CellPartitions, c.CellParts)
	set(&cfg.CellWarmup, c.CellWarmup)
	cfg.CellRequesters = c.CellReqs
	cfg.NodeCPU, cfg.NodeTmpfs, cfg.NodeLogs = c.NodeCPU, c.NodeTmpfs, c.NodeLogs
	if c.ScaleSubjects == 0 {
		// The preset's subjects fit a smaller --scale-pending.
		cfg.ScaleSubjects = min(cfg.ScaleSubjects, cfg.ScalePending)
	}
	if c.FireMsgs != 0 && c.FireLead == 0 {
		// Zero lets bench size the lead to the new FireMsgs.
		cfg.FireLead = 0
	}
	return cfg
}

// check reports every bad setting at once.
func (c *benchCmd) check() error {
	var p problems
	if c.NATS != "" {
		if err := natsurl.Check(c.NATS); err != nil {
			p.add("--nats %q: %v", c.NATS, err)
		}
	}
	for _, f := range []struct {
		name string
		v    int
	}{
		{"--payload-size", c.PayloadSize}, {"--ingest-msgs", c.IngestMsgs}, {"--outstanding", c.Outstanding},
		{"--requesters", c.Requesters}, {"--fire-msgs", c.FireMsgs}, {"--fire-recurring", c.FireRecurring}, {"--e2e-msgs", c.E2EMsgs},
		{"--scale-pending", c.ScalePending}, {"--scale-subjects", c.ScaleSubjects}, {"--scale-due", c.ScaleDue},
		{"--scale-due-runs", c.ScaleDueRuns},
		{"--expired-msgs", c.ExpiredMsgs}, {"--waves", c.Waves}, {"--wave-subjects", c.WaveSubjects},
		{"--recur-schedules", c.RecurSchedules}, {"--recur-idle", c.RecurIdle},
		{"--failovers", c.Failovers}, {"--events-rounds", c.EventsRounds}, {"--floor-rounds", c.FloorRounds},
		{"--cells", c.Cells}, {"--cell-partitions", c.CellParts}, {"--cell-warmup", c.CellWarmup},
	} {
		if f.v < 0 {
			p.add("%s %d: want a count > 0, or 0 for the default", f.name, f.v)
		}
	}
	if cfg := c.config(); cfg.ScaleSubjects > cfg.ScalePending {
		p.add("--scale-subjects %d: want at most the %d pending messages of --scale-pending", cfg.ScaleSubjects, cfg.ScalePending)
	}
	for _, r := range c.FireRates {
		if !(r > 0) {
			p.add("--fire-rates: %v: want rates in msgs/s > 0, such as 25000,100000", r)
		}
	}
	for _, f := range []struct {
		name string
		v    time.Duration
	}{{"--fire-lead", c.FireLead}, {"--expiry-interval", c.ExpiryInterval}, {"--timeout", c.Timeout},
		{"--recur-duration", c.RecurDuration}, {"--recur-idle-for", c.RecurIdleFor}} {
		if f.v < 0 {
			p.add("%s %v: want a duration > 0, or 0 for the default", f.name, f.v)
		}
	}
	if v := c.RecurEvery; v != 0 && (v < time.Second || v%time.Second != 0) {
		p.add("--recur-every %v: want whole seconds, at least 1s, as JetStream's @every takes, or 0 for the default", v)
	}
	for _, ph := range c.Phases {
		if !slices.Contains(bench.Phases(), ph) {
			p.add("--phases: %q: want some of %s", ph, strings.Join(bench.Phases(), ","))
		}
	}
	if c.Trace != "" && c.OwnProcess {
		p.add("--trace traces the bench process: it cannot show natsdelay with --own-process")
	}
	if slices.Contains(c.Phases, bench.PhaseFloor) && !c.OwnProcess {
		p.add("--phases floor compares natsdelay's process with the floor's: add --own-process")
	}
	if c.CellNodes != 0 && c.CellNodes != 1 && c.CellNodes != 3 {
		p.add("--cell-nodes %d: want 1, or 3 for cells that are clusters", c.CellNodes)
	}
	for _, r := range c.CellReqs {
		if r <= 0 {
			p.add("--cell-requesters %d: want counts of requesters > 0", r)
		}
	}
	if c.NodeCPU != 0 && !(c.NodeCPU > 0 && c.NodeCPU <= 64) {
		p.add("--node-cpu %v: want a quota in cores > 0, such as 0.2, or 0 for none", c.NodeCPU)
	}
	if (c.NodeCPU != 0 || c.NodeTmpfs) && !slices.Contains(c.config().Phases, bench.PhaseCluster) && !slices.Contains(c.config().Phases, bench.PhaseCells) {
		p.add("--node-cpu and --node-tmpfs set up the nodes of the cluster and cells phases: run one of them (--cluster, --cells 3)")
	}
	if c.NATSPID < 0 || (c.NATSPID > 0 && c.NATS == "") {
		p.add("--nats-pid %d: want the process id of the server --nats names", c.NATSPID)
	}
	if c.JSONOut == "" || c.PNGOut == "" {
		p.add("--json-out and --png-out: want file names")
	}
	return p.err()
}

// Run runs the benchmark, prints the table to stdout and writes the JSON
// and the chart. Progress bars go to stderr when it is a terminal.
func (c *benchCmd) Run(e *env) (err error) {
	if c.FloorServe != "" {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
		defer stop()
		return bench.ServeFloor(ctx, c.FloorServe, os.Stderr)
	}
	cfg := c.config()
	cfg.Logger = e.log.With("component", "bench")
	// The scale phase runs natsdelay as a process of its own, so the
	// memory it reports is natsdelay's alone.
	serve, err := c.serveBinary()
	if err != nil {
		return err
	}
	cfg.ServiceCommand = []string{serve, "serve"}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("bench: this binary, to run the floor: %w", err)
	}
	cfg.FloorCommand = []string{self}
	if !c.Quiet && isTerminal(os.Stderr) {
		cfg.Progress = os.Stderr
	}
	if c.CPUProfile != "" {
		stop, err := startCPUProfile(c.CPUProfile)
		if err != nil {
			return err
		}
		defer func() { err = errors.Join(err, stop()) }()
	}
	stop := closeMachinesOnSignal(e)
	defer stop()
	res, err := bench.Run(context.Background(), cfg)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if err := bench.WriteTable(e.stdout, res); err != nil {
		return err
	}
	if err := bench.WriteJSON(c.JSONOut, res); err != nil {
		return err
	}
	if !bench.HasChart(res) {
		// The chart draws fire lateness and throughput; without them there is none.
		fmt.Fprintf(e.stdout, "\nwrote %s\n", c.JSONOut)
		return nil
	}
	if err := bench.WritePNG(c.PNGOut, res); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "\nwrote %s and %s\n", c.JSONOut, c.PNGOut)
	return nil
}

// serveBinary is the natsdelay binary whose serve the phases run as a
// process of its own: --serve-binary, else natsdelay next to this binary,
// else natsdelay on the PATH.
func (c *benchCmd) serveBinary() (string, error) {
	if c.ServeBinary != "" {
		return c.ServeBinary, nil
	}
	if exe, err := os.Executable(); err == nil {
		next := filepath.Join(filepath.Dir(exe), "natsdelay")
		if fi, err := os.Stat(next); err == nil && !fi.IsDir() {
			return next, nil
		}
	}
	if p, err := exec.LookPath("natsdelay"); err == nil {
		return p, nil
	}
	return "", usage.Wrap(errors.New("no natsdelay binary next to natsdelay-bench nor on the PATH: build both (go build -o bin/ ./cmd/natsdelay ./cmd/natsdelay-bench), or name one with --serve-binary"))
}

// startCPUProfile profiles the process into file until stop is called.
func startCPUProfile(file string) (stop func() error, err error) {
	f, err := os.Create(file)
	if err != nil {
		return nil, fmt.Errorf("bench: --cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		return nil, errors.Join(fmt.Errorf("bench: --cpuprofile: %w", err), f.Close())
	}
	return func() error {
		pprof.StopCPUProfile()
		return f.Close()
	}, nil
}

// isTerminal reports whether f is a character device, as a terminal is.
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// closeMachinesOnSignal tears down the nodes' cgroups and tmpfs mounts
// when SIGINT or SIGTERM stops the bench, so that none outlives it, and
// exits as a shell reports a signal. stop ends the watch and waits for it.
func closeMachinesOnSignal(e *env) (stop func()) {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		select {
		case sig := <-sigs:
			if err := bench.CloseMachines(); err != nil {
				e.log.Error("tear down the nodes' cgroups and tmpfs mounts", "err", err)
			}
			os.Exit(128 + int(sig.(syscall.Signal)))
		case <-quit:
		}
	}()
	return func() {
		signal.Stop(sigs)
		close(quit)
		<-done
	}
}
