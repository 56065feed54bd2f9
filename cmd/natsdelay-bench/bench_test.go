package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/natsdelay/natsdelay/cmd/internal/bench"
	"github.com/natsdelay/natsdelay/cmd/internal/usage"
)

// TestParse_Bench_Sizes checks that bench's size flags override the preset
// they start from, and that 0 keeps the preset.
func TestParse_Bench_Sizes(t *testing.T) {
	for _, tc := range []struct {
		name      string
		args      []string
		fireMsgs  int
		pending   int
		rates     []float64
		fireLead  time.Duration
		ingestMsg int
	}{
		{"defaults", []string{}, 50_000, 1_000_000, []float64{25_000, 100_000}, 0, 100_000},
		{"quick", []string{"--quick"}, 1_000, 5_000, []float64{2_000, 5_000}, 300 * time.Millisecond, 2_000},
		{"quick with sizes", []string{"--quick", "--scale-pending", "7", "--fire-rates", "10,20"}, 1_000, 7, []float64{10, 20}, 300 * time.Millisecond, 2_000},
		// A new FireMsgs without a lead lets bench size the lead to it.
		{"more fire msgs", []string{"--quick", "--fire-msgs", "9000"}, 9_000, 5_000, []float64{2_000, 5_000}, 0, 2_000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parse(tc.args, io.Discard, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			cfg := c.config()
			if cfg.FireMsgs != tc.fireMsgs || cfg.ScalePending != tc.pending || cfg.FireLead != tc.fireLead || cfg.IngestMsgs != tc.ingestMsg {
				t.Errorf("got fire %d, pending %d, lead %v, ingest %d; want %d, %d, %v, %d",
					cfg.FireMsgs, cfg.ScalePending, cfg.FireLead, cfg.IngestMsgs, tc.fireMsgs, tc.pending, tc.fireLead, tc.ingestMsg)
			}
			if len(cfg.FireRates) != len(tc.rates) || cfg.FireRates[0] != tc.rates[0] || cfg.FireRates[1] != tc.rates[1] {
				t.Errorf("fire rates %v, want %v", cfg.FireRates, tc.rates)
			}
		})
	}
}

// TestParse_Bench_ScaleAndWaves checks the flags that size the scale
// run's subjects and the waves run: each overrides the preset, and 0 keeps it.
func TestParse_Bench_ScaleAndWaves(t *testing.T) {
	for _, tc := range []struct {
		name                               string
		args                               []string
		scaleSubjects, waves, waveSubjects int
	}{
		{"defaults", []string{}, 1, 3, 20_000},
		{"quick", []string{"--quick"}, 100, 2, 2_000},
		{"set", []string{"--scale-pending", "200000", "--scale-subjects", "200000", "--waves", "5", "--wave-subjects", "50000"}, 200_000, 5, 50_000},
		{"zero keeps the preset", []string{"--quick", "--scale-subjects", "0", "--waves", "0"}, 100, 2, 2_000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parse(tc.args, io.Discard, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			cfg := c.config()
			if cfg.ScaleSubjects != tc.scaleSubjects || cfg.Waves != tc.waves || cfg.WaveSubjects != tc.waveSubjects {
				t.Errorf("got scale subjects %d, waves %d of %d; want %d, %d of %d",
					cfg.ScaleSubjects, cfg.Waves, cfg.WaveSubjects, tc.scaleSubjects, tc.waves, tc.waveSubjects)
			}
			if err := cfg.Validate(); err != nil {
				t.Errorf("config does not validate: %v", err)
			}
		})
	}
}

// TestParse_Bench_FireRecurring checks that --fire-recurring sets the
// recurring schedules of the fire runs, that none is the default, and that
// a negative count is a usage error naming the flag.
func TestParse_Bench_FireRecurring(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want int
	}{
		{[]string{}, 0},
		{[]string{"--quick"}, 0},
		{[]string{"--fire-recurring", "3"}, 3},
	} {
		c, err := parse(tc.args, io.Discard, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if cfg := c.config(); cfg.FireRecurring != tc.want {
			t.Errorf("%v: fire recurring %d, want %d", tc.args, cfg.FireRecurring, tc.want)
		}
	}
	_, err := parse([]string{"--fire-recurring=-1"}, io.Discard, io.Discard)
	if !errors.Is(err, usage.ErrUsage) || !strings.Contains(err.Error(), "--fire-recurring -1") {
		t.Fatalf("--fire-recurring=-1: %v, want a usage error naming it", err)
	}
}

// TestParse_Bench_BadValues checks that every bad bench flag is reported at
// once, as a usage error naming the flag.
func TestParse_Bench_BadValues(t *testing.T) {
	_, err := parse([]string{"--fire-msgs=-1", "--fire-rates=0", "--timeout=-1s", "--phases=fire,nope"}, io.Discard, io.Discard)
	if !errors.Is(err, usage.ErrUsage) {
		t.Fatalf("got %v, want a usage error", err)
	}
	for _, want := range []string{"--fire-msgs -1", "--fire-rates", "--timeout -1s", `--phases: "nope"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %q: %v", want, err)
		}
	}
	_, err = parse([]string{"--quick", "--scale-subjects", "6000", "--waves=-2", "--wave-subjects=-1"}, io.Discard, io.Discard)
	if !errors.Is(err, usage.ErrUsage) {
		t.Fatalf("got %v, want a usage error", err)
	}
	for _, want := range []string{"--scale-subjects 6000: want at most the 5000 pending", "--waves -2", "--wave-subjects -1"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %q: %v", want, err)
		}
	}
}

// TestBench_Quick_OwnProcess runs the real command at tiny sizes and checks
// that the scale phase ran natsdelay as a child process of its own, so the
// memory it reports is the service's alone, and that each phase measured
// something.
func TestBench_Quick_OwnProcess(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	res := runBench(t, dir)
	switch s := res.Scale; {
	case s == nil:
		t.Fatalf("no scale result in %+v", res)
	case !s.OwnProcess:
		t.Errorf("scale ran natsdelay in the bench process")
	case s.RSSBytes <= 0 || s.RSSPeak < s.RSSBytes || s.RSSEmpty <= 0:
		t.Errorf("RSS %d, peak %d, before the fill %d: want all > 0 and peak >= RSS", s.RSSBytes, s.RSSPeak, s.RSSEmpty)
	case s.RestartMs <= 0:
		t.Errorf("restart to first delivery %v ms", s.RestartMs)
	}
	if res.Expiry == nil || res.Expiry.Expired == 0 {
		t.Errorf("no expiry result: %+v", res.Expiry)
	}
	// natsdelay's own process answers for its memory and CPU: the Go heap
	// and the gauge come from its /metrics.
	if s := res.Scale; s != nil && (s.Subjects != 100 || s.MemPending.HeapBytes <= 0 || s.MemPending.DispatchSubjects < 0 || s.FillCPU.Service < 0) {
		t.Errorf("scale: %d subjects, heap %d, dispatcher subjects %d, natsdelay CPU %v s; want 100 and all known",
			s.Subjects, s.MemPending.HeapBytes, s.MemPending.DispatchSubjects, s.FillCPU.Service)
	}
	switch w := res.Waves; {
	case w == nil:
		t.Error("no waves result")
	case !w.OwnProcess || len(w.Waves) != 2 || w.Subjects != 2_000:
		t.Errorf("waves: own process %v, %d waves of %d subjects; want true, 2 of 2000", w.OwnProcess, len(w.Waves), w.Subjects)
	default:
		for i, m := range append([]bench.MemSample{w.Idle}, w.Waves[0].Mem, w.Waves[1].Mem) {
			if m.RSSBytes <= 0 || m.HeapBytes <= 0 || m.DispatchSubjects < 0 {
				t.Errorf("waves sample %d (0 is idle): %+v, want every figure known", i, m)
			}
		}
		// The service, quiet after each wave, handed its memory back:
		// the release goes through a real serve process and its metric.
		for i, wv := range w.Waves {
			if wv.Released == nil {
				t.Errorf("wave %d: no memory handed back", i+1)
			}
		}
	}
	for _, f := range res.Fire {
		if f.Delivered != f.Scheduled || f.Early != 0 {
			t.Errorf("fire %s at %v/s: %d of %d delivered, %d early", f.System, f.OfferedRate, f.Delivered, f.Scheduled, f.Early)
		}
	}
	if len(res.Fire) != 4 || len(res.Ingest) != 6 || len(res.EndToEnd) != 2 {
		t.Errorf("%d fire, %d ingest and %d end-to-end results, want 4, 6 and 2", len(res.Fire), len(res.Ingest), len(res.EndToEnd))
	}
	if _, err := os.Stat(filepath.Join(dir, "bench.png")); err != nil {
		t.Errorf("no chart: %v", err)
	}
}

// TestBench_Floor_Quick runs the floor phase through the real command:
// natsdelay's serve and the floor service, with its store and without,
// each a process of its own, take the same end-to-end load, and each
// delivers every message, with its own CPU counted apart.
func TestBench_Floor_Quick(t *testing.T) {
	t.Parallel()
	res := runBench(t, t.TempDir(), "--phases", "floor", "--own-process", "--floor-rounds", "2")
	fr := res.Floor
	if fr == nil {
		t.Fatalf("no floor result in %+v", res)
	}
	for name, runs := range map[string][]bench.EndToEndResult{"natsdelay": fr.Delay, "floor": fr.Store, "floor, NATS only": fr.NATS} {
		if len(runs) != 2 {
			t.Errorf("%s: %d runs, want 2", name, len(runs))
		}
		for _, r := range runs {
			if r.Delivered != fr.Msgs || r.CPU.Service < 0 {
				t.Errorf("%s: %d of %d delivered, its process's CPU %v s; want all, and known", name, r.Delivered, fr.Msgs, r.CPU.Service)
			}
		}
	}
	if len(res.EndToEnd) != 0 || res.Scale != nil {
		t.Errorf("--phases floor ran e2e (%d) or scale (%v) too", len(res.EndToEnd), res.Scale != nil)
	}
}

// TestParse_Bench_FloorNeedsOwnProcess checks that the floor phase,
// which compares processes, is refused without --own-process.
func TestParse_Bench_FloorNeedsOwnProcess(t *testing.T) {
	_, err := parse([]string{"--phases", "floor"}, io.Discard, io.Discard)
	if !errors.Is(err, usage.ErrUsage) || !strings.Contains(err.Error(), "--own-process") {
		t.Fatalf("got %v, want a usage error that asks for --own-process", err)
	}
}

// TestBench_Phases_OnlyThose checks that --phases runs only the phases
// named, and that without a fire phase the chart still draws throughput.
func TestBench_Phases_OnlyThose(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	res := runBench(t, dir, "--phases", "e2e")
	if len(res.EndToEnd) != 2 || len(res.Fire) != 0 || len(res.Ingest) != 0 || res.Scale != nil || res.Expiry != nil {
		t.Errorf("--phases e2e ran: %d e2e, %d fire, %d ingest, scale %v, expiry %v", len(res.EndToEnd), len(res.Fire), len(res.Ingest), res.Scale != nil, res.Expiry != nil)
	}
	if _, err := os.Stat(filepath.Join(dir, "bench.png")); err != nil {
		t.Errorf("no chart of the end-to-end throughput: %v", err)
	}
}

// runBench runs the real bench command, this test binary as
// natsdelay-bench and a natsdelay built from this tree as its serve, at
// quick sizes with extra flags, writing bench.json and bench.png to dir,
// and returns what it measured.
func runBench(t *testing.T, dir string, extra ...string) bench.Results {
	t.Helper()
	jsonOut := filepath.Join(dir, "bench.json")
	args := append([]string{"--quick", "--quiet", "--json-out", jsonOut, "--png-out", filepath.Join(dir, "bench.png"),
		"--serve-binary", natsdelayBinary(t)}, extra...)
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), execEnv+"=1", "GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = io.Discard, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("natsdelay-bench %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
		}
	case <-time.After(3 * time.Minute):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("natsdelay-bench still running after 3m:\n%s", stderr.String())
	}
	b, err := os.ReadFile(jsonOut)
	if err != nil {
		t.Fatal(err)
	}
	var res bench.Results
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	return res
}

// TestBench_Cluster_Quick runs bench --cluster at tiny sizes: it checks
// that only the cluster phase ran, that one node and three each took
// every ingest and delivered every message of the fire run, none early,
// and that the failover was timed; never how fast.
func TestBench_Cluster_Quick(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	res := runBench(t, dir, "--cluster")
	cr := res.Cluster
	if cr == nil || len(res.Ingest) != 0 || len(res.Fire) != 0 || res.Scale != nil {
		t.Fatalf("--cluster ran: cluster %v, %d ingest, %d fire, scale %v", cr != nil, len(res.Ingest), len(res.Fire), res.Scale != nil)
	}
	if len(cr.Ingest) != 6 || len(cr.Fire) != 3 || len(cr.Failovers) != 1 || len(cr.JSFailovers) != 1 {
		t.Fatalf("cluster: %d ingest, %d fire, %d and %d failovers; want 6, 3, 1 and 1", len(cr.Ingest), len(cr.Fire), len(cr.Failovers), len(cr.JSFailovers))
	}
	for _, r := range cr.Ingest {
		// A replicated system may refuse some requests during an election
		// of its own (a loaded machine can delay heartbeats past the
		// timeout); the bench counts them rather than retrying. Never all.
		replicated := r.System != "natsdelay x1"
		if r.Msgs != 2_000 || (r.Failed != 0 && !replicated) || r.Failed >= r.Msgs {
			t.Errorf("cluster ingest %s %s: %d msgs, %d failed", r.System, r.Mode, r.Msgs, r.Failed)
		} else if r.Failed != 0 {
			t.Logf("cluster ingest %s %s: %d of %d refused (an election during the run)", r.System, r.Mode, r.Failed, r.Msgs)
		}
	}
	for _, f := range cr.Fire {
		if f.Delivered != f.Scheduled || f.Early != 0 {
			t.Errorf("cluster fire %s: %d of %d delivered, %d early", f.System, f.Delivered, f.Scheduled, f.Early)
		}
	}
	if f := cr.Failovers[0]; f.ToAckMs <= 0 || f.ToDeliveryMs <= 0 {
		t.Errorf("failover %+v: want both times", f)
	}
}

// TestBench_Cells_Quick runs bench --cells 3 at tiny sizes with the
// natsdelay of this tree, which runs cells: it checks that one cell, the
// fleet of three and the hand-partitioned ideal each took every message
// of every mode, none refused, and stored each once, and delivered every
// message of its end-to-end run with each ACK applied, so that the fleet's
// rows measure three cells sharing the load, not a refusing or a
// duplicating fleet; and that each system took its untimed warm-up before
// its timed rows, stored and counted apart from them; never how fast.
func TestBench_Cells_Quick(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	res := runBench(t, dir, "--cells", "3", "--ingest-msgs", "300", "--cell-requesters", "16", "--cell-warmup", "40")
	cr := res.Cells
	if cr == nil || res.Cluster != nil || len(res.Ingest) != 0 {
		t.Fatalf("--cells ran: cells %v, cluster %v, %d ingest", cr != nil, res.Cluster != nil, len(res.Ingest))
	}
	if !cr.Fleet || cr.Cells != 3 || cr.CellNodes != 1 {
		t.Errorf("cells %+v: want a fleet of 3 one-node cells", cr)
	}
	want := map[string]bool{}
	for _, system := range []string{bench.CellsOne, bench.CellsFleet, bench.CellsIdeal} {
		want[system+"/16 requesters"], want[system+"/pipelined"] = true, true
		if got := cr.Stored[system]; got != 600 {
			t.Errorf("%s stored %d messages over its timed runs, want the 600 it took", system, got)
		}
		// The untimed warm-up went through the system, each mode's 40
		// messages stored once, and none of it is counted in the rows.
		if got := cr.Warmed[system]; got != 80 || cr.WarmupMsgs != 40 {
			t.Errorf("%s stored %d messages over its warm-up of %d a mode, want 80", system, got, cr.WarmupMsgs)
		}
	}
	for _, r := range cr.Ingest {
		key := r.System + "/" + r.Mode
		if !want[key] {
			t.Errorf("unexpected row %s", key)
		}
		delete(want, key)
		if r.Msgs != 300 || r.Failed != 0 || !(r.Rate > 0) || r.CPU.Service < 0 {
			t.Errorf("%s: %d msgs, %d failed, %v msgs/s, %v s CPU", key, r.Msgs, r.Failed, r.Rate, r.CPU.Service)
		}
	}
	for key := range want {
		t.Errorf("no row %s", key)
	}
	e2e := map[string]bool{}
	for _, r := range cr.EndToEnd {
		e2e[r.System] = true
		if r.Msgs != 300 || r.Delivered != 300 || !(r.Rate > 0) || r.CPU.Service < 0 {
			t.Errorf("end to end %s: %d of %d delivered, %v msgs/s, %v s CPU", r.System, r.Delivered, r.Msgs, r.Rate, r.CPU.Service)
		}
	}
	if len(cr.EndToEnd) != 3 || !e2e[bench.CellsOne] || !e2e[bench.CellsFleet] || !e2e[bench.CellsIdeal] {
		t.Errorf("end-to-end rows %+v: want one of each system", cr.EndToEnd)
	}
	parts := 0
	for _, c := range cr.FleetCells {
		parts += c.Partitions
		if c.Partitions == 0 || c.Pending == 0 {
			t.Errorf("fleet cell %s owns %d partitions and holds %d messages: want a share of both", c.Cell, c.Partitions, c.Pending)
		}
	}
	if len(cr.FleetCells) != 3 || parts != cr.Partitions {
		t.Errorf("fleet cells %+v: want 3 owning the %d partitions between them", cr.FleetCells, cr.Partitions)
	}
}

// TestParse_Bench_Machines checks the flags of the nodes' machines and
// the cells phase: --cells runs the phase, and every bad value is named.
func TestParse_Bench_Machines(t *testing.T) {
	c, err := parse([]string{"--cells", "3", "--node-cpu", "0.1", "--cell-requesters", "64,192"}, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	cfg := c.config()
	if !slices.Equal(cfg.Phases, []string{bench.PhaseCells}) || cfg.NodeCPU != 0.1 || cfg.Cells != 3 || !slices.Equal(cfg.CellRequesters, []int{64, 192}) {
		t.Errorf("config: phases %v, node CPU %v, cells %d, requesters %v", cfg.Phases, cfg.NodeCPU, cfg.Cells, cfg.CellRequesters)
	}
	_, err = parse([]string{"--cluster", "--node-cpu=-0.2", "--cell-nodes", "2", "--cell-requesters", "0"}, io.Discard, io.Discard)
	if !errors.Is(err, usage.ErrUsage) {
		t.Fatalf("got %v, want a usage error", err)
	}
	for _, want := range []string{"--node-cpu -0.2", "--cell-nodes 2", "--cell-requesters 0"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %q: %v", want, err)
		}
	}
	_, err = parse([]string{"--node-cpu", "0.2"}, io.Discard, io.Discard)
	if !errors.Is(err, usage.ErrUsage) || !strings.Contains(err.Error(), "run one of them") {
		t.Errorf("--node-cpu without the cluster or cells phase: %v, want a usage error", err)
	}
}

// TestBench_NodeCPU_SIGINT_TearsDown starts the real command's cluster
// phase with a CPU quota per node, interrupts it once a node's tmpfs is
// mounted and its cgroup made, and checks that it exits with neither left
// behind nor a node still running in them.
func TestBench_NodeCPU_SIGINT_TearsDown(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a CPU quota and a tmpfs per node need root")
	}
	t.Parallel()
	dir := t.TempDir()
	args := []string{"--cluster", "--node-cpu", "0.2", "--quick", "--quiet", "--dir", filepath.Join(dir, "data"),
		"--json-out", filepath.Join(dir, "bench.json"), "--serve-binary", natsdelayBinary(t)}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), execEnv+"=1")
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = io.Discard, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	cgroups := func() []string {
		pattern := "natsdelay-bench-" + strconv.Itoa(cmd.Process.Pid) + "-*"
		v1, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", pattern))
		v2, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", pattern))
		return append(v1, v2...)
	}
	deadline := time.Now().Add(time.Minute)
	for len(tmpfsUnder(t, dir)) == 0 || len(cgroups()) == 0 {
		select {
		case err := <-done:
			if strings.Contains(stderr.String(), "no cgroup cpu controller") {
				t.Skipf("no cgroup cpu controller here:\n%s", stderr.String())
			}
			t.Fatalf("natsdelay-bench exited before a node's machine was set up: %v\n%s", err, stderr.String())
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-done
			t.Fatalf("no node's tmpfs and cgroup after a minute:\n%s", stderr.String())
		}
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("natsdelay-bench still running a minute after SIGINT:\n%s", stderr.String())
	}
	if m := tmpfsUnder(t, dir); len(m) > 0 {
		t.Errorf("tmpfs left mounted after SIGINT: %v", m)
	}
	if cg := cgroups(); len(cg) > 0 {
		t.Errorf("cgroups left after SIGINT: %v", cg)
	}
}

// tmpfsUnder lists the tmpfs mounts under dir.
func tmpfsUnder(t *testing.T, dir string) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/mounts")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) >= 3 && f[2] == "tmpfs" && strings.HasPrefix(f[1], dir+"/") {
			out = append(out, f[1])
		}
	}
	return out
}
