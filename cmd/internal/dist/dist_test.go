package dist

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// testVersion is the version the test's release build is given: what
// natsdelay version, the packages and the image must then name.
const testVersion = "v0.1.0-test"

// TestPackage runs make package for linux/amd64 as a release would and
// checks every artifact it made. It runs only when NATSDELAY_PACKAGE_TESTS
// is set (make package-test, which .ci/run runs after make test): on a
// fresh machine it compiles the release binary, nfpm and helm, minutes
// of CPU that make test, kept under 10 minutes, cannot spend. The tools it
// needs (make, git, podman, dpkg as root, systemd-analyze) are skipped for
// when missing, unless NATSDELAY_PACKAGE_TESTS=required, which fails
// instead.
func TestPackage(t *testing.T) {
	if os.Getenv("NATSDELAY_PACKAGE_TESTS") == "" {
		t.Skip("builds every release artifact: run make package-test")
	}
	need(t, "make", "git", "podman", "sha256sum")
	root := repoRoot(t)
	dist := t.TempDir()
	repo := fmt.Sprintf("localhost/natsdelay-test-%d", os.Getpid())
	image := repo + ":" + strings.TrimPrefix(testVersion, "v") + "-amd64"
	t.Cleanup(func() {
		// The image is saved in dist; the one in podman's store goes.
		if out, err := exec.Command("podman", "rmi", "--force", image).CombinedOutput(); err != nil {
			t.Logf("podman rmi %s: %v: %s", image, err, out)
		}
	})
	start := time.Now()
	runIn(t, root, "make", "--no-print-directory", "package", "PLATFORMS=linux/amd64",
		"DIST="+dist, "VERSION="+testVersion, "IMAGE_REPO="+repo)
	t.Logf("make package for linux/amd64 took %v", time.Since(start).Round(time.Millisecond))

	bin := filepath.Join(dist, "natsdelay-"+testVersion+"-linux-amd64")
	t.Run("Binary", func(t *testing.T) { checkBinary(t, bin) })
	t.Run("SHA256SUMS", func(t *testing.T) { checkSums(t, dist) })
	t.Run("Deb", func(t *testing.T) { checkDeb(t, filepath.Join(dist, "natsdelay_0.1.0~test_amd64.deb")) })
	t.Run("Rpm", func(t *testing.T) {
		if fi, err := os.Stat(filepath.Join(dist, "natsdelay-0.1.0~test-1.x86_64.rpm")); err != nil || fi.Size() < 1<<20 {
			t.Fatalf("the .rpm: %v (size %d), want a package holding the binary", err, size(fi))
		}
	})
	t.Run("Image", func(t *testing.T) {
		checkImage(t, filepath.Join(dist, "natsdelay-"+testVersion+"-image-linux-amd64.tar"), gitHead(t, root))
	})
	t.Run("Chart", func(t *testing.T) { checkChart(t, root, dist, bin) })
}

// checkBinary checks that the release binary is static (no interpreter,
// no shared library) and prints the version it was given.
func checkBinary(t *testing.T, bin string) {
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s has an ELF interpreter: not a static binary", bin)
		}
	}
	if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
		t.Errorf("%s needs shared libraries %v (%v): want none", bin, libs, err)
	}
	checkVersion(t, bin)
}

// checkVersion runs bin version and wants testVersion in what it prints.
func checkVersion(t *testing.T, bin string) {
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "natsdelay "+testVersion+" ") {
		t.Errorf("%s version: %v, printed %q; want natsdelay %s ...", bin, err, out, testVersion)
	}
}

// checkSums checks that SHA256SUMS lists every artifact in dist, each
// with its right sum.
func checkSums(t *testing.T, dist string) {
	b, err := os.ReadFile(filepath.Join(dist, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for line := range strings.Lines(string(b)) {
		sum, name, ok := strings.Cut(strings.TrimSpace(line), "  ")
		if !ok {
			t.Fatalf("SHA256SUMS line %q: want <sum>  <name>", line)
		}
		data, err := os.ReadFile(filepath.Join(dist, name))
		if err != nil {
			t.Fatalf("SHA256SUMS lists %s: %v", name, err)
		}
		if got := sha256.Sum256(data); hex.EncodeToString(got[:]) != sum {
			t.Errorf("SHA256SUMS: %s has sum %x, listed %s", name, got, sum)
		}
		listed = append(listed, name)
	}
	entries, err := os.ReadDir(dist)
	if err != nil {
		t.Fatal(err)
	}
	var all []string
	for _, e := range entries {
		if e.Name() != "SHA256SUMS" {
			all = append(all, e.Name())
		}
	}
	slices.Sort(listed)
	if !slices.Equal(listed, all) {
		t.Errorf("SHA256SUMS lists %v, dist holds %v", listed, all)
	}
	for _, want := range []string{".deb", ".rpm", ".tgz", "-image-linux-amd64.tar", "-linux-amd64"} {
		if !slices.ContainsFunc(all, func(n string) bool { return strings.HasSuffix(n, want) }) {
			t.Errorf("dist holds %v: no artifact ending in %s", all, want)
		}
	}
}

// need skips the test, or fails it under NATSDELAY_PACKAGE_TESTS=required,
// unless every command is installed.
func need(t *testing.T, cmds ...string) {
	t.Helper()
	for _, c := range cmds {
		if _, err := exec.LookPath(c); err != nil {
			skipOrFail(t, "%s is not installed", c)
		}
	}
}

func skipOrFail(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("NATSDELAY_PACKAGE_TESTS") == "required" {
		t.Fatalf(format+" (NATSDELAY_PACKAGE_TESTS=required)", args...)
	}
	t.Skipf(format, args...)
}

func repoRoot(t *testing.T) string {
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("no go.mod at the repository's root %s: %v", root, err)
	}
	return root
}

func gitHead(t *testing.T, root string) string {
	return strings.TrimSpace(runIn(t, root, "git", "rev-parse", "HEAD"))
}

// runIn runs name in dir and returns its stdout; it fails the test with
// both outputs when the command fails. The Makefile's own make variables
// of a make test that runs this are not passed on.
func runIn(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "MAKEFLAGS=") || strings.HasPrefix(kv, "MFLAGS=") || strings.HasPrefix(kv, "MAKELEVEL=")
	})
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\nstdout:\n%s\nstderr:\n%s", name, strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

func size(fi os.FileInfo) int64 {
	if fi == nil {
		return 0
	}
	return fi.Size()
}

// readyLine is serve's log line once it takes messages; it names the URL
// of its NATS server.
var readyLine = regexp.MustCompile(`msg="natsdelay ready" nats_url=(\S+) `)

// serveAndPublish starts cmd, a natsdelay serve with an embedded NATS
// server, waits for it to be ready, schedules one message through it and
// checks the reply names the message's tag, then stops it with SIGTERM and
// wants exit code 0.
func serveAndPublish(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	urls := make(chan string, 1)
	var log bytes.Buffer
	exited := make(chan error, 1)
	go func() {
		// Reads serve's log until it exits and its stderr closes.
		s := bufio.NewScanner(stderr)
		for s.Scan() {
			log.WriteString(s.Text() + "\n")
			if m := readyLine.FindStringSubmatch(s.Text()); m != nil {
				urls <- m[1]
			}
		}
		exited <- cmd.Wait()
	}()
	// stop kills serve unless it has exited, and returns its log; the
	// log is read only once the goroutine has returned.
	stopped := false
	stop := func() string {
		if !stopped {
			_ = cmd.Process.Kill()
			<-exited
			stopped = true
		}
		return log.String()
	}
	defer stop()
	var url string
	select {
	case url = <-urls:
	case err := <-exited:
		stopped = true
		t.Fatalf("%s exited before it was ready: %v:\n%s", cmd.Path, err, stop())
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not log natsdelay ready within 60s:\n%s", cmd.Path, stop())
	}
	publishOne(t, url)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		stopped = true
		if err != nil {
			t.Fatalf("%s after SIGTERM: %v, want exit code 0:\n%s", cmd.Path, err, stop())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not exit within 60s of SIGTERM:\n%s", cmd.Path, stop())
	}
}

// publishOne schedules a message an hour out through the NATS server at
// url and wants the reply to name its subject and a tag.
func publishOne(t *testing.T, url string) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	m := nats.NewMsg("delay.dist.check")
	m.Header.Set("Delay", "1h")
	m.Data = []byte("from the package test")
	reply, err := nc.RequestMsg(m, 30*time.Second)
	if err != nil {
		t.Fatalf("schedule through %s: %v", url, err)
	}
	var r struct {
		Tag     string `json:"tag"`
		Subject string `json:"subject"`
	}
	if err := json.Unmarshal(reply.Data, &r); err != nil || len(r.Tag) != 48 || r.Subject != "dist.check" {
		t.Fatalf("schedule reply %q (%v): want the subject dist.check and a 48-digit tag", reply.Data, err)
	}
}

// writeFile writes r to path with mode.
func writeFile(t *testing.T, path string, r io.Reader, mode os.FileMode) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}
