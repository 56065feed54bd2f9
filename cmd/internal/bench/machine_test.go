package bench

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestLimitFor checks the quota arithmetic: cores times a 10 ms period,
// the period lengthened where the quota would be under the kernel's 1 ms,
// and a clear error for what no quota can give.
func TestLimitFor(t *testing.T) {
	for _, tc := range []struct {
		cores             float64
		quotaUs, periodUs int64
	}{
		{0.2, 2_000, 10_000},
		{0.1, 1_000, 10_000},
		{0.05, 1_000, 20_000},
		{0.03, 1_000, 33_334},
		{1.5, 15_000, 10_000},
	} {
		l, err := limitFor(tc.cores)
		if err != nil || l.quotaUs != tc.quotaUs || l.periodUs != tc.periodUs {
			t.Errorf("limitFor(%v) = %+v, %v; want quota %d µs every %d µs", tc.cores, l, err, tc.quotaUs, tc.periodUs)
		}
		if err == nil && float64(l.quotaUs)/float64(l.periodUs) > tc.cores*1.001 {
			t.Errorf("limitFor(%v) = %+v gives more than %v cores", tc.cores, l, tc.cores)
		}
	}
	for _, cores := range []float64{0, -0.2, 0.0005} {
		if l, err := limitFor(cores); err == nil {
			t.Errorf("limitFor(%v) = %+v, want an error", cores, l)
		}
	}
}

// TestFindCPUController checks which hierarchy a quota is set in: the v1
// hierarchy that has the cpu controller (alone or with others), else a
// cgroup2 that lists cpu, else a clear error.
func TestFindCPUController(t *testing.T) {
	v1 := "cgroup /sys/fs/cgroup/cpuacct cgroup rw,relatime,cpuacct 0 0\n" +
		"cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0\n" +
		"cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0\n"
	joined := "cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,nosuid,cpu,cpuacct 0 0\n"
	v2 := "cgroup /sys/fs/cgroup/cpuset cgroup rw,cpuset 0 0\ncgroup2 /sys/fs/cgroup cgroup2 rw,nsdelegate 0 0\n"
	controllers := func(list string) func(string) string {
		return func(string) string { return list }
	}
	for _, tc := range []struct {
		name, mounts, controllers string
		want                      cpuController
	}{
		{"v1", v1, "hugetlb", cpuController{root: "/sys/fs/cgroup/cpu"}},
		{"v1 joined", joined, "", cpuController{root: "/sys/fs/cgroup/cpu,cpuacct"}},
		{"v2", v2, "cpuset cpu io memory pids", cpuController{root: "/sys/fs/cgroup", v2: true}},
	} {
		got, err := findCPUController(tc.mounts, controllers(tc.controllers))
		if err != nil || got != tc.want {
			t.Errorf("%s: %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
	for _, tc := range []struct{ name, mounts, controllers string }{
		{"v2 without cpu", v2, "cpuset io memory pids"},
		{"no cgroups", "proc /proc proc rw 0 0\n", "cpu"},
	} {
		if got, err := findCPUController(tc.mounts, controllers(tc.controllers)); !errors.Is(err, errNoController) {
			t.Errorf("%s: %+v, %v; want errNoController", tc.name, got, err)
		}
	}
}

// TestLimitWrites checks the files and the order a quota is written in:
// v1's period before its quota; v2's cpu controller handed down first.
func TestLimitWrites(t *testing.T) {
	l := cpuLimit{quotaUs: 2_000, periodUs: 10_000}
	got := cpuController{root: "/cg/cpu"}.limitWrites("n1", l)
	want := []fileWrite{{"/cg/cpu/n1/cpu.cfs_period_us", "10000"}, {"/cg/cpu/n1/cpu.cfs_quota_us", "2000"}}
	if !slices.Equal(got, want) {
		t.Errorf("v1: %v, want %v", got, want)
	}
	got = cpuController{root: "/cg", v2: true}.limitWrites("n1", l)
	want = []fileWrite{{"/cg/cgroup.subtree_control", "+cpu"}, {"/cg/n1/cpu.max", "2000 10000"}}
	if !slices.Equal(got, want) {
		t.Errorf("v2: %v, want %v", got, want)
	}
}

// fakeOS records what a machine does to the system, and fails the steps
// named in fail.
type fakeOS struct {
	calls []string
	fail  map[string]bool
	procs []string // what cgroup.procs reads, one read each, then ""
}

func (f *fakeOS) do(call string) error {
	f.calls = append(f.calls, call)
	if f.fail[call] {
		return errors.New("failed")
	}
	return nil
}

func (f *fakeOS) mkdir(p string) error          { return f.do("mkdir " + p) }
func (f *fakeOS) rmdir(p string) error          { return f.do("rmdir " + p) }
func (f *fakeOS) write(p, v string) error       { return f.do("write " + p + " " + v) }
func (f *fakeOS) mountTmpfs(dir string) error   { return f.do("mount " + dir) }
func (f *fakeOS) unmount(dir string) error      { return f.do("unmount " + dir) }
func (f *fakeOS) kill(pid int) error            { return f.do(fmt.Sprint("kill ", pid)) }
func (f *fakeOS) read(p string) (string, error) { return f.readProcs(p) }

func (f *fakeOS) readProcs(p string) (string, error) {
	if err := f.do("read " + p); err != nil {
		return "", err
	}
	if len(f.procs) == 0 {
		return "", nil
	}
	s := f.procs[0]
	f.procs = f.procs[1:]
	return s, nil
}

// TestMachine_CleanupOrder checks that a machine is torn down in the one
// order the kernel allows: the processes in the cgroup killed, then the
// cgroup removed, then the tmpfs they held open unmounted, then its mount
// point removed; also when its setup fails half way, and past a step that
// fails.
func TestMachine_CleanupOrder(t *testing.T) {
	ctl := cpuController{root: "/cg"}
	spec := machineSpec{name: "m1", cores: 0.2, tmpfs: true, dir: "/data/n1"}
	setup := []string{"mkdir /data/n1", "mount /data/n1", "mkdir /cg/m1",
		"write /cg/m1/cpu.cfs_period_us 10000", "write /cg/m1/cpu.cfs_quota_us 2000"}
	teardown := []string{"read /cg/m1/cgroup.procs", "kill 41", "kill 42", "read /cg/m1/cgroup.procs",
		"rmdir /cg/m1", "unmount /data/n1", "rmdir /data/n1"}

	f := &fakeOS{procs: []string{"41\n42\n"}}
	m, err := newMachine(f, ctl, spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.add(41); err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(m.close(), m.close()); err != nil {
		t.Fatal(err)
	}
	want := slices.Concat(setup, []string{"write /cg/m1/cgroup.procs 41"}, teardown)
	if !slices.Equal(f.calls, want) {
		t.Errorf("calls:\n%s\nwant:\n%s", strings.Join(f.calls, "\n"), strings.Join(want, "\n"))
	}

	// The quota refused: what was set up is undone, in the same order.
	f = &fakeOS{fail: map[string]bool{"write /cg/m1/cpu.cfs_quota_us 2000": true}}
	if _, err := newMachine(f, ctl, spec); err == nil || !strings.Contains(err.Error(), "cpu.cfs_quota_us") {
		t.Fatalf("newMachine with the quota refused: %v, want an error naming the file", err)
	}
	want = slices.Concat(setup, []string{"read /cg/m1/cgroup.procs", "rmdir /cg/m1", "unmount /data/n1", "rmdir /data/n1"})
	if !slices.Equal(f.calls, want) {
		t.Errorf("calls with the quota refused:\n%s\nwant:\n%s", strings.Join(f.calls, "\n"), strings.Join(want, "\n"))
	}

	// A step that fails is reported, and the later ones still run.
	f = &fakeOS{fail: map[string]bool{"rmdir /cg/m1": true}}
	if m, err = newMachine(f, ctl, spec); err != nil {
		t.Fatal(err)
	}
	if err := m.close(); err == nil {
		t.Error("close with the cgroup not removed: no error")
	}
	if got := f.calls[len(f.calls)-2:]; !slices.Equal(got, []string{"unmount /data/n1", "rmdir /data/n1"}) {
		t.Errorf("after the failed rmdir: %v, want the unmount and the mount point's removal", got)
	}
}

// burnEnv makes the test binary burn CPU instead of running the tests:
// the child of TestMachine_Throttles.
const burnEnv = "GO_TEST_NATSDELAY_BENCH_BURN"

// burnStatEnv names the cpu.stat the burner reads.
const burnStatEnv = "GO_TEST_NATSDELAY_BENCH_BURN_STAT"

func TestMain(m *testing.M) {
	if os.Getenv(burnEnv) == "1" {
		burn()
		return
	}
	os.Exit(m.Run())
}

// burn says it started, so the test moves it into its cgroup after its
// start-up (which would take seconds of a small quota), waits for a line
// on stdin, which comes once it is in its cgroup,
// then spins until the cpu.stat named in burnStatEnv says the quota held
// it back, or it has used 2 s of CPU, which no quota would let it near;
// then it writes a line and waits for its SIGKILL: a race-built binary's
// exit alone takes seconds of a small quota.
func burn() {
	fmt.Println("started")
	if _, err := io.ReadFull(os.Stdin, make([]byte, 1)); err != nil {
		os.Exit(2)
	}
	stat := os.Getenv(burnStatEnv)
	for i := 0; ; i++ {
		if i%1_000_000 != 0 {
			continue
		}
		b, err := os.ReadFile(stat)
		if err != nil {
			os.Exit(3)
		}
		_, throttled := throttling(string(b))
		if c, ok := procCPU("self"); throttled > 0 || !ok || c >= 2*time.Second {
			break
		}
	}
	fmt.Println("done")
	select {}
}

// TestMachine_Throttles sets up a real machine, a cgroup at 0.05 core and
// a tmpfs, runs a CPU-burning child in it, and checks from the cgroup's
// own cpu.stat that the quota held it back; then that closing it removes
// the cgroup and the mount.
func TestMachine_Throttles(t *testing.T) {
	ctl, err := hostController(true)
	if err != nil {
		t.Skipf("no machine to set up here: %v", err)
	}
	dir := filepath.Join(t.TempDir(), "n1")
	m, err := newMachine(hostOS{}, ctl, machineSpec{name: fmt.Sprintf("natsdelay-bench-test-%d", os.Getpid()), cores: 0.05, tmpfs: true, dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer m.close()
	if !isTmpfs(t, dir) {
		t.Errorf("%s: no tmpfs mounted", dir)
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), burnEnv+"=1", burnStatEnv+"="+filepath.Join(ctl.dir(m.name), "cpu.stat"))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewReader(stdout)
	if _, err := lines.ReadString('\n'); err != nil {
		t.Fatalf("the burner did not start: %v", err)
	}
	if err := m.add(cmd.Process.Pid); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatal(err)
	}
	if _, err := stdin.Write([]byte("\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := lines.ReadString('\n'); err != nil {
		t.Fatalf("the burner: %v", err)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	periods, throttled := m.throttled()
	if throttled == 0 {
		t.Errorf("cpu.stat: %d periods, none throttled: the quota did not hold the burner back", periods)
	}
	t.Logf("cpu.stat: %d of %d periods throttled", throttled, periods)
	if err := m.close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(ctl.dir(m.name)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the cgroup is left after close: %v", err)
	}
	if isTmpfs(t, dir) {
		t.Errorf("%s: the tmpfs is left mounted after close", dir)
	}
}

// isTmpfs reports whether a tmpfs is mounted on dir.
func isTmpfs(t *testing.T, dir string) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/mounts")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) >= 3 && f[1] == dir && f[2] == "tmpfs" {
			return true
		}
	}
	return false
}

// TestHelpHasCell checks how the cells phase tells a natsdelay that runs
// cells: its help lists --cell itself.
func TestHelpHasCell(t *testing.T) {
	for help, want := range map[string]bool{
		"      --cell=NAME         Name of this cell.\n":       true,
		"  --node-id=ID, --cell NAME\n":                        true,
		"      --cells-dir=DIR  Not the flag.\n  --cellular\n": false,
		"      --partitions=N      Partitions of the fleet.\n": false,
	} {
		if got := helpHasCell(help); got != want {
			t.Errorf("helpHasCell(%q) = %v, want %v", help, got, want)
		}
	}
}

// TestMachine_AddAfterClose_Refused checks that a node started while a
// signal tears its machine down is not moved into the cgroup once the
// teardown has begun: moved in between the teardown's kill of the
// cgroup's processes and its removal of the cgroup, it kept the cgroup
// alive past the bench (the kernel refuses to remove a cgroup with a
// process in it). The caller kills a node it could not add.
func TestMachine_AddAfterClose_Refused(t *testing.T) {
	f := &fakeOS{}
	m, err := newMachine(f, cpuController{root: "/cg"}, machineSpec{name: "m1", cores: 0.2})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.close(); err != nil {
		t.Fatal(err)
	}
	if err := m.add(41); !errors.Is(err, errMachinesClosed) {
		t.Fatalf("add after close: %v, want it refused", err)
	}
	if slices.Contains(f.calls, "write /cg/m1/cgroup.procs 41") {
		t.Fatalf("calls %v: the process was moved into a cgroup torn down", f.calls)
	}
}
