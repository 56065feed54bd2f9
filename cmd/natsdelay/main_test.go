package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/natsdelay/natsdelay/cmd/natsdelay/internal/server"
)

// execEnv makes the test binary run main instead of the tests, so the
// process tests run the real command, built once, with the race detector
// when the tests have it.
const execEnv = "GO_TEST_NATSDELAY_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(execEnv) == "1" {
		os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	// The tests choose their own settings; settings of the shell that runs
	// them must not leak in, neither here nor into the commands started.
	// The same goes for the nats CLI's settings: NATS_URL, NATS_CONTEXT and
	// the contexts under XDG_CONFIG_HOME (or HOME/.config).
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, "NATSDELAY_") || strings.HasPrefix(name, "NATS_") {
			os.Unsetenv(name)
		}
	}
	cfg, err := os.MkdirTemp("", "natsdelay-test-config")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv("XDG_CONFIG_HOME", cfg)
	flag.Parse()
	startOlderBuilds()
	code := m.Run()
	os.RemoveAll(cfg)
	removeOlderBuild()
	os.Exit(code)
}

// proc is a natsdelay command running as a child process.
type proc struct {
	name   string
	cmd    *exec.Cmd
	stdout lines
	stderr lines
	done   chan struct{} // closed when the process has exited
}

// start runs natsdelay with args. The process is killed at the end of the
// test if it is still running, and its output is logged if the test failed.
func start(t testing.TB, args ...string) *proc {
	t.Helper()
	return startIn(t, "", args...)
}

// startIn is start with stdin.
func startIn(t testing.TB, stdin string, args ...string) *proc {
	t.Helper()
	return startEnv(t, nil, stdin, args...)
}

// startEnv is startIn with env, KEY=VALUE pairs, added to the environment.
func startEnv(t testing.TB, env []string, stdin string, args ...string) *proc {
	t.Helper()
	return startExe(t, os.Args[0], env, stdin, args...)
}

// startExe is startEnv for the executable exe: the test binary, which
// runs main, or another build of natsdelay.
func startExe(t testing.TB, exe string, env []string, stdin string, args ...string) *proc {
	t.Helper()
	p := &proc{name: strings.Join(args, " "), done: make(chan struct{})}
	p.stdout.init()
	p.stderr.init()
	p.cmd = exec.Command(exe, args...)
	// NB: a race-enabled binary sleeps a second at exit unless told not to.
	// NB: serve's HTTP listener takes any free port unless a test says
	// otherwise, so that tests running in parallel do not fight over 7070.
	p.cmd.Env = append(os.Environ(), execEnv+"=1", "GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"),
		"NATSDELAY_HTTP=127.0.0.1:0")
	p.cmd.Env = append(p.cmd.Env, env...)
	p.cmd.Stdin = strings.NewReader(stdin)
	p.cmd.Stdout = &p.stdout
	p.cmd.Stderr = &p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start natsdelay %s: %v", p.name, err)
	}
	go func() {
		// Wait also waits for the copying of the output to finish.
		_ = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("natsdelay %s\nstdout:\n%s\nstderr:\n%s", p.name, p.stdout.String(), p.stderr.String())
		}
	})
	return p
}

// slowMachine is how many times longer than on a quiet machine a process
// may take to exit: the race detector on two cores doing other work. A
// passing test never waits that long, and a hung process is still found.
const slowMachine = 3

// wait waits for the process to exit and returns its exit code. timeout
// is what it takes on a quiet machine at most; see slowMachine.
func (p *proc) wait(t testing.TB, timeout time.Duration) int {
	t.Helper()
	limit := slowMachine * timeout
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(limit):
		t.Fatalf("natsdelay %s: still running after %v", p.name, limit)
		return -1
	}
}

// signal sends sig to the process.
func (p *proc) signal(t testing.TB, sig os.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Fatalf("signal natsdelay %s: %v", p.name, err)
	}
}

// waitLine waits for a line of stderr that matches re and returns its
// submatches. It fails if the process exits first.
func (p *proc) waitLine(t testing.TB, re string, timeout time.Duration) []string {
	t.Helper()
	m, exited := p.stderr.waitLine(re, timeout, p.done)
	switch {
	case m != nil:
		return m
	case exited:
		t.Fatalf("natsdelay %s exited (code %d) before logging a line matching %s", p.name, p.cmd.ProcessState.ExitCode(), re)
	default:
		t.Fatalf("natsdelay %s: no line matching %s within %v", p.name, re, timeout)
	}
	return nil
}

// serve starts natsdelay serve, the process, on a free port with extra
// args and returns it with the NATS URL from its ready line. Tests that
// need no process use serveInProcess.
func serve(t testing.TB, dataDir string, extra ...string) (*proc, string) {
	t.Helper()
	p := start(t, append([]string{"serve", "--nats-listen", "127.0.0.1:0", "--data-dir", dataDir}, extra...)...)
	m := p.waitLine(t, `msg="natsdelay ready" nats_url=(\S+) `, 30*time.Second)
	return p, m[1]
}

// inProcess is a natsdelay server running in the test's own process: the
// settings serve parses from its flags, and the server.Open and Close that
// serve runs, without the process around them. Tests of serving use it;
// a test starts the binary (start, serve) only for what takes a process:
// signals, exit codes, what the command prints, a crash.
type inProcess struct {
	*server.Server
	args string
	log  lines // what serve would have logged
}

// openServe opens in this process the server that natsdelay serve with
// args runs, with the HTTP listener on a free port unless args say
// otherwise, and closes it when t ends.
func openServe(t testing.TB, args ...string) *inProcess {
	t.Helper()
	p := &inProcess{args: strings.Join(args, " ")}
	p.log.init()
	c := parseServe(t, append([]string{"serve", "--http", "127.0.0.1:0"}, args...)...)
	o, err := c.serverOptions(newLogger(&p.log, "info", "text"))
	if err != nil {
		t.Fatalf("serve %s: %v", p.args, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if p.Server, err = server.Open(ctx, o); err != nil {
		t.Fatalf("serve %s in process: %v\n%s", p.args, err, p.log.String())
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("serve %s in process: Close: %v", p.args, err)
		}
		if t.Failed() {
			t.Logf("serve %s in process logged:\n%s", p.args, p.log.String())
		}
	})
	return p
}

// serveInProcess is openServe with an embedded nats-server on a free port
// and the store in dataDir, as serve (the process) runs.
func serveInProcess(t testing.TB, dataDir string, extra ...string) *inProcess {
	t.Helper()
	return openServe(t, append([]string{"--nats-listen", "127.0.0.1:0", "--data-dir", dataDir}, extra...)...)
}

// httpURL is the base URL of the server's HTTP listener.
func (p *inProcess) httpURL() string { return "http://" + p.HTTPAddr() }

// waitLine waits for a line the server logged that matches re and returns
// its submatches.
func (p *inProcess) waitLine(t testing.TB, re string, timeout time.Duration) []string {
	t.Helper()
	m, _ := p.log.waitLine(re, timeout, nil)
	if m == nil {
		t.Fatalf("serve %s in process: no line matching %s within %v", p.args, re, timeout)
	}
	return m
}

// lines is an io.Writer that keeps what it is given as lines and tells
// waiters when a line arrives. It is safe for concurrent use.
type lines struct {
	mu      sync.Mutex
	buf     bytes.Buffer // everything written
	partial []byte       // the start of a line not ended yet
	lines   []string
	changed chan struct{} // closed and replaced when a line arrives
}

func (l *lines) init() { l.changed = make(chan struct{}) }

func (l *lines) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(b)
	l.partial = append(l.partial, b...)
	added := false
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			break
		}
		l.lines = append(l.lines, string(l.partial[:i]))
		l.partial = l.partial[i+1:]
		added = true
	}
	if added {
		close(l.changed)
		l.changed = make(chan struct{})
	}
	return len(b), nil
}

// waitLine waits for a line that matches re and returns its submatches,
// or nil after timeout, or once done is closed and no line that came
// before matches (exited is then true).
func (l *lines) waitLine(re string, timeout time.Duration, done <-chan struct{}) (m []string, exited bool) {
	rx := regexp.MustCompile(re)
	deadline := time.After(timeout)
	for i := 0; ; {
		ls, changed := l.since(i)
		for _, line := range ls {
			if m := rx.FindStringSubmatch(line); m != nil {
				return m, false
			}
		}
		i += len(ls)
		select {
		case <-changed:
		case <-done:
			if ls, _ := l.since(i); len(ls) > 0 {
				continue
			}
			return nil, true
		case <-deadline:
			return nil, false
		}
	}
}

// since returns the lines from i on, and a channel closed when more come.
func (l *lines) since(i int) ([]string, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines[i:]...), l.changed
}

func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}
