package main

import (
	"archive/tar"
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/test"
	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/delaystore/boltstore"
	"github.com/natsdelay/natsdelay/delaystore/engine"
)

// beforeIndexVersion is the last version whose stores carried no
// index-version: a store it opens is checked only by the keys it knew.
const beforeIndexVersion = "2e05afa"

// beforePlannedByIndex is the last version that rewrote every
// occurrence it planned as planned (index-version 4): it would read an
// occurrence this version planned in place as still to plan.
const beforePlannedByIndex = "360c0a3"

// beforeRaftLog is the last version that kept a cluster node's Raft log
// in raft.db: it would start on raft.db's entries, out of date once this
// version has copied them to log/.
const beforeRaftLog = "1e2fc14"

// olderTests are the commits tests build, with the tests that build
// each: TestMain starts building those that -run selects (see
// startOlderBuilds).
var olderTests = map[string][]string{
	beforeIndexVersion:   {"TestServe_OlderVersion_RefusesStoreOfThisVersion"},
	beforePlannedByIndex: {"TestServe_VersionBeforePlannedByIndex_RefusesStoreOfThisVersion"},
	beforeRaftLog:        {"TestCluster_VersionBeforeRaftLog_RefusesNodeDirOfThisVersion"},
	previousRelease:      {"TestCluster_RollingUpgrade_FromPreviousRelease", "TestCluster_RollingUpgrade_OldLeaderAfterNewOne_ServesOnceRolled"},
}

// olderBuilds are the earlier versions of natsdelay this test binary
// built, one per commit, each built once whichever tests ask for it.
var olderBuilds struct {
	mu   sync.Mutex
	dir  string // removed by TestMain
	revs map[string]*olderBuild
	// building is held through one build: a second build then finds the
	// dependencies the first compiled in Go's build cache, where two at
	// once would each compile them.
	building sync.Mutex
	// started is closed once the builds TestMain started are done.
	started chan struct{}
	// env is the environment the builds run in, as TestMain left it: a
	// test's t.Setenv must not reach a build running beside it (one that
	// set XDG_CONFIG_HOME had the go command write its telemetry counters
	// into the test's directory after the test had removed it).
	env []string
}

// olderBuild is natsdelay built at one commit.
type olderBuild struct {
	once sync.Once
	rev  string
	bin  string
	skip string // why the build is not possible here
	err  error
	took time.Duration
}

// olderBuildOf returns the build of rev, built or not.
func olderBuildOf(rev string) *olderBuild {
	olderBuilds.mu.Lock()
	defer olderBuilds.mu.Unlock()
	if olderBuilds.revs == nil {
		olderBuilds.revs = map[string]*olderBuild{}
	}
	b := olderBuilds.revs[rev]
	if b == nil {
		b = &olderBuild{rev: rev}
		olderBuilds.revs[rev] = b
	}
	return b
}

// build builds b's commit, once; a second caller waits for the first.
func (b *olderBuild) build() {
	b.once.Do(func() {
		olderBuilds.building.Lock()
		defer olderBuilds.building.Unlock()
		start := time.Now()
		b.bin, b.skip, b.err = buildAt(b.rev)
		b.took = time.Since(start)
	})
}

// startOlderBuilds starts building, one after the other, the commits of
// olderTests whose tests the -run and -skip flags select, so that the
// builds, which take a minute or more of CPU each, overlap the tests
// that need none: a test that waited for its build from its start would
// hold one of the -parallel slots meanwhile. buildOlder builds what this
// did not. Flags must be parsed.
func startOlderBuilds() {
	olderBuilds.started = make(chan struct{})
	olderBuilds.env = os.Environ()
	var revs []string
	for rev, tests := range olderTests {
		if slices.ContainsFunc(tests, selected) {
			revs = append(revs, rev)
		}
	}
	slices.Sort(revs)
	go func() {
		defer close(olderBuilds.started)
		for _, rev := range revs {
			olderBuildOf(rev).build()
		}
	}()
}

// selected reports whether the -run and -skip flags select the top-level
// test name; a pattern it cannot read selects it.
func selected(name string) bool {
	match := func(flagName string, empty bool) bool {
		f := flag.Lookup(flagName)
		if f == nil || f.Value.String() == "" {
			return empty
		}
		top, _, _ := strings.Cut(f.Value.String(), "/")
		re, err := regexp.Compile(top)
		return err != nil || re.MatchString(name)
	}
	return match("test.run", true) && !match("test.skip", false)
}

// buildOlder returns the path of natsdelay built at commit rev, from this
// checkout's history, built once per test binary. It skips the test when
// the history is not there (a source archive, a shallow clone), and fails
// it when the build fails.
func buildOlder(t *testing.T, rev string) string {
	t.Helper()
	b := olderBuildOf(rev)
	b.build()
	switch {
	case b.skip != "":
		t.Skip(b.skip)
	case b.err != nil:
		t.Fatalf("build natsdelay at %s: %v", rev, b.err)
	}
	t.Logf("natsdelay at %s, built in %v", rev, b.took.Round(time.Second))
	return b.bin
}

// olderDir returns the directory the earlier builds go in, made on first
// use.
func olderDir() (string, error) {
	olderBuilds.mu.Lock()
	defer olderBuilds.mu.Unlock()
	if olderBuilds.dir == "" {
		dir, err := os.MkdirTemp("", "natsdelay-older")
		if err != nil {
			return "", err
		}
		olderBuilds.dir = dir
	}
	return olderBuilds.dir, nil
}

func buildAt(rev string) (bin, skip string, err error) {
	if _, err := exec.LookPath("git"); err != nil {
		return "", "git is not installed, so the earlier version cannot be built", nil
	}
	if out, err := exec.Command("git", "cat-file", "-e", rev+"^{commit}").CombinedOutput(); err != nil {
		return "", fmt.Sprintf("commit %s is not in this checkout's history (%v: %s), so it cannot be built", rev, err, bytes.TrimSpace(out)), nil
	}
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return "", "", fmt.Errorf("git rev-parse --show-toplevel: %w", err)
	}
	dir, err := olderDir()
	if err != nil {
		return "", "", err
	}
	src := filepath.Join(dir, "src-"+rev)
	// NB: from the top: in a subdirectory git archive takes only that.
	archive := exec.Command("git", "archive", "--format=tar", rev)
	archive.Dir = string(bytes.TrimSpace(top))
	var stderr bytes.Buffer
	archive.Stderr = &stderr
	out, err := archive.Output()
	if err != nil {
		return "", "", fmt.Errorf("git archive %s: %w: %s", rev, err, stderr.Bytes())
	}
	if err := untar(src, bytes.NewReader(out)); err != nil {
		return "", "", err
	}
	bin = filepath.Join(dir, "natsdelay-"+rev)
	build := exec.Command("go", "build", "-o", bin, "./cmd/natsdelay")
	build.Dir = src
	// NB: no VCS stamp: the extracted tree is not a repository.
	env := olderBuilds.env
	if env == nil {
		env = os.Environ() // no TestMain started the builds
	}
	build.Env = append(slices.Clip(env), "GOFLAGS=-buildvcs=false")
	if out, err := build.CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("go build: %w: %s", err, out)
	}
	return bin, "", nil
}

// untar writes the regular files and directories of a tar stream under dir.
func untar(dir string, r io.Reader) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read archive: %w", err)
		}
		path := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(path, dir+string(filepath.Separator)) {
			return fmt.Errorf("archive entry %q leaves %s", h.Name, dir)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(path, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		}
	}
}

// removeOlderBuild waits for the builds startOlderBuilds started, and
// removes what was built.
func removeOlderBuild() {
	if olderBuilds.started != nil {
		<-olderBuilds.started
	}
	if olderBuilds.dir != "" {
		os.RemoveAll(olderBuilds.dir)
	}
}

// TestServe_OlderVersion_RefusesStoreOfThisVersion checks that no
// downgrade loses messages: a store this version wrote is refused, with a
// message and a failing exit code, by a version from before index-version
// existed, which would otherwise take messages that this version never
// delivers; and this version still opens the store afterwards, with its
// message pending.
func TestServe_OlderVersion_RefusesStoreOfThisVersion(t *testing.T) {
	t.Parallel()
	older := buildOlder(t, beforeIndexVersion)
	for _, engine := range []string{"pebble", "bolt"} {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			srv := serveInProcess(t, dir, "--engine", engine)
			schedule(t, srv.URL(), "jobs.later", "x", "--delay", "1h")
			if err := srv.Close(); err != nil {
				t.Fatalf("serve: Close: %v", err)
			}

			old := startExe(t, older, nil, "", "serve", "--nats-listen", "127.0.0.1:0", "--data-dir", dir, "--engine", engine)
			code := old.wait(t, 30*time.Second)
			e := old.stderr.String()
			if code != exitRuntime || strings.Contains(e, "natsdelay ready") {
				t.Fatalf("version %s on a store of this version: exit code %d, stderr %q; want it refused with %d before it serves", beforeIndexVersion, code, e, exitRuntime)
			}
			if !strings.Contains(e, "written by a newer natsdelay") {
				t.Fatalf("version %s printed %q, want that the store was written by a newer natsdelay", beforeIndexVersion, e)
			}
			ls := strings.Split(strings.TrimSpace(e), "\n")
			t.Logf("version %s refused the store: exit code %d, %s", beforeIndexVersion, code, ls[len(ls)-1])

			again := serveInProcess(t, dir, "--engine", engine)
			if out := mustRun(t, "info", "--nats", again.URL()); !regexp.MustCompile(`(?m)^pending\s+1$`).MatchString(out) {
				t.Fatalf("info after the refused downgrade:\n%s\nwant the message still pending", out)
			}
		})
	}
}

// TestServe_VersionBeforePlannedByIndex_RefusesStoreOfThisVersion checks
// that the version before occurrences were planned in place (index-version
// 4), which would plan such an occurrence a second time, refuses a store
// this version wrote (with a recurring schedule in it), with the error its
// check of index-version gives and a failing exit code before it serves;
// and that this version opens the store again afterwards, with the
// schedule's occurrence pending.
func TestServe_VersionBeforePlannedByIndex_RefusesStoreOfThisVersion(t *testing.T) {
	t.Parallel()
	older := buildOlder(t, beforePlannedByIndex)
	for _, engine := range []string{"pebble", "bolt"} {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			srv := serveInProcess(t, dir, "--engine", engine)
			schedule(t, srv.URL(), "jobs.every", "x", "--every", "1h", "--id", "hourly")
			if err := srv.Close(); err != nil {
				t.Fatalf("serve: Close: %v", err)
			}

			old := startExe(t, older, nil, "", "serve", "--nats-listen", "127.0.0.1:0", "--data-dir", dir, "--engine", engine)
			code := old.wait(t, 30*time.Second)
			e := old.stderr.String()
			if code != exitRuntime || strings.Contains(e, "natsdelay ready") {
				t.Fatalf("version %s on a store of this version: exit code %d, stderr %q; want it refused with %d before it serves", beforePlannedByIndex, code, e, exitRuntime)
			}
			if !strings.Contains(e, "index version 5 is newer than this version knows (4)") {
				t.Fatalf("version %s printed %q, want that index-version 5 is newer than it knows", beforePlannedByIndex, e)
			}
			ls := strings.Split(strings.TrimSpace(e), "\n")
			t.Logf("version %s refused the store: exit code %d, %s", beforePlannedByIndex, code, ls[len(ls)-1])

			again := serveInProcess(t, dir, "--engine", engine)
			if out := mustRun(t, "info", "--nats", again.URL()); !regexp.MustCompile(`(?m)^pending\s+1$`).MatchString(out) {
				t.Fatalf("info after the refused downgrade:\n%s\nwant the schedule's occurrence still pending", out)
			}
		})
	}
}

// TestServe_NewerStore_RefusedWithoutWriting checks that this version
// refuses a bbolt store of a later version (its index-version newer than
// this version knows) with a failing exit code before it serves, and
// leaves the file as it found it, byte for byte; it then opens the store
// again once the later version's mark is gone, with its message pending.
func TestServe_NewerStore_RefusedWithoutWriting(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv := serveInProcess(t, dir, "--engine", "bolt")
	schedule(t, srv.URL(), "jobs.later", "x", "--delay", "1h")
	if err := srv.Close(); err != nil {
		t.Fatalf("serve: Close: %v", err)
	}
	path := filepath.Join(dir, engine.BoltFile)
	setIndexVersion(t, path, 6)
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}

	code, _, e := runCmd(t, "serve", "--nats-listen", "127.0.0.1:0", "--http", "", "--data-dir", dir, "--engine", "bolt")
	if code != exitRuntime || !strings.Contains(e, "index version 6 is newer than this version knows") {
		t.Fatalf("serve on a store of a later version: exit code %d, stderr %q; want it refused with %d", code, e, exitRuntime)
	}
	after, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		n := 0
		for i := range min(len(before), len(after)) {
			if before[i] != after[i] {
				n++
			}
		}
		t.Fatalf("the refused start changed the store: %d bytes of %d differ (length %d -> %d)", n, len(before), len(before), len(after))
	}

	setIndexVersion(t, path, 3)
	again := serveInProcess(t, dir, "--engine", "bolt")
	if out := mustRun(t, "info", "--nats", again.URL()); !regexp.MustCompile(`(?m)^pending\s+1$`).MatchString(out) {
		t.Fatalf("info after the refused start:\n%s\nwant the message still pending", out)
	}
}

// setIndexVersion writes v as the index-version of the bbolt store at
// path, as a later version would.
func setIndexVersion(t *testing.T, path string, v uint64) {
	t.Helper()
	s, err := boltstore.Open(boltstore.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	b := s.NewBatch()
	err = b.Set([]byte("metadata/event-repo/index-version"), binary.BigEndian.AppendUint64(nil, v))
	if err == nil {
		err = b.Commit(delaystore.Sync)
	}
	b.Close()
	if err := errors.Join(err, s.Close()); err != nil {
		t.Fatalf("set the index version to %d: %v", v, err)
	}
}

// TestCluster_VersionBeforeRaftLog_RefusesNodeDirOfThisVersion checks that
// the version before the Raft log moved out of raft.db refuses a node
// directory of this version, with its error quoting node.json's note and
// a failing exit code before it serves, rather than start on the entries
// raft.db no longer holds; and that this version starts on it again
// afterwards and delivers the message scheduled before.
func TestCluster_VersionBeforeRaftLog_RefusesNodeDirOfThisVersion(t *testing.T) {
	t.Parallel()
	older := buildOlder(t, beforeRaftLog)
	opts := natsserver.DefaultTestOptions
	opts.Port = -1
	ns := natsserver.RunServer(&opts)
	t.Cleanup(ns.Shutdown)
	c := newRollCluster(t, ns.ClientURL(), 1)
	n := c.nodes[0]
	c.startAll(t, os.Args[0])
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	w := watchDeliveries(t, nc)
	c.waitLeader(t)
	r := mustSchedule(t, nc, "roll.down", "down", nats.Header{"Delay": {"3s"}})
	n.stop(t)

	old := startExe(t, older, nil, "", c.args(n)...)
	code := old.wait(t, 30*time.Second)
	e := old.stderr.String()
	if code != exitRuntime || strings.Contains(e, "natsdelay ready") {
		t.Fatalf("version %s on a node directory of this version: exit code %d, stderr %q; want it refused with %d before it serves", beforeRaftLog, code, e, exitRuntime)
	}
	if !strings.Contains(e, "node.json") || !strings.Contains(e, "written by a newer natsdelay") {
		t.Fatalf("version %s printed %q, want its refusal of node.json quoting the note", beforeRaftLog, e)
	}
	ls := strings.Split(strings.TrimSpace(e), "\n")
	t.Logf("version %s refused the node directory: exit code %d, %s", beforeRaftLog, code, ls[len(ls)-1])

	c.startAll(t, os.Args[0])
	w.waitDelivered(t, []rollReply{r})
}
