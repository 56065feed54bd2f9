package bench

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"
)

// ErrInvalidConfig is wrapped by every error of Config.Validate.
var ErrInvalidConfig = errors.New("bench: invalid config")

// Config sets every size of a run. A zero field means the default shown by
// DefaultConfig; Quick shows the tiny sizes of a smoke run.
type Config struct {
	// NATSURL is the server to use; it must have JetStream enabled. Empty
	// starts an embedded nats-server with JetStream on a temp dir.
	NATSURL string
	// Dir holds the natsdelay data dirs and the embedded server's JetStream
	// store. Empty makes a temp dir, removed at the end.
	Dir string
	// JSSyncAlways makes the embedded server fsync every JetStream write,
	// as natsdelay does for every ingest batch. JetStream's default syncs
	// every two minutes, which is the fair default to measure it with but
	// not the same durability.
	JSSyncAlways bool

	// PayloadSize is the payload of every message, in bytes. Default 256.
	PayloadSize int
	// IngestMsgs is how many messages each ingest run schedules. Default 100,000.
	IngestMsgs int
	// Outstanding bounds the unanswered messages of a pipelined run. Default 4096.
	Outstanding int
	// Requesters is the number of concurrent synchronous requesters. Default 64.
	Requesters int

	// FireMsgs is how many messages each fire run schedules. Default 50,000.
	FireMsgs int
	// FireRates are the offered rates, in msgs/s: FireMsgs fall due
	// uniformly over FireMsgs/rate. Default 25,000 and 100,000.
	FireRates []float64
	// FireLead is how far ahead of the first fire time the schedule starts,
	// so that ingest is done before anything is due. Default 1s plus the
	// time to ingest FireMsgs at 20,000 msgs/s.
	FireLead time.Duration
	// FireRecurring is how many recurring schedules, every second on a
	// subject each apart from the measured one, natsdelay holds during its
	// fire runs, delivered and ACKed beside the measured messages: with
	// one or more, the runs measure the cost of planning occurrences ahead
	// among a stream of one-shot messages. Default 0.
	FireRecurring int

	// EndToEndMsgs is how many due-now messages the end-to-end run
	// schedules, delivers and ACKs. Default 100,000.
	EndToEndMsgs int

	// ScalePending is the number of pending future messages of the scale
	// and expiry runs. Default 1,000,000.
	ScalePending int
	// ScaleSubjects is the number of distinct subjects the ScalePending
	// messages are spread over, round robin. Default 1.
	ScaleSubjects int
	// ScaleDue is the size of the due set whose lateness the scale run
	// measures with and without ScalePending pending. Default 2,000.
	ScaleDue int
	// ScaleDueRuns is how many times the due set is timed in each case;
	// the run with the median p99 is reported, beside every run's p99.
	// Default 5.
	ScaleDueRuns int
	// ExpiredMsgs is how many expired messages the expiry run adds. Default 10,000.
	ExpiredMsgs int
	// ExpiryInterval is natsdelay's janitor interval. Default 1s, as serve's.
	ExpiryInterval time.Duration

	// Waves is the number of waves of the waves run: each schedules one
	// due-now message on each of WaveSubjects subjects never used before,
	// drains them, and reads natsdelay's memory. Default 3.
	Waves int
	// WaveSubjects is the number of subjects, one message each, of every
	// wave. Default 20,000.
	WaveSubjects int

	// RecurSchedules is the number of recurring schedules, one subject
	// each, that the recurring run keeps in natsdelay and in JetStream.
	// Default 10,000.
	RecurSchedules int
	// RecurEvery is their interval; JetStream takes no less than 1s.
	// Default 1s.
	RecurEvery time.Duration
	// RecurDuration is how long the recurring run measures them. Default 30s.
	RecurDuration time.Duration
	// RecurIdle is the number of schedules, first due months away, whose
	// memory and CPU cost the recurring run measures. Default 100,000.
	RecurIdle int
	// RecurIdleFor is the idle interval whose CPU time it measures with
	// them. Default 5s.
	RecurIdleFor time.Duration
	// FlowMsgs is how many messages the flow phase fires, at FlowRate
	// msgs/s, on an unlimited subject: alone, then beside a paused subject
	// with FlowPaused messages due and a rate-limited one with FlowRated
	// due. Defaults 50,000 at 25,000/s, beside 1,000,000 and 10,000.
	FlowMsgs   int
	FlowRate   float64
	FlowPaused int
	FlowRated  int
	// EventsRounds is how many runs of EndToEndMsgs the events phase makes
	// with lifecycle events off, and as many with them on. Default 3.
	EventsRounds int
	// FloorRounds is how many runs of EndToEndMsgs the floor phase makes
	// of natsdelay, of the floor and of the floor without a store. Default
	// 3.
	FloorRounds int
	// FloorCommand runs the floor service (package floor) when given
	// --floor-serve and its config: the bench's own binary. The floor
	// phase needs it.
	FloorCommand []string
	// Failovers is how many times the cluster phase kills the leader of
	// its three-node cluster. Default 5.
	Failovers int

	// Cells is how many cells the cells phase sets beside one, and how
	// many independent nodes (or clusters) it partitions the load over by
	// hand. Default 3.
	Cells int
	// CellNodes is the nodes of each cell: 1, or 3 for a cluster. Default 1.
	CellNodes int
	// CellPartitions is the fleet's --partitions. Default 12.
	CellPartitions int
	// CellRequesters are the counts of synchronous requesters the cells
	// phase ingests with, beside its pipelined publisher. Default 64, 192.
	CellRequesters []int
	// CellSubjects is how many subjects the cells phase's messages are
	// spread over, so that each cell and each partition gets its share.
	// Default 1024.
	CellSubjects int
	// CellWarmup is how many messages each system of the cells phase takes
	// in an untimed run of each mode (every requester count, then the
	// pipelined publisher) before its timed rows, so that no system's
	// first timed row pays for its nodes', the server's or this process's
	// warm-up while the others do not. Default IngestMsgs/4.
	CellWarmup int

	// NodeCPU, if not 0, runs each natsdelay node of the cluster and cells
	// phases in a cgroup of its own with a quota of that many cores (every
	// 10 ms, or the period that makes the quota the kernel's 1 ms minimum),
	// and its data on a tmpfs of its own: as a machine of its own, not a
	// process contending for this machine's cores and disk. It needs root
	// and the cgroup cpu controller.
	NodeCPU float64
	// NodeTmpfs puts each node's data on a tmpfs of its own without a
	// quota; NodeCPU implies it.
	NodeTmpfs bool
	// NodeLogs, if set, is a directory that keeps the whole log of every
	// node the cluster and cells phases start, one file a node named by
	// its set and id; without, only the last 8 KiB of a node that fails
	// are shown.
	NodeLogs string

	// Timeout bounds each wait for replies or deliveries. Default 2m.
	Timeout time.Duration

	// ServiceCommand, if set, is the command line of `natsdelay serve`; the
	// scale and expiry phases then run natsdelay as a child process with
	// it, adding the flags that put it on the run's server and data dir,
	// so the memory they report is natsdelay's alone. Empty runs it in
	// this process, where RSS also counts the nats-server and the clients.
	//
	// NB: ingest, fire and end to end always run natsdelay in this
	// process, beside the embedded server that runs JetStream, so that
	// both systems share one Go scheduler and only the server side
	// differs. As a child, natsdelay's two Ps and the bench's would
	// contend for two cores, which measured as lateness up to several
	// times higher and less stable, for both systems.
	//
	// The waves phase runs natsdelay as the scale phase does.
	ServiceCommand []string
	// IdleRelease, if not 0, is passed to the child process as
	// --idle-release, how long it waits quiet before it hands memory
	// back; the waves phase waits for that. 0 leaves serve's default
	// (10s). The quick preset shortens it so a quick run does not wait
	// out the default after every wave.
	IdleRelease time.Duration
	// OwnProcess makes ingest, fire and end to end run natsdelay as
	// ServiceCommand too, so their CPU time per message is natsdelay's
	// apart from the server's and the clients'. It costs lateness on two
	// cores (see ServiceCommand); it is for measuring cost, not lateness.
	OwnProcess bool
	// TraceFile, if set, receives a runtime execution trace of each of
	// natsdelay's fire runs, from the first schedule to the last delivery:
	// TraceFile itself for the first rate, TraceFile.<rate> for others.
	// natsdelay must run in this process (not OwnProcess) for the trace to
	// show it.
	TraceFile string
	// ServerPID is the process of the nats-server at NATSURL, on this
	// machine; each phase then reports its CPU time apart, so that with
	// OwnProcess the bench process's figure is the clients' alone.
	ServerPID int

	// Phases names the phases to run, among Phases(); empty runs them all.
	Phases []string

	// Progress receives progress bars; nil shows none.
	Progress io.Writer
	// Logger receives logs; nil discards them.
	Logger *slog.Logger
}

// The phases of a run, in the order they run.
const (
	PhaseIngest   = "ingest"
	PhaseFire     = "fire"
	PhaseEndToEnd = "e2e"
	PhaseScale    = "scale" // scale and expiry, which share the filled store
	PhaseWaves    = "waves"
	PhaseRecur    = "recurring"
	// PhaseCluster runs natsdelay as one node and as a cluster of three
	// child processes, and times failovers. It runs only when asked for.
	PhaseCluster = "cluster"
	// PhaseFlow measures the fire lateness of an unlimited subject beside
	// a paused one and a rate-limited one. It runs only when asked for.
	PhaseFlow = "flow"
	// PhaseEvents measures natsdelay's end to end with lifecycle events
	// off and on. It runs only when asked for.
	PhaseEvents = "events"
	// PhaseCells measures natsdelay's ingest on one cell, on several
	// cells of a fleet, and on as many independent nodes the load
	// partitions by hand. It runs only when asked for.
	PhaseCells = "cells"
	// PhaseFloor measures natsdelay's end to end beside the floor service
	// (package floor), each in a process of its own. It runs only when
	// asked for.
	PhaseFloor = "floor"
)

// Phases lists every phase in the order a run takes them.
func Phases() []string {
	return []string{PhaseIngest, PhaseFire, PhaseEndToEnd, PhaseScale, PhaseWaves, PhaseRecur, PhaseFlow, PhaseEvents, PhaseFloor, PhaseCluster, PhaseCells}
}

// runs reports whether phase is one the config asks for.
func (c Config) runs(phase string) bool {
	if phase == PhaseCluster || phase == PhaseFlow || phase == PhaseEvents || phase == PhaseFloor || phase == PhaseCells {
		return slices.Contains(c.Phases, phase)
	}
	return len(c.Phases) == 0 || slices.Contains(c.Phases, phase)
}

// DefaultConfig returns the default sizes.
func DefaultConfig() Config {
	return Config{
		PayloadSize:    256,
		IngestMsgs:     100_000,
		Outstanding:    4096,
		Requesters:     64,
		FireMsgs:       50_000,
		FireRates:      []float64{25_000, 100_000},
		EndToEndMsgs:   100_000,
		ScalePending:   1_000_000,
		ScaleSubjects:  1,
		ScaleDue:       2_000,
		ScaleDueRuns:   5,
		ExpiredMsgs:    10_000,
		ExpiryInterval: time.Second,
		Waves:          3,
		WaveSubjects:   20_000,
		RecurSchedules: 10_000,
		RecurEvery:     time.Second,
		RecurDuration:  30 * time.Second,
		RecurIdle:      100_000,
		RecurIdleFor:   5 * time.Second,
		FlowMsgs:       50_000,
		FlowRate:       25_000,
		FlowPaused:     1_000_000,
		FlowRated:      10_000,
		EventsRounds:   3,
		FloorRounds:    3,
		Failovers:      5,
		Timeout:        2 * time.Minute,
	}
}

// QuickTakes is how long a run of Quick's sizes takes on two cores, as
// --help and docs/performance.md say: most of it is the recurring run,
// whose window and grace are waited out for each system, and the scale
// run's settling.
const QuickTakes = "about 30 s"

// Quick returns tiny sizes that run end to end in QuickTakes.
func Quick() Config {
	return Config{
		PayloadSize:    256,
		IngestMsgs:     2_000,
		Outstanding:    256,
		Requesters:     8,
		FireMsgs:       1_000,
		FireRates:      []float64{2_000, 5_000},
		FireLead:       300 * time.Millisecond,
		EndToEndMsgs:   2_000,
		ScalePending:   5_000,
		ScaleSubjects:  100,
		ScaleDue:       200,
		ScaleDueRuns:   2,
		ExpiredMsgs:    500,
		ExpiryInterval: 100 * time.Millisecond,
		Waves:          2,
		// Enough writes for the service to hand memory back after
		// each wave (see core.IdleReleaseMinWrites), so a quick run
		// shows the release too.
		WaveSubjects:   2_000,
		IdleRelease:    500 * time.Millisecond,
		RecurSchedules: 20,
		RecurEvery:     time.Second,
		RecurDuration:  2 * time.Second,
		RecurIdle:      500,
		RecurIdleFor:   500 * time.Millisecond,
		FlowMsgs:       5_000,
		FlowRate:       5_000,
		FlowPaused:     20_000,
		FlowRated:      1_000,
		EventsRounds:   1,
		FloorRounds:    1,
		CellSubjects:   256,
		Failovers:      1,
		Timeout:        30 * time.Second,
	}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	def := func(v *int, dv int) {
		if *v == 0 {
			*v = dv
		}
	}
	def(&c.PayloadSize, d.PayloadSize)
	def(&c.IngestMsgs, d.IngestMsgs)
	def(&c.Outstanding, d.Outstanding)
	def(&c.Requesters, d.Requesters)
	def(&c.FireMsgs, d.FireMsgs)
	def(&c.EndToEndMsgs, d.EndToEndMsgs)
	def(&c.ScalePending, d.ScalePending)
	def(&c.ScaleSubjects, d.ScaleSubjects)
	def(&c.ScaleDue, d.ScaleDue)
	def(&c.ScaleDueRuns, d.ScaleDueRuns)
	def(&c.ExpiredMsgs, d.ExpiredMsgs)
	def(&c.Waves, d.Waves)
	def(&c.Failovers, d.Failovers)
	def(&c.EventsRounds, d.EventsRounds)
	def(&c.FloorRounds, d.FloorRounds)
	def(&c.FlowMsgs, d.FlowMsgs)
	def(&c.FlowPaused, d.FlowPaused)
	def(&c.FlowRated, d.FlowRated)
	c.FlowRate = cmp.Or(c.FlowRate, d.FlowRate)
	def(&c.WaveSubjects, d.WaveSubjects)
	def(&c.RecurSchedules, d.RecurSchedules)
	def(&c.RecurIdle, d.RecurIdle)
	for _, f := range []struct{ v, dv *time.Duration }{
		{&c.RecurEvery, &d.RecurEvery}, {&c.RecurDuration, &d.RecurDuration}, {&c.RecurIdleFor, &d.RecurIdleFor},
		{&c.IdleRelease, &d.IdleRelease},
	} {
		if *f.v == 0 {
			*f.v = *f.dv
		}
	}
	if len(c.FireRates) == 0 {
		c.FireRates = d.FireRates
	}
	c.FireRates = append([]float64(nil), c.FireRates...)
	if c.FireLead == 0 {
		c.FireLead = time.Second + time.Duration(float64(c.FireMsgs)/20_000*float64(time.Second))
	}
	c.ExpiryInterval = cmp.Or(c.ExpiryInterval, d.ExpiryInterval)
	c.Timeout = cmp.Or(c.Timeout, d.Timeout)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	def(&c.Cells, 3)
	def(&c.CellNodes, 1)
	def(&c.CellPartitions, 12)
	def(&c.CellSubjects, 1024)
	def(&c.CellWarmup, max(c.IngestMsgs/4, 1))
	if len(c.CellRequesters) == 0 {
		c.CellRequesters = []int{64, 192}
	}
	c.CellRequesters = slices.Clone(c.CellRequesters)
	c.Phases = slices.Clone(c.Phases)
	c.ServiceCommand = slices.Clone(c.ServiceCommand)
	return c
}

// Validate reports every bad field at once.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...))
	}
	for _, f := range []struct {
		name string
		v    int
	}{
		{"PayloadSize", c.PayloadSize}, {"IngestMsgs", c.IngestMsgs}, {"Outstanding", c.Outstanding},
		{"Requesters", c.Requesters}, {"FireMsgs", c.FireMsgs}, {"FireRecurring", c.FireRecurring}, {"EndToEndMsgs", c.EndToEndMsgs},
		{"ScalePending", c.ScalePending}, {"ScaleSubjects", c.ScaleSubjects}, {"ScaleDue", c.ScaleDue},
		{"ScaleDueRuns", c.ScaleDueRuns},
		{"ExpiredMsgs", c.ExpiredMsgs}, {"Waves", c.Waves}, {"WaveSubjects", c.WaveSubjects},
		{"RecurSchedules", c.RecurSchedules}, {"RecurIdle", c.RecurIdle},
		{"Failovers", c.Failovers}, {"EventsRounds", c.EventsRounds}, {"FloorRounds", c.FloorRounds}, {"Cells", c.Cells}, {"CellPartitions", c.CellPartitions}, {"CellSubjects", c.CellSubjects}, {"CellWarmup", c.CellWarmup}, {"FlowMsgs", c.FlowMsgs}, {"FlowPaused", c.FlowPaused}, {"FlowRated", c.FlowRated},
	} {
		if f.v < 0 {
			bad("%s (%d) must be > 0", f.name, f.v)
		}
	}
	if d := c.withDefaults(); d.ScaleSubjects > 0 && d.ScaleSubjects > d.ScalePending {
		bad("ScaleSubjects (%d) must be at most ScalePending (%d)", d.ScaleSubjects, d.ScalePending)
	}
	if c.FlowRate < 0 {
		bad("FlowRate (%v) must be > 0", c.FlowRate)
	}
	for i, r := range c.FireRates {
		if !(r > 0) {
			bad("FireRates[%d] (%v) must be > 0", i, r)
		}
	}
	for _, f := range []struct {
		name string
		v    time.Duration
	}{{"FireLead", c.FireLead}, {"ExpiryInterval", c.ExpiryInterval}, {"Timeout", c.Timeout},
		{"RecurDuration", c.RecurDuration}, {"RecurIdleFor", c.RecurIdleFor}} {
		if f.v < 0 {
			bad("%s (%v) must be > 0", f.name, f.v)
		}
	}
	// JetStream refuses "@every" under a second, and the run compares
	// the two systems on the same schedules.
	if c.RecurEvery != 0 && (c.RecurEvery < time.Second || c.RecurEvery%time.Second != 0) {
		bad("RecurEvery (%v) must be a whole number of seconds, at least 1s, as JetStream's @every takes", c.RecurEvery)
	}
	if c.OwnProcess && len(c.ServiceCommand) == 0 {
		bad("OwnProcess needs ServiceCommand, the command line of natsdelay serve")
	}
	if slices.Contains(c.Phases, PhaseFloor) && (!c.OwnProcess || len(c.FloorCommand) == 0) {
		bad("the floor phase compares processes: it needs OwnProcess and FloorCommand")
	}
	if c.TraceFile != "" && c.OwnProcess {
		bad("TraceFile traces this process: it cannot show natsdelay with OwnProcess")
	}
	if c.CellNodes != 0 && c.CellNodes != 1 && c.CellNodes != 3 {
		bad("CellNodes (%d) must be 1 or 3", c.CellNodes)
	}
	for _, r := range c.CellRequesters {
		if r <= 0 {
			bad("CellRequesters (%d) must be > 0", r)
		}
	}
	if c.NodeCPU != 0 {
		if _, err := limitFor(c.NodeCPU); err != nil {
			bad("NodeCPU: %v", err)
		}
	}
	if c.ServerPID < 0 || (c.ServerPID > 0 && c.NATSURL == "") {
		bad("ServerPID (%d) must name the process of the server at NATSURL", c.ServerPID)
	}
	for _, ph := range c.Phases {
		if !slices.Contains(Phases(), ph) {
			bad("Phases: %q is not one of %s", ph, strings.Join(Phases(), ", "))
		}
	}
	return errors.Join(errs...)
}
