package bench

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/nats-io/nats.go"

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
	// Fleet reports whether the natsdelay binary runs cells (serve
	// --cell); without, the fleet's rows are not measured.
	Fleet    bool        `json:"fleet"`
	Machines MachineNote `json:"machines"`
	// Ingest has a row per system (CellsOne, CellsFleet, CellsIdeal) and
	// mode ("pipelined", or "<n> requesters"); CPU.Service sums the
	// system's natsdelay processes.
	Ingest []IngestResult `json:"ingest"`
	// ThrottledPct is, per system, the share of its nodes' quota periods
	// in which a node used up its quota and was held back; absent
	// without a quota.
	ThrottledPct map[string]float64 `json:"throttled_pct,omitempty"`
}

// The systems of the cells phase.
const (
	CellsOne   = "one cell"
	CellsFleet = "fleet"
	CellsIdeal = "ideal"
)

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

// warm sends one message on every subject and waits for every reply: it
// proves that whatever owns a subject serves before a run is timed.
func (l *cellsLoad) warm() error {
	var done atomic.Int64
	_, failed, err := requesters(l.e.conns, len(l.subjects), len(l.e.conns), l.e.cfg.Timeout, l.msg, delayOK, &done)
	if err == nil && failed > 0 {
		err = fmt.Errorf("bench: %d of %d messages of the warm-up refused", failed, len(l.subjects))
	}
	return err
}

// runCells measures ingest into one cell, a fleet and the ideal.
func (e *env) runCells(ctx context.Context) (*CellsResult, error) {
	fleet, err := supportsCells(e.cfg.ServiceCommand)
	if err != nil {
		return nil, err
	}
	c := e.cfg
	cr := &CellsResult{Cells: c.Cells, CellNodes: c.CellNodes, Partitions: c.CellPartitions, Subjects: c.CellSubjects,
		Fleet: fleet, Machines: c.machineNote()}
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
	modes := []int{0} // 0: the pipelined publisher
	modes = append(e.cfg.CellRequesters[:len(e.cfg.CellRequesters):len(e.cfg.CellRequesters)], modes...)
	for _, r := range modes {
		row, err := e.cellsRun(system, r, load, cpu)
		if err != nil {
			return err
		}
		cr.Ingest = append(cr.Ingest, row)
	}
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
	return nil
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
	if r == 0 {
		el, failed, err = pipelined(e.conns[0], e.cfg.IngestMsgs, e.cfg.Outstanding, e.cfg.Timeout, load.msg, delayOK, &done)
	} else {
		el, failed, err = requesters(e.conns, e.cfg.IngestMsgs, r, e.cfg.Timeout, load.msg, delayOK, &done)
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
	switch system {
	case CellsOne:
		specs = append(specs, e.cellSpec(system, 0, own, fleet))
	case CellsFleet:
		for i := range c.Cells {
			specs = append(specs, e.cellSpec(system, i, own, true))
		}
	case CellsIdeal:
		for i := range c.Cells {
			specs = append(specs, e.cellSpec(system, i, e.partPrefixes(i), false))
		}
		load = e.newCellsLoad(c.Cells, func(part int) string { return e.partPrefixes(part).ingest })
	}
	var sets []*nodeSet
	for _, spec := range specs {
		s, err := e.startSet(spec)
		if err != nil {
			return sets, load, err
		}
		sets = append(sets, s)
	}
	return sets, load, nil
}

// cellSpec is cell i of system: CellNodes nodes on pre, as cell c<i+1>
// of a fleet of CellPartitions partitions where asCell.
func (e *env) cellSpec(system string, i int, pre prefixes, asCell bool) setSpec {
	name := "c" + strconv.Itoa(i+1)
	spec := setSpec{n: e.cfg.CellNodes, dir: filepath.Join(e.dir, "cells", strings.ReplaceAll(system, " ", "-"), name), prefixes: pre}
	if asCell {
		spec.extra = func(int) []string {
			return []string{"--cell", name, "--partitions", strconv.Itoa(e.cfg.CellPartitions)}
		}
	}
	return spec
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
