package integration_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/keys"
)

var (
	binaryOnce sync.Once
	binaryPath string
	binaryErr  error
)

// natsdelayBinary builds the real binary once per test run, with the
// crashtest tag: its crash hooks, which the default build leaves out, are
// armed only by the tests that set them in the environment
// (recurring_crash_test.go).
func natsdelayBinary(t *testing.T) string {
	t.Helper()
	binaryOnce.Do(func() {
		dir, err := os.MkdirTemp("", "natsdelay-bin")
		if err != nil {
			binaryErr = err
			return
		}
		binaryPath = filepath.Join(dir, "natsdelay")
		out, err := exec.Command("go", "build", "-tags", "crashtest", "-o", binaryPath, "github.com/natsdelay/natsdelay/cmd/natsdelay").CombinedOutput()
		if err != nil {
			binaryErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binaryErr != nil {
		t.Fatal(binaryErr)
	}
	return binaryPath
}

// serviceProcess is the binary running as a child process.
type serviceProcess struct {
	cmd   *exec.Cmd
	ready chan struct{}
	done  chan struct{}
	tail  *strings.Builder
	mu    sync.Mutex
}

// startProcess runs natsdelay serve on the pebble engine against the NATS
// server at url with its data in dir and no HTTP listener, and waits until
// it says it is ready.
func startProcess(t *testing.T, bin, url, dir string, args ...string) *serviceProcess {
	t.Helper()
	return launch(t, bin, []string{"NATSDELAY_HTTP="},
		append([]string{"serve", "--nats", url, "--data-dir", dir, "--engine", "pebble", "--ack-wait", "1s"}, args...)...)
}

// launch runs the binary with args and env added to the test's
// environment, and waits until it says it is ready.
func launch(t *testing.T, bin string, env []string, args ...string) *serviceProcess {
	t.Helper()
	p := spawn(t, bin, env, args...)
	p.waitReady(t)
	return p
}

// spawn runs the binary with args and env added to the test's
// environment, without waiting for it: see waitReady.
func spawn(t *testing.T, bin string, env []string, args ...string) *serviceProcess {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &serviceProcess{cmd: cmd, ready: make(chan struct{}), done: make(chan struct{}), tail: &strings.Builder{}}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		// Owned by the process: it ends when the child's stderr closes.
		defer close(p.done)
		sc := bufio.NewScanner(stderr)
		readied := false
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.tail.WriteString(line + "\n")
			p.mu.Unlock()
			if !readied && strings.Contains(line, `msg="natsdelay ready"`) {
				readied = true
				close(p.ready)
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	return p
}

// waitReady waits until the process says it is ready, and fails the test
// if it exits first or takes a minute.
func (p *serviceProcess) waitReady(t *testing.T) {
	t.Helper()
	select {
	case <-p.ready:
	case <-p.done:
		t.Fatalf("natsdelay exited before it was ready:\n%s", p.output())
	case <-time.After(60 * time.Second):
		_ = p.cmd.Process.Kill()
		t.Fatalf("natsdelay not ready:\n%s", p.output())
	}
}

func (p *serviceProcess) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.tail.String()
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *serviceProcess) kill(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
	_ = p.cmd.Wait()
}

// stop sends SIGTERM and expects a clean exit.
func (p *serviceProcess) stop(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		t.Fatalf("natsdelay did not stop on SIGTERM:\n%s", p.output())
	}
	if err := p.cmd.Wait(); err != nil {
		t.Fatalf("natsdelay exited with %v:\n%s", err, p.output())
	}
}

// TestCrash_SIGKILL_NothingAcknowledgedLost runs the real binary, sends
// acknowledged messages while it delivers, SIGKILLs it mid-stream several
// times and restarts it on the same data dir. It checks the promises that
// must survive a crash: every message whose ingest reply was received is
// delivered (and ACKed) at least once, none is delivered before its fire
// time, and no event ID is ever assigned twice.
func TestCrash_SIGKILL_NothingAcknowledgedLost(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := natsdelayBinary(t)
	srv := startServer(t)
	url := srv.ClientURL()
	dir := t.TempDir()

	consumer, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	var (
		mu        sync.Mutex
		acked     = map[string]time.Time{} // tag -> fire time from the reply
		ids       = map[uint64]string{}
		delivered = map[string]int{}
		early     []string
		reused    []string
	)
	sub, err := consumer.Subscribe("crash.>", func(m *nats.Msg) {
		now := time.Now()
		tag := m.Header.Get("Delay-Tag")
		fire, err := time.Parse(time.RFC3339Nano, m.Header.Get("Delay-Fire-At"))
		mu.Lock()
		// Delay-Fire-At is rounded down to the millisecond.
		if err != nil || now.Before(fire) {
			early = append(early, tag)
		}
		delivered[tag]++
		mu.Unlock()
		_ = m.Respond(nil)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	_ = sub.SetPendingLimits(-1, -1)

	publisher, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer publisher.Close()
	r := rand.New(rand.NewPCG(7, 7))
	publish := func(n int) {
		for i := 0; i < n; i++ {
			m := nats.NewMsg(fmt.Sprintf("delay.crash.s%d", r.IntN(4)))
			m.Header.Set("Delay", fmt.Sprintf("%dms", r.IntN(400)))
			m.Data = []byte("payload")
			rep, err := publisher.RequestMsg(m, 2*time.Second)
			if err != nil || rep.Header.Get("Nats-Service-Error") != "" {
				continue // not acknowledged: no promise was made
			}
			var body struct {
				Tag    string `json:"tag"`
				FireAt string `json:"fire_at"`
			}
			if json.Unmarshal(rep.Data, &body) != nil {
				t.Errorf("reply %q", rep.Data)
				continue
			}
			k, err := keys.ParseTag(body.Tag)
			if err != nil {
				t.Errorf("reply tag %q: %v", body.Tag, err)
				continue
			}
			fire, _ := time.Parse(time.RFC3339Nano, body.FireAt)
			mu.Lock()
			acked[body.Tag] = fire
			if prev, ok := ids[k.EventID()]; ok && prev != body.Tag {
				reused = append(reused, body.Tag)
			}
			ids[k.EventID()] = body.Tag
			mu.Unlock()
		}
	}

	const kills = 4
	for round := range kills {
		p := startProcess(t, bin, url, dir)
		// Kill while requests are in flight and deliveries are going out.
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			publish(150)
		}()
		checkFor(t, 30*time.Second, 5*time.Millisecond, func() error {
			mu.Lock()
			defer mu.Unlock()
			if len(acked) < (round+1)*100 {
				return fmt.Errorf("%d acknowledged", len(acked))
			}
			return nil
		})
		p.kill(t)
		wg.Wait()
	}
	p := startProcess(t, bin, url, dir)
	defer p.stop(t)
	checkFor(t, 60*time.Second, 20*time.Millisecond, func() error {
		mu.Lock()
		defer mu.Unlock()
		missing := 0
		for tag := range acked {
			if delivered[tag] == 0 {
				missing++
			}
		}
		if missing > 0 {
			return fmt.Errorf("%d of %d acknowledged messages not delivered", missing, len(acked))
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	if len(early) > 0 {
		t.Errorf("%d deliveries before their fire time, e.g. %s", len(early), early[0])
	}
	if len(reused) > 0 {
		t.Errorf("%d event IDs assigned twice, e.g. %s", len(reused), reused[0])
	}
	redeliveries := 0
	for _, n := range delivered {
		redeliveries += max(n-1, 0)
	}
	t.Logf("kills survived: %d, acknowledged messages checked: %d, deliveries: %d, redeliveries: %d, lost: 0",
		kills, len(acked), len(delivered), redeliveries)
}
