package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/natsdelay/natsdelay/bridge/wire"
)

// service is a natsdelay the scale and expiry phases run against: in this
// process, or in a child process of its own, whose memory is then its alone.
type service interface {
	// hasPending reports whether subject has a pending message.
	hasPending(subject string) (bool, error)
	// rss is the resident set, in bytes, of the process natsdelay runs in,
	// and its peak; 0 where there is no /proc.
	rss() (now, peak int64)
	// pending is the number of messages pending in all.
	pending() (uint64, error)
	// mem samples natsdelay's memory.
	mem() (MemSample, error)
	// pid is natsdelay's own process, or 0 where it runs in this one.
	pid() int
	// eventStats is how many lifecycle events natsdelay published and
	// dropped; -1, -1 where it cannot tell.
	eventStats() (published, dropped int64)
	close() error
}

// hasPending and pending ask the service as the process's do, through
// the methods its API answers with: LIST with a limit of 1, and INFO.
func (d *delay) hasPending(subject string) (bool, error) {
	one := 1
	list, err := d.svc.List(wire.ListRequest{Subject: subject, Limit: &one})
	return err == nil && len(list.Messages) > 0, err
}

func (d *delay) pending() (uint64, error) {
	info, err := d.svc.Info()
	if err != nil {
		return 0, fmt.Errorf("bench: INFO: %w", err)
	}
	return info.Counts.Pending, nil
}

func (d *delay) mem() (MemSample, error) {
	rss, _ := d.rss()
	return MemSample{RSSBytes: rss, HeapBytes: -1, DispatchSubjects: int64(d.svc.Stats().Topics), Releases: -1}, nil
}

func (d *delay) pid() int { return 0 }

func (d *delay) eventStats() (int64, int64) {
	st := d.svc.Events().Stats()
	return int64(st.Published), int64(st.Dropped + st.Failed + st.Fenced)
}

func (d *delay) rss() (int64, int64) { return procRSS("self") }

// openService starts natsdelay on dir: as a child process when the config
// names a command for it, else in this process.
func (e *env) openService(dir string) (service, error) {
	if len(e.cfg.ServiceCommand) == 0 {
		return e.openDelay(dir)
	}
	return e.startProcess(dir)
}

// openMeasured starts natsdelay for ingest, fire and end to end: in this
// process, unless the config asks for its own so that its CPU time is
// counted apart.
func (e *env) openMeasured(dir string) (service, error) {
	if e.cfg.OwnProcess {
		return e.startProcess(dir)
	}
	return e.openDelay(dir)
}

// process is `natsdelay serve` as a child process, on the bench's server,
// or the floor service (see floor.go).
type process struct {
	e      *env
	name   string // in errors: "natsdelay", "the floor"
	cmd    *exec.Cmd
	stderr *tailBuffer
	http   string        // base URL of its HTTP listener
	exited chan struct{} // closed once cmd.Wait returned
	err    error         // from cmd.Wait, once exited is closed
}

// startProcess runs ServiceCommand with the flags that put natsdelay on
// the bench's server and subjects, and waits until its API answers. Its
// HTTP listener takes a free loopback port, which its ready log line
// names; the bench reads the memory figures there, and asks for a
// collection before it does through --pprof's heap profile.
func (e *env) startProcess(dir string) (*process, error) {
	args := append(e.cfg.ServiceCommand[1:len(e.cfg.ServiceCommand):len(e.cfg.ServiceCommand)],
		"--nats", e.url, "--data-dir", dir, "--engine", "pebble",
		"--ingest-prefix", e.ingest, "--ack-prefix", e.ack, "--api-prefix", e.api,
		"--expiry-interval", e.cfg.ExpiryInterval.String(), "--http", "127.0.0.1:0", "--pprof",
		"--log-format", "text")
	if e.cfg.IdleRelease != 0 {
		args = append(args, "--idle-release", e.cfg.IdleRelease.String())
	}
	if e.withEvents {
		args = append(args, "--events", "--event-prefix", e.events)
	}
	p := &process{e: e, name: "natsdelay", cmd: exec.Command(e.cfg.ServiceCommand[0], args...), stderr: &tailBuffer{max: 8 << 10}, exited: make(chan struct{})}
	ready := &readyLine{found: make(chan string, 1)}
	p.cmd.Stderr = io.MultiWriter(p.stderr, ready)
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: start %s: %w", e.cfg.ServiceCommand[0], err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	deadline := time.Now().Add(e.cfg.Timeout)
	for {
		if p.http == "" {
			select {
			case addr := <-ready.found:
				p.http = "http://" + addr
			default:
			}
		}
		if _, err := p.hasPending(e.plain); err == nil && p.http != "" {
			return p, nil
		}
		select {
		case <-p.exited:
			return nil, fmt.Errorf("bench: natsdelay exited before it was ready: %v\n%s", p.err, p.stderr)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return nil, errors.Join(fmt.Errorf("bench: natsdelay not ready after %v\n%s", e.cfg.Timeout, p.stderr), p.close())
		}
	}
}

// NB: LIST with a limit of 1 reads one key; INFO would count every
// message due within a day, which is all of them in the scale phase.
func (p *process) hasPending(subject string) (bool, error) {
	one := 1
	list, err := p.e.client(time.Second).ListPage(context.Background(), wire.ListRequest{Subject: subject, Limit: &one})
	return err == nil && len(list.Messages) > 0, err
}

func (p *process) rss() (int64, int64) { return procRSS(strconv.Itoa(p.cmd.Process.Pid)) }

func (p *process) pid() int { return p.cmd.Process.Pid }

func (p *process) eventStats() (int64, int64) {
	c := http.Client{Timeout: p.e.cfg.Timeout}
	resp, err := c.Get(p.http + "/metrics")
	if err != nil {
		return -1, -1
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return -1, -1
	}
	return eventStats(b)
}

// Every message pending is natsdelay's own count, not a scan; but
// INFO's counts by due window read every subject, so it is given the
// run's timeout.
func (p *process) pending() (uint64, error) {
	info, err := p.e.client(p.e.cfg.Timeout).Info(context.Background())
	if err != nil {
		return 0, fmt.Errorf("bench: INFO: %w", err)
	}
	return info.Counts.Pending, nil
}

// mem asks natsdelay for a garbage collection, so the heap is what is
// live, then reads its RSS and its /metrics.
func (p *process) mem() (MemSample, error) {
	m := MemSample{HeapBytes: -1, DispatchSubjects: -1, Releases: -1}
	c := http.Client{Timeout: p.e.cfg.Timeout}
	get := func(path string) ([]byte, error) {
		resp, err := c.Get(p.http + path)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("GET %s: %s", path, resp.Status)
		}
		return b, err
	}
	if _, err := get("/debug/pprof/heap?gc=1"); err != nil {
		return m, fmt.Errorf("bench: natsdelay's heap: %w", err)
	}
	m.RSSBytes, _ = p.rss()
	b, err := get("/metrics")
	if err != nil {
		return m, fmt.Errorf("bench: natsdelay's metrics: %w", err)
	}
	if v, ok := metric(b, "go_memstats_heap_alloc_bytes"); ok {
		m.HeapBytes = int64(v)
	}
	if v, ok := metric(b, "natsdelay_dispatch_subjects"); ok {
		m.DispatchSubjects = int64(v)
	}
	if v, ok := metric(b, "natsdelay_memory_releases_total"); ok {
		m.Releases = int64(v)
	}
	sys, _ := metric(b, "go_memstats_sys_bytes")
	released, _ := metric(b, "go_memstats_heap_released_bytes")
	inuse, _ := metric(b, "go_memstats_heap_inuse_bytes")
	m.GoHeldBytes, m.HeapInuseBytes = int64(sys-released), int64(inuse)
	m.RSSAnonBytes, m.RSSFileBytes = procRSSParts(strconv.Itoa(p.pid()))
	return m, nil
}

// metric finds the sample of an unlabelled metric in a Prometheus text
// exposition.
func metric(exposition []byte, name string) (float64, bool) {
	for line := range strings.Lines(string(exposition)) {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == name {
			v, err := strconv.ParseFloat(f[1], 64)
			return v, err == nil
		}
	}
	return 0, false
}

// readyLine watches a text log for natsdelay's ready line and sends the
// address of the HTTP listener it names on found, once.
type readyLine struct {
	found chan string // buffered, 1
	mu    sync.Mutex
	buf   []byte
	done  bool
}

func (r *readyLine) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done {
		return len(p), nil
	}
	r.buf = append(r.buf, p...)
	for {
		i := bytes.IndexByte(r.buf, '\n')
		if i < 0 {
			break
		}
		if addr, ok := httpAddr(string(r.buf[:i])); ok {
			r.found <- addr
			r.done, r.buf = true, nil
			break
		}
		r.buf = r.buf[i+1:]
	}
	return len(p), nil
}

// httpAddr returns the http attribute of serve's text-format ready line.
func httpAddr(line string) (string, bool) {
	if !strings.Contains(line, `msg="natsdelay ready"`) {
		return "", false
	}
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, "http="); ok && v != "off" {
			return v, true
		}
	}
	return "", false
}

// close stops the process as a supervisor would, with SIGTERM, and kills it
// if it has not stopped within the timeout.
func (p *process) close() error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(p.e.cfg.Timeout):
		_ = p.cmd.Process.Kill()
		<-p.exited
		return fmt.Errorf("bench: %s did not stop within %v\n%s", p.name, p.e.cfg.Timeout, p.stderr)
	}
	if p.err != nil {
		return fmt.Errorf("bench: %s: %w\n%s", p.name, p.err, p.stderr)
	}
	return nil
}

// procRSS reads VmRSS and VmHWM of /proc/<pid>/status. For this process it
// first gives freed memory back, so the figure is closer to what is live.
func procRSS(pid string) (now, peak int64) {
	if pid == "self" {
		freeOSMemory()
	}
	f, err := os.Open("/proc/" + pid + "/status")
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	kb := func(v string) int64 {
		n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
		return n << 10
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			now = kb(v)
		} else if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			peak = kb(v)
		}
	}
	return now, peak
}

// procRSSParts reads RssAnon and RssFile of /proc/<pid>/status: the
// anonymous and the file-backed parts of the resident set; 0, 0 where
// there is no /proc.
func procRSSParts(pid string) (anon, file int64) {
	b, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return 0, 0
	}
	kb := func(v string) int64 {
		n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
		return n << 10
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "RssAnon:"); ok {
			anon = kb(v)
		} else if v, ok := strings.CutPrefix(line, "RssFile:"); ok {
			file = kb(v)
		}
	}
	return anon, file
}

// tailBuffer keeps the last max bytes written to it, for error messages.
type tailBuffer struct {
	max int
	mu  sync.Mutex
	b   bytes.Buffer
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b.Write(p)
	if over := t.b.Len() - t.max; over > 0 {
		t.b.Next(over)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.b.String()
}
