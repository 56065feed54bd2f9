package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/cmd/internal/floor"
)

// The systems of the floor phase beside natsdelay: the floor service
// (package floor) with its store and without.
const (
	SystemFloorStore = "floor"
	SystemFloorNATS  = "floor, NATS only"
)

// FloorResult is the floor phase: natsdelay's end to end (due-now
// messages scheduled, delivered and ACKed, as the e2e phase runs it)
// beside the floor service's on the same load, in rotating order, each
// in a process of its own on a fresh store.
type FloorResult struct {
	Msgs int `json:"msgs"`
	// Delay, Store and NATS are every run of natsdelay, of the floor and
	// of the floor without a store, in the order they ran.
	Delay []EndToEndResult `json:"natsdelay"`
	Store []EndToEndResult `json:"floor"`
	NATS  []EndToEndResult `json:"floor_nats_only"`
}

// runFloor runs FloorRounds rounds of natsdelay, the floor and the floor
// without a store, each first in turn.
func (e *env) runFloor(ctx context.Context) (*FloorResult, error) {
	res := &FloorResult{Msgs: e.cfg.EndToEndMsgs}
	systems := []string{SystemDelay, SystemFloorStore, SystemFloorNATS}
	for round := range e.cfg.FloorRounds {
		for i := range systems {
			system := systems[(round+i)%len(systems)]
			r, err := e.floorRun(ctx, system, round)
			if err != nil {
				return res, err
			}
			switch system {
			case SystemDelay:
				res.Delay = append(res.Delay, r)
			case SystemFloorStore:
				res.Store = append(res.Store, r)
			default:
				res.NATS = append(res.NATS, r)
			}
		}
	}
	return res, nil
}

// floorRun is one end-to-end run of system.
func (e *env) floorRun(ctx context.Context, system string, round int) (EndToEndResult, error) {
	phase := "floor" + strconv.Itoa(round) + map[string]string{SystemDelay: "d", SystemFloorStore: "s", SystemFloorNATS: "n"}[system]
	rec := newRecorder(e.cfg.EndToEndMsgs)
	var run *sysRun
	var err error
	if system == SystemDelay {
		run, err = e.startSystem(ctx, SystemDelay, phase, rec)
	} else {
		run, err = e.startFloor(phase, system == SystemFloorStore, rec)
	}
	if err != nil {
		return EndToEndResult{}, err
	}
	r, err := e.endToEnd(run, rec, e.cfg.EndToEndMsgs)
	if err = errors.Join(err, run.stop()); err != nil {
		return r, fmt.Errorf("bench: floor phase, %s: %w", system, err)
	}
	r.System = system
	return r, nil
}

// startFloor runs the floor as a process of its own (FloorCommand, with
// --floor-serve and its config) on the bench's server and subjects, with
// a consumer that records and ACKs every delivery.
func (e *env) startFloor(phase string, store bool, rec *recorder) (*sysRun, error) {
	count := e.api + ".FLOOR." + phase
	cfg, err := json.Marshal(floor.Config{URL: e.url, Dir: filepath.Join(e.dir, phase), Store: store, Ingest: e.ingest, Ack: e.ack, Count: count})
	if err != nil {
		return nil, err
	}
	args := append(e.cfg.FloorCommand[1:len(e.cfg.FloorCommand):len(e.cfg.FloorCommand)], "--floor-serve", string(cfg))
	p := &process{e: e, name: "the floor", cmd: exec.Command(e.cfg.FloorCommand[0], args...), stderr: &tailBuffer{max: 8 << 10}, exited: make(chan struct{})}
	ready := &floorReady{found: make(chan struct{})}
	p.cmd.Stderr = io.MultiWriter(p.stderr, ready)
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: start the floor: %w", err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	select {
	case <-ready.found:
	case <-p.exited:
		return nil, fmt.Errorf("bench: the floor exited before it was ready: %v\n%s", p.err, p.stderr)
	case <-time.After(e.cfg.Timeout):
		return nil, errors.Join(fmt.Errorf("bench: the floor not ready after %v", e.cfg.Timeout), p.close())
	}
	stopSub, err := e.delayConsumer(e.plain+"."+phase, rec)
	if err != nil {
		return nil, errors.Join(err, p.close())
	}
	nc := e.conns[len(e.conns)-1]
	return &sysRun{
		system: map[bool]string{true: SystemFloorStore, false: SystemFloorNATS}[store],
		pid:    p.cmd.Process.Pid,
		msg:    func(_ int, at time.Time) *nats.Msg { return e.delayMsg(e.plain+"."+phase, at) },
		ok:     delayOK,
		settled: func(n int) (bool, error) {
			m, err := nc.Request(count, nil, e.cfg.Timeout)
			if err != nil {
				return false, fmt.Errorf("bench: the floor's count: %w", err)
			}
			acked, err := strconv.Atoi(string(m.Data))
			return acked >= n, err
		},
		stop:   func() error { return errors.Join(stopSub(), p.close()) },
		events: func() (int64, int64) { return -1, -1 },
	}, nil
}

// FloorReadyLine is what the floor process writes to stderr once it
// takes messages.
const FloorReadyLine = "natsdelay floor ready"

// floorReady closes found once the floor's ready line was written. One
// goroutine of exec.Cmd writes to it.
type floorReady struct {
	found chan struct{}
	done  bool
	buf   strings.Builder
}

func (r *floorReady) Write(p []byte) (int, error) {
	if r.done {
		return len(p), nil
	}
	r.buf.Write(p)
	if strings.Contains(r.buf.String(), FloorReadyLine) {
		close(r.found)
		r.done = true
		r.buf.Reset()
	}
	return len(p), nil
}

// ServeFloor runs the floor service with cfg, a floor.Config in JSON, as
// the bench's own floor process does, until ctx is done, and writes
// FloorReadyLine to w once it takes messages.
func ServeFloor(ctx context.Context, cfg string, w io.Writer) error {
	var c floor.Config
	if err := json.Unmarshal([]byte(cfg), &c); err != nil {
		return fmt.Errorf("bench: the floor's config: %w", err)
	}
	return floor.Serve(ctx, c, func() { fmt.Fprintln(w, FloorReadyLine) })
}

// writeFloor prints the floor phase: each system's CPU a message, its
// process's and the nats-server's, medians and each run.
func writeFloor(p func(string, ...any), fr *FloorResult, srv bool) {
	p("floor: %s due-now msgs scheduled+delivered+ACKed, %d runs each, medians\tbetter\tnatsdelay\tfloor\tfloor, NATS only\tnatsdelay vs floor\t", num(float64(fr.Msgs)), len(fr.Delay))
	runs := [][]EndToEndResult{fr.Delay, fr.Store, fr.NATS}
	row := func(label string, f func(r EndToEndResult) float64) {
		var med [3]float64
		var each [3]string
		for i, rs := range runs {
			vs := make([]float64, len(rs))
			for j, r := range rs {
				vs[j] = f(r)
			}
			med[i], each[i] = median(vs), decs(vs)
		}
		p("  %s\t%s\t%s\t%s\t%s\t%s\t", label, lower, dec(med[0]), dec(med[1]), dec(med[2]), versus(med[0], med[1], lower))
		p("  %s of each run\t\t%s\t%s\t%s\t\t", label, each[0], each[1], each[2])
	}
	service := func(r EndToEndResult) float64 { return perMsgUs(r.CPU.Service, r.Msgs) }
	row("CPU µs/msg, the service's process", service)
	if srv {
		server := func(r EndToEndResult) float64 { return perMsgUs(r.CPU.Server, r.Msgs) }
		row("CPU µs/msg, nats-server process", server)
		row("service's process / nats-server process", func(r EndToEndResult) float64 { return service(r) / server(r) })
	}
	p("")
}
