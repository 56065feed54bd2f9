package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// beforeIndexVersion is the last version whose stores carried no
// index-version: a store it opens is checked only by the keys it knew.
const beforeIndexVersion = "2e05afa"

// olderBuild builds an earlier version of natsdelay once per test binary.
var olderBuild struct {
	once sync.Once
	dir  string // removed by TestMain
	bin  string
	skip string // why the build is not possible here
	err  error
}

// buildOlder returns the path of natsdelay built at commit rev (only
// beforeIndexVersion is asked for), from this checkout's history. It
// skips the test when the history is not there (a source archive, a
// shallow clone), and fails it when the build fails.
func buildOlder(t *testing.T, rev string) string {
	t.Helper()
	olderBuild.once.Do(func() {
		olderBuild.bin, olderBuild.skip, olderBuild.err = buildAt(rev)
	})
	switch {
	case olderBuild.skip != "":
		t.Skip(olderBuild.skip)
	case olderBuild.err != nil:
		t.Fatalf("build natsdelay at %s: %v", rev, olderBuild.err)
	}
	return olderBuild.bin
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
	olderBuild.dir, err = os.MkdirTemp("", "natsdelay-older")
	if err != nil {
		return "", "", err
	}
	src := filepath.Join(olderBuild.dir, "src")
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
	bin = filepath.Join(olderBuild.dir, "natsdelay-"+rev)
	build := exec.Command("go", "build", "-o", bin, "./cmd/natsdelay")
	build.Dir = src
	// NB: no VCS stamp: the extracted tree is not a repository.
	build.Env = append(os.Environ(), "GOFLAGS=-buildvcs=false")
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

// removeOlderBuild removes what buildOlder built.
func removeOlderBuild() {
	if olderBuild.dir != "" {
		os.RemoveAll(olderBuild.dir)
	}
}

// TestServe_OlderVersion_RefusesStoreOfThisVersion checks that no
// downgrade loses messages: a store this version wrote is refused, with a
// message and a failing exit code, by a version from before index-version
// existed, which would otherwise take messages that this version never
// delivers; and this version still opens the store afterwards, with its
// message pending.
func TestServe_OlderVersion_RefusesStoreOfThisVersion(t *testing.T) {
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
