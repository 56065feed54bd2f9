package bench

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// A machine is what a natsdelay node of the cluster and cells phases gets
// so that it runs as if on a computer of its own: a cgroup with a CPU
// quota, so three nodes on two shared cores each get the CPU of a small
// machine instead of contending for all of it, and its data dir on a tmpfs
// of its own, so each has a disk of its own instead of one shared fsync
// queue. The nats-server and the load generator stay outside, on the real
// cores, so that with a quota small enough they are not what binds.

// cfsPeriod is the CPU quota's period: short, so a node that used its
// quota is held back for at most a few milliseconds, not for the 100 ms
// of the kernel's default period, which would show as lateness the
// simulated machine would not have.
const cfsPeriod = 10 * time.Millisecond

// minQuotaUs is the smallest quota, in µs, the kernel takes per period.
const minQuotaUs = 1000

// cpuLimit is a quota of CPU time per period, in µs, as the cgroup files
// take them.
type cpuLimit struct {
	quotaUs, periodUs int64
}

// limitFor is the limit that gives cores of CPU: cfsPeriod, lengthened
// where the quota per period would be under the kernel's minimum of 1 ms
// (0.05 core gets 1 ms every 20 ms).
func limitFor(cores float64) (cpuLimit, error) {
	if !(cores > 0) || math.IsInf(cores, 0) {
		return cpuLimit{}, fmt.Errorf("a CPU quota of %v cores: want a number of cores > 0", cores)
	}
	period := float64(cfsPeriod.Microseconds())
	if cores*period < minQuotaUs {
		// The tolerance keeps 1000/0.05 at 20000 where division rounds up.
		period = math.Ceil(minQuotaUs/cores - 1e-6)
	}
	if period > 1_000_000 {
		return cpuLimit{}, fmt.Errorf("a CPU quota of %v cores: under the kernel's minimum of 1 ms in a period of at most 1 s", cores)
	}
	return cpuLimit{quotaUs: max(minQuotaUs, int64(math.Round(cores*period))), periodUs: int64(period)}, nil
}

// cpuController is where the cgroup cpu controller is mounted and which
// version of the interface it speaks.
type cpuController struct {
	root string
	v2   bool
}

// errNoController is returned where the machine has no cgroup cpu
// controller to put a node in.
var errNoController = errors.New("no cgroup cpu controller mounted: want a cgroup (v1) hierarchy with the cpu controller, or a cgroup2 whose cgroup.controllers lists cpu")

// findCPUController picks the cpu controller out of /proc/mounts: a v1
// hierarchy that has it, else a cgroup2 whose controllers (read by
// controllers from its cgroup.controllers) include it. A controller is
// bound to one hierarchy at a time, so at most one of them has it.
func findCPUController(mounts string, controllers func(root string) string) (cpuController, error) {
	var v2 []string
	for line := range strings.Lines(mounts) {
		f := strings.Fields(line)
		if len(f) < 4 {
			continue
		}
		switch f[2] {
		case "cgroup":
			if slices.Contains(strings.Split(f[3], ","), "cpu") {
				return cpuController{root: f[1]}, nil
			}
		case "cgroup2":
			v2 = append(v2, f[1])
		}
	}
	for _, root := range v2 {
		if slices.Contains(strings.Fields(controllers(root)), "cpu") {
			return cpuController{root: root, v2: true}, nil
		}
	}
	return cpuController{}, errNoController
}

// fileWrite is one write to a cgroup file.
type fileWrite struct {
	path, value string
}

// dir is the cgroup of name.
func (c cpuController) dir(name string) string { return filepath.Join(c.root, name) }

// limitWrites are the writes that set l on the cgroup name, in order. In
// v1 the period goes first: a quota is checked against the period it is
// written under. In v2 the root's children get the cpu controller first.
func (c cpuController) limitWrites(name string, l cpuLimit) []fileWrite {
	d := c.dir(name)
	if c.v2 {
		return []fileWrite{
			{filepath.Join(c.root, "cgroup.subtree_control"), "+cpu"},
			{filepath.Join(d, "cpu.max"), fmt.Sprintf("%d %d", l.quotaUs, l.periodUs)},
		}
	}
	return []fileWrite{
		{filepath.Join(d, "cpu.cfs_period_us"), strconv.FormatInt(l.periodUs, 10)},
		{filepath.Join(d, "cpu.cfs_quota_us"), strconv.FormatInt(l.quotaUs, 10)},
	}
}

// procsFile is the file a process is moved into the cgroup name with.
func (c cpuController) procsFile(name string) string {
	return filepath.Join(c.dir(name), "cgroup.procs")
}

// throttling reads nr_periods and nr_throttled from a cgroup's cpu.stat,
// which both versions write.
func throttling(cpuStat string) (periods, throttled int64) {
	for line := range strings.Lines(cpuStat) {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		v, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "nr_periods":
			periods = v
		case "nr_throttled":
			throttled = v
		}
	}
	return periods, throttled
}

// machineOS is what setting up and tearing down a machine does to the
// system; tests replace it to see the order of the steps.
type machineOS interface {
	mkdir(path string) error
	rmdir(path string) error
	write(path, value string) error
	read(path string) (string, error)
	mountTmpfs(dir string) error
	unmount(dir string) error
	kill(pid int) error
}

// hostOS is the real system.
type hostOS struct{}

func (hostOS) mkdir(path string) error { return os.Mkdir(path, 0o700) }
func (hostOS) rmdir(path string) error { return os.Remove(path) }
func (hostOS) write(path, value string) error {
	return os.WriteFile(path, []byte(value), 0)
}
func (hostOS) read(path string) (string, error) {
	b, err := os.ReadFile(path)
	return string(b), err
}
func (hostOS) mountTmpfs(dir string) error { return mountTmpfs(dir) }
func (hostOS) unmount(dir string) error    { return unmount(dir) }
func (hostOS) kill(pid int) error {
	p, err := os.FindProcess(pid)
	if err != nil {
		return err
	}
	return p.Kill()
}

// machine is one node's cgroup and tmpfs, as far as it set them up.
type machine struct {
	os    machineOS
	ctl   cpuController
	name  string // cgroup name; "" without a quota
	tmpfs string // mount point of its tmpfs; "" without one
	// undo tears down what was set up, in the reverse order.
	undo []func() error
	// setting is held while the machine is set up, so that a close for a
	// signal (CloseMachines, on another goroutine) waits for the setup
	// and undoes all of it, not the part done by then.
	setting sync.Mutex
	once    sync.Once
	err     error
	closed  bool // set by close, under setting: add refuses then
}

// machineSpec is what a machine gets: cores of CPU (0 for no quota), and
// a tmpfs at dir (or none).
type machineSpec struct {
	name  string
	cores float64
	tmpfs bool
	dir   string
}

// live is the machines set up and not yet closed, for CloseMachines;
// closed once CloseMachines has run, after which no machine is set up.
var live struct {
	mu     sync.Mutex
	set    map[*machine]struct{}
	closed bool
}

// errMachinesClosed refuses a machine asked for after CloseMachines.
var errMachinesClosed = errors.New("bench: stopping: no more nodes' machines are set up")

// CloseMachines tears down every machine still set up, killing the nodes
// in them: for a signal that stops the bench before its phases do.
func CloseMachines() error {
	live.mu.Lock()
	live.closed = true
	ms := make([]*machine, 0, len(live.set))
	for m := range live.set {
		ms = append(ms, m)
	}
	live.mu.Unlock()
	var errs []error
	for _, m := range ms {
		errs = append(errs, m.close())
	}
	return errors.Join(errs...)
}

// newMachine sets up spec, and undoes what it did on an error.
func newMachine(mos machineOS, ctl cpuController, spec machineSpec) (*machine, error) {
	m := &machine{os: mos, ctl: ctl}
	m.setting.Lock()
	live.mu.Lock()
	if live.closed {
		live.mu.Unlock()
		m.setting.Unlock()
		return nil, errMachinesClosed
	}
	if live.set == nil {
		live.set = map[*machine]struct{}{}
	}
	live.set[m] = struct{}{}
	live.mu.Unlock()
	err := m.setUp(spec)
	m.setting.Unlock()
	if err != nil {
		return nil, errors.Join(err, m.close())
	}
	return m, nil
}

// setUp makes the data dir and its tmpfs, then the cgroup and its quota.
func (m *machine) setUp(spec machineSpec) error {
	if spec.tmpfs {
		if err := m.mount(spec.dir); err != nil {
			return err
		}
	}
	if spec.cores > 0 {
		return m.limit(spec.name, spec.cores)
	}
	return nil
}

// mount makes dir and mounts a tmpfs on it; undone by unmounting it and
// removing dir.
func (m *machine) mount(dir string) error {
	if err := m.os.mkdir(dir); err != nil {
		return fmt.Errorf("bench: the data dir of a node on a tmpfs: %w", err)
	}
	m.undo = append(m.undo, func() error { return m.os.rmdir(dir) })
	if err := m.os.mountTmpfs(dir); err != nil {
		return fmt.Errorf("bench: mount a tmpfs on %s: %w", dir, err)
	}
	m.tmpfs = dir
	m.undo = append(m.undo, func() error { return m.os.unmount(dir) })
	return nil
}

// limit makes the cgroup name with the quota of cores; undone by killing
// whatever runs in it, then removing it (the kernel refuses to remove a
// cgroup with processes in it, and to unmount a tmpfs they hold open).
func (m *machine) limit(name string, cores float64) error {
	l, err := limitFor(cores)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if err := m.os.mkdir(m.ctl.dir(name)); err != nil {
		return fmt.Errorf("bench: make the cgroup %s: %w", m.ctl.dir(name), err)
	}
	m.undo = append(m.undo, func() error { return m.os.rmdir(m.ctl.dir(name)) })
	m.name = name
	m.undo = append(m.undo, m.killAll)
	for _, w := range m.ctl.limitWrites(name, l) {
		if err := m.os.write(w.path, w.value); err != nil {
			return fmt.Errorf("bench: set the CPU quota: write %q to %s: %w", w.value, w.path, err)
		}
	}
	return nil
}

// add moves the process pid into the machine's cgroup. A process started
// outside it runs unlimited until then: a node is added right after its
// start, before it has connected to NATS.
func (m *machine) add(pid int) error {
	if m.name == "" {
		return nil
	}
	// NB: not beside a close for a signal: a process moved in between
	// its kill of the cgroup's processes and its removal of the cgroup
	// kept the cgroup, and the process, alive past the bench.
	m.setting.Lock()
	defer m.setting.Unlock()
	if m.closed {
		return fmt.Errorf("bench: move process %d into the cgroup %s: %w", pid, m.ctl.dir(m.name), errMachinesClosed)
	}
	if err := m.os.write(m.ctl.procsFile(m.name), strconv.Itoa(pid)); err != nil {
		return fmt.Errorf("bench: move process %d into the cgroup %s: %w", pid, m.ctl.dir(m.name), err)
	}
	return nil
}

// throttled is the periods of the cgroup so far and those in which it
// was held back; 0, 0 without a cgroup or a stat.
func (m *machine) throttled() (periods, throttled int64) {
	if m.name == "" {
		return 0, 0
	}
	s, err := m.os.read(filepath.Join(m.ctl.dir(m.name), "cpu.stat"))
	if err != nil {
		return 0, 0
	}
	return throttling(s)
}

// killAll SIGKILLs every process left in the cgroup and waits until it is
// empty: nodes are stopped before their machine, so there is none unless
// the bench stops on an error or a signal.
func (m *machine) killAll() error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		procs, err := m.os.read(m.ctl.procsFile(m.name))
		if err != nil {
			return fmt.Errorf("bench: the processes of the cgroup %s: %w", m.ctl.dir(m.name), err)
		}
		pids := strings.Fields(procs)
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: processes %s still in the cgroup %s after SIGKILL", strings.Join(pids, ","), m.ctl.dir(m.name))
		}
		for _, p := range pids {
			if pid, err := strconv.Atoi(p); err == nil {
				_ = m.os.kill(pid)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// close undoes the machine's setup, last step first, once; it goes on
// past a step that fails so as to leave as little behind as it can.
func (m *machine) close() error {
	m.setting.Lock()
	defer m.setting.Unlock()
	m.once.Do(func() {
		m.closed = true
		live.mu.Lock()
		delete(live.set, m)
		live.mu.Unlock()
		var errs []error
		for _, u := range slices.Backward(m.undo) {
			errs = append(errs, u())
		}
		m.err = errors.Join(errs...)
	})
	return m.err
}

// machines counts the machines this process set up, to name their cgroups.
var machines atomic.Int64

// setMachine gives node the machine the run asks for: a cgroup with a
// quota of Config.NodeCPU cores, and its data dir on a tmpfs of its own
// with NodeTmpfs or a quota. A node restarted after a kill keeps its own.
func (e *env) setMachine(node *benchNode) error {
	if node.machine != nil {
		return nil
	}
	spec := machineSpec{cores: e.cfg.NodeCPU, tmpfs: e.cfg.nodeTmpfs(), dir: node.dir}
	if spec.cores == 0 && !spec.tmpfs {
		node.machine = &machine{}
		return nil
	}
	ctl, err := hostController(spec.cores > 0)
	if err != nil {
		return err
	}
	spec.name = fmt.Sprintf("natsdelay-bench-%d-%d", os.Getpid(), machines.Add(1))
	node.machine, err = newMachine(hostOS{}, ctl, spec)
	return err
}

// nodeTmpfs reports whether each node's data goes on a tmpfs of its own:
// asked for, or implied by a quota, since a machine of its own has a disk
// of its own too.
func (c Config) nodeTmpfs() bool { return c.NodeTmpfs || c.NodeCPU > 0 }

// hostController checks that the bench may set up machines here: it runs
// as root, and, where a quota is asked for, the cpu controller is mounted.
func hostController(quota bool) (cpuController, error) {
	if os.Geteuid() != 0 {
		return cpuController{}, errors.New("bench: a CPU quota and a tmpfs per node need root, to make cgroups and mount file systems: run the bench as root, or without --node-cpu and --node-tmpfs")
	}
	if !quota {
		return cpuController{}, nil
	}
	mounts, err := os.ReadFile("/proc/mounts")
	if err != nil {
		return cpuController{}, fmt.Errorf("bench: a CPU quota per node: %w", err)
	}
	ctl, err := findCPUController(string(mounts), func(root string) string {
		b, _ := os.ReadFile(filepath.Join(root, "cgroup.controllers"))
		return string(b)
	})
	if err != nil {
		return cpuController{}, fmt.Errorf("bench: a CPU quota per node: %w", err)
	}
	return ctl, nil
}

// checkMachines fails a run that asks for machines where it cannot set
// them up, before any phase starts.
func (c Config) checkMachines() error {
	if c.NodeCPU == 0 && !c.NodeTmpfs {
		return nil
	}
	if !c.runs(PhaseCluster) && !c.runs(PhaseCells) {
		return fmt.Errorf("%w: NodeCPU and NodeTmpfs are for the nodes of the cluster and cells phases: run one of them", ErrInvalidConfig)
	}
	_, err := hostController(c.NodeCPU > 0)
	return err
}

// MachineNote describes the machines of a run's nodes, for its report.
type MachineNote struct {
	// CPU is each node's quota in cores, 0 for none; PeriodMs its period.
	CPU      float64 `json:"cpu"`
	PeriodMs float64 `json:"period_ms,omitempty"`
	Tmpfs    bool    `json:"tmpfs"`
}

// machineNote is the note of c's machines.
func (c Config) machineNote() MachineNote {
	n := MachineNote{CPU: c.NodeCPU, Tmpfs: c.nodeTmpfs()}
	if l, err := limitFor(c.NodeCPU); err == nil {
		n.PeriodMs = float64(l.periodUs) / 1000
	}
	return n
}

// String is how the table names the machines.
func (n MachineNote) String() string {
	var s string
	if n.CPU > 0 {
		s = fmt.Sprintf("each node in a cgroup at %v core every %v ms", n.CPU, n.PeriodMs)
	} else {
		s = "nodes without a CPU quota, sharing the machine's cores"
	}
	if n.Tmpfs {
		return s + ", data on a tmpfs of its own"
	}
	return s + ", data on the machine's disk"
}
