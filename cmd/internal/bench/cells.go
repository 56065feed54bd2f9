package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge/fleet"
	"github.com/natsdelay/natsdelay/bridge/wire"
)

// CellsResult is what the cells phase measured: ingest into one cell,
// into a fleet of Cells cells, and into the hand-partitioned ideal, Cells
// independent cells the requesters pick by the subject's hash, all at
// the same per-node machine in the same run.
type CellsResult struct {
	Cells      int `json:"cells"`
	CellNodes  int `json:"cell_nodes"`
	Partitions int `json:"partitions"`
	Subjects   int `json:"subjects"`
	// WarmupMsgs is the messages of each system's untimed run of each
	// mode before its timed rows (CellWarmup).
	WarmupMsgs int `json:"warmup_msgs"`
	// Fleet reports whether the natsdelay binary runs cells (serve
	// --cell); without, the fleet's rows are not measured.
	Fleet    bool        `json:"fleet"`
	Machines MachineNote `json:"machines"`
	// Ingest has a row per system (CellsOne, CellsFleet, CellsIdeal) and
	// mode ("pipelined", or "<n> requesters"); CPU.Service sums the
	// system's natsdelay processes.
	Ingest []IngestResult `json:"ingest"`
	// EndToEnd has a row per system: IngestMsgs messages due at once,
	// scheduled by the pipelined publisher, delivered to a consumer that
	// ACKs each, timed until every ACK is applied (INFO's pending count
	// back where it was); CPU.Service sums the system's processes.
	EndToEnd []EndToEndResult `json:"end_to_end"`
	// ThrottledPct is, per system, the share of its nodes' quota periods
	// in which a node used up its quota and was held back; absent
	// without a quota.
	ThrottledPct map[string]float64 `json:"throttled_pct,omitempty"`
	// Stored is, per system, how many messages its pending count rose by
	// over its timed runs: every message answered with OK, once each.
	Stored map[string]uint64 `json:"stored"`
	// Warmed is, per system, how many messages its pending count rose by
	// over its untimed warm-up: every mode's WarmupMsgs, once each.
	Warmed map[string]uint64 `json:"warmed"`
	// FleetCells is each cell of the fleet, as it answered CELLS after
	// the fleet's runs: a fleet whose cells share the load has every
	// cell owning partitions and holding messages.
	FleetCells []FleetCell `json:"fleet_cells,omitempty"`
}

// FleetCell is a cell of the fleet: how many of the fleet's partitions it
// owns and how many messages it holds pending.
type FleetCell struct {
	Cell       string `json:"cell"`
	Partitions int    `json:"partitions"`
	Pending    uint64 `json:"pending"`
}

// The systems of the cells phase.
const (
	CellsOne   = "one cell"
	CellsFleet = "fleet"
	CellsIdeal = "ideal"
)

// refusals accepts natsdelay's ingest replies as delayOK does, and keeps
// the first refusal's error, so that a run that fails says why.
type refusals struct {
	first atomic.Pointer[string]
}

func (r *refusals) ok(m *nats.Msg) bool {
	if delayOK(m) {
		return true
	}
	why := "an empty reply"
	if err := wire.ParseError(m.Header, m.Data); err != nil {
		why = err.Error()
	}
	r.first.CompareAndSwap(nil, &why)
	return false
}

// String is the first refusal, or "none".
func (r *refusals) String() string {
	if p := r.first.Load(); p != nil {
		return *p
	}
	return "none"
}

// cellsLoad is the subjects of the cells phase's messages and, for the
// ideal, the ingest prefix each is sent to.
type cellsLoad struct {
	e        *env
	subjects []string
	ingest   []string // per subject; the one prefix of a cell or a fleet, or its partition's
}

// newCellsLoad spreads the messages over CellSubjects subjects; with
// parts > 0, subject s goes to prefix[xxhash64(s) mod parts], as a
// publisher that knows the partitions would send it.
func (e *env) newCellsLoad(parts int, prefix func(part int) string) *cellsLoad {
	l := &cellsLoad{e: e}
	for i := range e.cfg.CellSubjects {
		s := e.plain + ".cells.s" + strconv.Itoa(i)
		l.subjects = append(l.subjects, s)
		l.ingest = append(l.ingest, prefix(partitionOf(s, parts)))
	}
	return l
}

// partitionOf is the partition of subject among parts: xxhash64 of the
// subject, mod parts.
func partitionOf(subject string, parts int) int {
	return int(xxhash.Sum64String(subject) % uint64(parts))
}

// msg is the message i of a run: on subject i mod subjects, due in an
// hour so that none fires.
func (l *cellsLoad) msg(i int) *nats.Msg {
	j := i % len(l.subjects)
	h := nats.Header{}
	h.Set(wire.HeaderDelay, "1h")
	return &nats.Msg{Subject: l.ingest[j] + "." + l.subjects[j], Header: h, Data: l.e.payload}
}

// due is the message i of an end-to-end run: on the subject of msg(i),
// due now, with the time it is due for the recorder.
func (l *cellsLoad) due(i int) *nats.Msg {
	j := i % len(l.subjects)
	now := time.Now().Truncate(time.Millisecond)
	h := nats.Header{}
	h.Set(wire.HeaderAt, now.UTC().Format(time.RFC3339Nano))
	h.Set(benchFireAt, strconv.FormatInt(now.UnixNano(), 10))
	return &nats.Msg{Subject: l.ingest[j] + "." + l.subjects[j], Header: h, Data: l.e.payload}
}

// consumed is the subjects the load's messages are delivered on.
func (l *cellsLoad) consumed() string { return l.e.plain + ".cells.>" }

// warm sends one message on every subject, again until every one is
// answered with OK: it proves that whatever owns a subject serves before
// a run is timed and, in a fleet, that each cell's partitions are served
// through whichever cell a publish reaches, since a cell that has not
// yet heard of a partition's owner refuses its messages.
func (l *cellsLoad) warm() error {
	var failed int
	var refused refusals
	err := poll(l.e.cfg.Timeout, func() (bool, error) {
		var done atomic.Int64
		var err error
		_, failed, err = requesters(l.e.conns, len(l.subjects), len(l.e.conns), l.e.cfg.Timeout, l.msg, refused.ok, &done)
		return failed == 0, err
	})
	if err != nil && failed > 0 {
		err = fmt.Errorf("bench: %d of %d messages of the warm-up still refused (the first: %s): %w", failed, len(l.subjects), &refused, err)
	}
	return err
}

// uncovered is the first of parts partitions that none of the load's
// subjects falls in, or -1: a warm-up that misses a partition does not
// prove that its owner serves.
func (l *cellsLoad) uncovered(parts int) int {
	hit := make([]bool, parts)
	for _, s := range l.subjects {
		hit[partitionOf(s, parts)] = true
	}
	return slices.Index(hit, false)
}

// runCells measures ingest into one cell, a fleet and the ideal.
func (e *env) runCells(ctx context.Context) (*CellsResult, error) {
	fleet, err := supportsCells(e.cfg.ServiceCommand)
	if err != nil {
		return nil, err
	}
	c := e.cfg
	cr := &CellsResult{Cells: c.Cells, CellNodes: c.CellNodes, Partitions: c.CellPartitions, Subjects: c.CellSubjects,
		WarmupMsgs: c.CellWarmup, Fleet: fleet, Machines: c.machineNote()}
	systems := []string{CellsOne, CellsFleet, CellsIdeal}
	if !fleet {
		c.Logger.Warn("this natsdelay runs no cells (serve --cell): the fleet is not measured, one cell and the ideal are", "binary", c.ServiceCommand[0])
		systems = []string{CellsOne, CellsIdeal}
	}
	for _, system := range systems {
		if err := ctx.Err(); err != nil {
			return cr, err
		}
		if err := e.cellsSystem(system, fleet, cr); err != nil {
			return cr, fmt.Errorf("bench: cells phase, %s: %w", system, err)
		}
	}
	return cr, nil
}

// cellsSystem starts system's nodes, warms them and times its runs.
func (e *env) cellsSystem(system string, fleet bool, cr *CellsResult) (err error) {
	sets, load, err := e.startCellsSystem(system, fleet)
	defer func() {
		for _, s := range sets {
			err = errors.Join(err, s.close())
		}
	}()
	if err != nil {
		return err
	}
	if err := load.warm(); err != nil {
		return err
	}
	modes := []int{0} // 0: the pipelined publisher
	modes = append(e.cfg.CellRequesters[:len(e.cfg.CellRequesters):len(e.cfg.CellRequesters)], modes...)
	warm0, err := storedSettled(system, sets)
	if err != nil {
		return err
	}
	if err := e.cellsWarmup(system, modes, load); err != nil {
		return err
	}
	stored0, err := storedSettled(system, sets)
	if err != nil {
		return err
	}
	if cr.Warmed == nil {
		cr.Warmed = map[string]uint64{}
	}
	cr.Warmed[system] = stored0 - warm0
	cpu := func() float64 {
		var sum float64
		for _, s := range sets {
			c := s.cpu()
			if c < 0 {
				return -1
			}
			sum += c
		}
		return sum
	}
	for _, r := range modes {
		row, err := e.cellsRun(system, r, load, cpu)
		if err != nil {
			return err
		}
		cr.Ingest = append(cr.Ingest, row)
	}
	stored1, err := storedSettled(system, sets)
	if err != nil {
		return err
	}
	if cr.Stored == nil {
		cr.Stored = map[string]uint64{}
	}
	cr.Stored[system] = stored1 - stored0
	e2e, err := e.cellsEndToEnd(system, sets, load, cpu, stored1)
	if err != nil {
		return err
	}
	cr.EndToEnd = append(cr.EndToEnd, e2e)
	noteThrottled(system, sets, cr)
	if system == CellsFleet {
		return e.noteFleetCells(cr)
	}
	return nil
}

// cellsWarmup runs each of modes (r synchronous requesters, or the
// pipelined publisher for 0) untimed with CellWarmup messages of load, in
// the order the timed rows run them. Each system of the phase is timed
// after the same warm-up: its nodes' heaps, stores and connections, and
// the bench's and the server's, are past their first messages when its
// first timed row starts, whichever system runs first. A refusal is
// logged, as in a timed row; an error (no reply within the timeout)
// stops the phase.
func (e *env) cellsWarmup(system string, modes []int, load *cellsLoad) error {
	n := e.cfg.CellWarmup
	for _, r := range modes {
		var failed int
		var err error
		var refused refusals
		if r == 0 {
			_, failed, err = pipelined(e.conns[0], n, e.cfg.Outstanding, e.cfg.Timeout, load.msg, refused.ok, new(atomic.Int64))
		} else {
			_, failed, err = requesters(e.conns, n, r, e.cfg.Timeout, load.msg, refused.ok, new(atomic.Int64))
		}
		if err != nil {
			return fmt.Errorf("bench: warm-up with %d requesters (0: pipelined): %w", r, err)
		}
		if failed > 0 {
			e.cfg.Logger.Warn("cells warm-up: messages refused", "system", system, "requesters", r, "refused", failed, "first", refused.String())
		}
	}
	return nil
}

// noteFleetCells notes what each cell of the fleet answers to CELLS.
func (e *env) noteFleetCells(cr *CellsResult) error {
	var heard []fleet.Status
	err := poll(e.cfg.Timeout, func() (bool, error) {
		heard = fleet.GatherCells(e.conns[0], 250*time.Millisecond)
		return len(heard) == e.cfg.Cells, nil
	})
	if err != nil {
		return fmt.Errorf("bench: %d of the fleet's %d cells answer: %w", len(heard), e.cfg.Cells, err)
	}
	slices.SortFunc(heard, func(a, b fleet.Status) int { return strings.Compare(a.Cell, b.Cell) })
	for _, st := range heard {
		cr.FleetCells = append(cr.FleetCells, FleetCell{Cell: st.Cell, Partitions: fleet.Count(st.Owned), Pending: st.Pending})
	}
	return nil
}

// noteThrottled notes the share of the quota periods of system's nodes
// that were throttled, where they have a quota.
func noteThrottled(system string, sets []*nodeSet, cr *CellsResult) {
	var periods, throttled int64
	for _, s := range sets {
		p, t := s.throttled()
		periods, throttled = periods+p, throttled+t
	}
	if periods > 0 {
		if cr.ThrottledPct == nil {
			cr.ThrottledPct = map[string]float64{}
		}
		cr.ThrottledPct[system] = 100 * float64(throttled) / float64(periods)
	}
}

// storedSettled is storedBy, asked again for up to the bench's timeout
// while it fails: a fleet of one cell that is a cluster answers no INFO
// while the cell is between leaders, and a fleet's INFO that does not
// count a cell (pendingOf) is no count.
func storedSettled(system string, sets []*nodeSet) (uint64, error) {
	var n uint64
	var last error
	err := pollEvery(50*time.Millisecond, sets[0].e.cfg.Timeout, func() (bool, error) {
		n, last = storedBy(system, sets)
		return last == nil, nil
	})
	if err != nil {
		return 0, fmt.Errorf("%w: %w", last, err)
	}
	return n, nil
}

// storedBy is how many messages system's nodes hold pending: the sum of
// its sets' INFO, but a fleet's INFO alone, since any of its cells
// answers for all of them.
func storedBy(system string, sets []*nodeSet) (uint64, error) {
	if system == CellsFleet {
		sets = sets[:1]
	}
	var sum uint64
	for _, s := range sets {
		data, err := s.client(s.e.cfg.Timeout).Request(context.Background(), wire.VerbInfo, nil)
		if err != nil {
			return 0, fmt.Errorf("bench: INFO: %w", err)
		}
		n, err := pendingOf(data)
		if err != nil {
			return 0, err
		}
		sum += n
	}
	return sum, nil
}

// pendingOf is the pending count of an INFO answer, or an error where the
// answer does not count every message: a fleet's INFO sums the cells
// that answered it, so a cell between leaders or not heard from adds
// nothing, and a node whose store is down answers zero counts. Its
// callers ask again.
func pendingOf(data []byte) (uint64, error) {
	var info fleet.Info
	if err := json.Unmarshal(data, &info); err != nil {
		return 0, fmt.Errorf("bench: INFO: %w", err)
	}
	for _, c := range info.Fleet.Cells {
		if c.Error != "" || c.Counts == nil {
			return 0, fmt.Errorf("bench: INFO: cell %q is not counted: %s", c.Cell, c.Error)
		}
	}
	if info.Storage != "ok" {
		return 0, fmt.Errorf("bench: INFO: storage %q: no counts", info.Storage)
	}
	return info.Counts.Pending, nil
}

// cellsEndToEnd times IngestMsgs messages due at once through system: the
// pipelined publisher schedules them, a consumer on the load's subjects
// takes and ACKs each delivery, and the run ends when the system's
// pending count is back at pending: every message it took delivered and
// its ACK applied. Messages refused (a 503 while a cell has no leader)
// are counted, not sent again.
func (e *env) cellsEndToEnd(system string, sets []*nodeSet, load *cellsLoad, cpu func() float64, pending uint64) (EndToEndResult, error) {
	n := e.cfg.IngestMsgs
	rec := newRecorder(n)
	stop, err := e.ackingConsumer("bench-cells-consumer", load.consumed(), func(m *nats.Msg, at time.Time) { rec.recordAt(m.Header, at) })
	if err != nil {
		return EndToEndResult{}, err
	}
	defer func() { _ = stop() }()
	p := startProgress(e.cfg.Progress, "cells end to end "+system, n, &rec.count)
	defer p.done()
	mark, svc0 := e.markCPU(0), cpu()
	start := time.Now()
	var refused refusals
	_, failed, err := pipelined(e.conns[0], n, e.cfg.Outstanding, e.cfg.Timeout, load.due, refused.ok, new(atomic.Int64))
	if err != nil {
		return EndToEndResult{}, err
	}
	if failed > 0 {
		// A cell between leaders refuses with a retryable 503; the run
		// counts them, as the ingest rows do, and times what was taken.
		e.cfg.Logger.Warn("cells end to end: schedules refused", "system", system, "refused", failed, "first", refused.String())
	}
	// The run ends when what was stored has been delivered and every ACK
	// applied: the pending count is back where it was. NB: every 20ms,
	// not poll's millisecond: each check is an INFO that the nodes, on
	// their quota, would otherwise spend the run answering; one that
	// fails (a cell between leaders) is asked again.
	var now uint64
	var infoErr error
	err = pollEvery(20*time.Millisecond, e.cfg.Timeout, func() (bool, error) {
		now, infoErr = storedBy(system, sets)
		return infoErr == nil && now == pending, nil
	})
	if err != nil {
		return EndToEndResult{}, fmt.Errorf("bench: end to end: %d pending, want the %d before the run, every delivery ACKed (last INFO error: %v): %w", now, pending, infoErr, err)
	}
	el := time.Since(start)
	used := mark.since()
	if svc1 := cpu(); svc0 >= 0 && svc1 >= 0 {
		used.Service = svc1 - svc0
	}
	// The consumer counts a delivery just after its ACK, so the last may
	// be counted a moment after the ACK is applied.
	_ = poll(5*time.Second, func() (bool, error) { return rec.count.Load() >= int64(n-failed), nil })
	d := rec.result(system, 0).Delivered
	return EndToEndResult{System: system, Msgs: n, Refused: failed, Delivered: d, Seconds: el.Seconds(), Rate: float64(d) / el.Seconds(), CPU: used}, nil
}

// cellsRun times IngestMsgs messages of load: by r synchronous
// requesters, or pipelined for r == 0.
func (e *env) cellsRun(system string, r int, load *cellsLoad, cpu func() float64) (IngestResult, error) {
	mode := "pipelined"
	if r > 0 {
		mode = strconv.Itoa(r) + " requesters"
	}
	var done atomic.Int64
	p := startProgress(e.cfg.Progress, "cells ingest "+system+" "+mode, e.cfg.IngestMsgs, &done)
	mark, svc0 := e.markCPU(0), cpu()
	var el time.Duration
	var failed int
	var err error
	var refused refusals
	if r == 0 {
		el, failed, err = pipelined(e.conns[0], e.cfg.IngestMsgs, e.cfg.Outstanding, e.cfg.Timeout, load.msg, refused.ok, &done)
	} else {
		el, failed, err = requesters(e.conns, e.cfg.IngestMsgs, r, e.cfg.Timeout, load.msg, refused.ok, &done)
	}
	if failed > 0 {
		e.cfg.Logger.Warn("cells ingest: messages refused", "system", system, "mode", mode, "refused", failed, "first", refused.String())
	}
	used := mark.since()
	if svc1 := cpu(); svc0 >= 0 && svc1 >= 0 {
		used.Service = svc1 - svc0
	}
	p.done()
	return ingestResult(system, mode, e.cfg.IngestMsgs, failed, el, used), err
}

// startCellsSystem starts the nodes of system: one cell (a cell of a
// fleet where the binary runs cells, else a plain node or cluster), Cells
// cells of one fleet on the bench's prefixes, or Cells independent ones
// on prefixes of their own. It returns what it started also on error.
func (e *env) startCellsSystem(system string, fleet bool) ([]*nodeSet, *cellsLoad, error) {
	c := e.cfg
	own := prefixes{e.ingest, e.ack, e.api}
	var specs []setSpec
	load := e.newCellsLoad(1, func(int) string { return e.ingest })
	var founders []string // the cells of a fleet, c1 to c<n>
	switch system {
	case CellsOne:
		if fleet {
			founders = cellNames(1)
		}
		specs = append(specs, e.cellSpec(system, 0, own, founders))
	case CellsFleet:
		founders = cellNames(c.Cells)
		for i := range c.Cells {
			specs = append(specs, e.cellSpec(system, i, own, founders))
		}
	case CellsIdeal:
		for i := range c.Cells {
			specs = append(specs, e.cellSpec(system, i, e.partPrefixes(i), nil))
		}
		// NB: each subject goes to the node whose cell owns its
		// partition in the fleet, so that both carry the same share of
		// the load on each node: with xxhash64 mod Cells, the ideal's
		// busiest node took a share of its own, which in the
		// synchronous modes bounds the rate, and the ratio of the two
		// moved with the difference between two random spreads.
		node := idealNodes(c.Cells, c.CellPartitions)
		load = e.newCellsLoad(c.CellPartitions, func(part int) string { return e.partPrefixes(node[part]).ingest })
	}
	var sets []*nodeSet
	for _, spec := range specs {
		s, err := e.startSet(spec)
		if err != nil {
			return sets, load, err
		}
		sets = append(sets, s)
	}
	if founders != nil {
		return sets, load, e.waitFleet(founders, load)
	}
	return sets, load, nil
}

// idealNodes maps each of parts partitions to the node of the ideal that
// takes it: the index of the cell that owns it in a fleet of cells
// founded together (fleet.Split).
func idealNodes(cells, parts int) []int {
	node := make([]int, parts)
	names := cellNames(cells)
	owned := fleet.Split(names, parts)
	for i, c := range names {
		for _, r := range owned[c] {
			for p := r.From; p <= r.To; p++ {
				node[p] = i
			}
		}
	}
	return node
}

// cellNames are the names of a fleet's n cells: c1 to c<n>.
func cellNames(n int) []string {
	var names []string
	for i := range n {
		names = append(names, "c"+strconv.Itoa(i+1))
	}
	return names
}

// cellSpec is cell i of system: CellNodes nodes on pre, as cell c<i+1>
// of the fleet that founders create, of CellPartitions partitions, where
// founders are given. Every cell of a fleet gets the same founders, so
// that each owns its share of the partitions from the start; a cell
// started without them would find no fleet and create one of its own.
func (e *env) cellSpec(system string, i int, pre prefixes, founders []string) setSpec {
	name := "c" + strconv.Itoa(i+1)
	spec := setSpec{n: e.cfg.CellNodes, dir: filepath.Join(e.dir, "cells", strings.ReplaceAll(system, " ", "-"), name), prefixes: pre}
	if founders != nil {
		spec.extra = func(int) []string {
			return []string{"--cell", name, "--partitions", strconv.Itoa(e.cfg.CellPartitions),
				"--fleet-cells", strings.Join(founders, ",")}
		}
	}
	return spec
}

// waitFleet waits until every one of founders answers the fleet's CELLS
// request, serving and telling the fleet its partitions, and checks that
// the load's subjects fall in every partition, so that the warm-up that
// follows reaches each cell's.
func (e *env) waitFleet(founders []string, load *cellsLoad) error {
	if p := load.uncovered(e.cfg.CellPartitions); p >= 0 {
		return fmt.Errorf("%w: none of the %d subjects falls in partition %d of %d: raise CellSubjects", ErrInvalidConfig, len(load.subjects), p, e.cfg.CellPartitions)
	}
	var heard []fleet.Status
	err := poll(e.cfg.Timeout, func() (bool, error) {
		heard = fleet.GatherCells(e.conns[0], 250*time.Millisecond)
		return len(heard) == len(founders), nil
	})
	if err != nil {
		return fmt.Errorf("bench: %d of the fleet's %d cells answer: %w", len(heard), len(founders), err)
	}
	return nil
}

// partPrefixes are the prefixes of the ideal's independent cell part.
func (e *env) partPrefixes(part int) prefixes {
	p := "P" + strconv.Itoa(part)
	return prefixes{
		ingest: e.ingest + "_" + strings.ToLower(p),
		ack:    "$BENCH." + e.id + "." + p + ".ACK",
		api:    "$BENCH." + e.id + "." + p + ".API",
	}
}

// supportsCells reports whether the serve of command runs cells: its
// help names a --cell flag.
func supportsCells(command []string) (bool, error) {
	if len(command) == 0 {
		return false, fmt.Errorf("%w: the cells phase runs natsdelay serve as child processes: set ServiceCommand", ErrInvalidConfig)
	}
	out, err := exec.Command(command[0], append(command[1:len(command):len(command)], "--help")...).Output()
	if err != nil {
		return false, fmt.Errorf("bench: %s --help: %w", strings.Join(command, " "), err)
	}
	return helpHasCell(string(out)), nil
}

// helpHasCell reports whether a command's help lists the flag --cell
// itself, not only flags that begin with it.
func helpHasCell(help string) bool {
	for _, f := range strings.Fields(help) {
		f = strings.TrimRight(f, ",")
		if f == "--cell" || strings.HasPrefix(f, "--cell=") {
			return true
		}
	}
	return false
}
