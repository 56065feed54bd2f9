package dist

import (
	"archive/zip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// module is the path users fetch natsdelay by.
const module = "github.com/natsdelay/natsdelay"

// TestGoInstall_FromAModuleProxy checks the README's first two install
// paths as a user meets them once a release is published: this checkout
// is served as release v0.1.0 by a module proxy of files (the layout
// proxy.golang.org serves), then `go install <module>/cmd/natsdelay@v0.1.0`
// builds a binary that names that version, and a program of another
// module takes the client with `go get <module>/bridge/client@v0.1.0`,
// builds, and links nothing of the server. The dependencies come from the
// local module cache's download directory, itself a module proxy, so the
// test fetches nothing, and the checksum database is not asked (it may
// be out of reach): the module's go.sum checks them. Its module cache is
// a temporary one, so the v0.1.0 it serves is not kept. It runs with make
// package-test.
func TestGoInstall_FromAModuleProxy(t *testing.T) {
	if os.Getenv("NATSDELAY_PACKAGE_TESTS") == "" {
		t.Skip("builds natsdelay as go install does: run make package-test")
	}
	need(t, "git", "go")
	root := repoRoot(t)
	const version = "v0.1.0"
	proxy := serveAsRelease(t, root, version)
	cache := strings.TrimSpace(runIn(t, root, "go", "env", "GOMODCACHE"))
	gobin := t.TempDir()
	env := append(os.Environ(),
		"GOPROXY=file://"+proxy+",file://"+filepath.Join(cache, "cache", "download"),
		"GOSUMDB=off", "GOFLAGS=-modcacherw", "GOMODCACHE="+t.TempDir(),
		"GOBIN="+gobin, "GOWORK=off")

	goCmd(t, t.TempDir(), env, "install", module+"/cmd/natsdelay@"+version)
	out, err := exec.Command(filepath.Join(gobin, "natsdelay"), "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "natsdelay "+version+" ") {
		t.Fatalf("natsdelay version from go install: %v: %q, want it to begin %q", err, out, "natsdelay "+version+" ")
	}

	app := t.TempDir()
	writeFile(t, filepath.Join(app, "go.mod"), strings.NewReader("module example.com/app\n\ngo 1.26\n"), 0o644)
	writeFile(t, filepath.Join(app, "main.go"), strings.NewReader(`package main

import (
	"fmt"

	"github.com/natsdelay/natsdelay/bridge/client"
)

func main() { fmt.Println(client.MaxRetryWait) }
`), 0o644)
	goCmd(t, app, env, "get", module+"/bridge/client@"+version)
	goCmd(t, app, env, "build", "-o", filepath.Join(app, "app"), ".")
	deps := goCmd(t, app, env, "list", "-deps", ".")
	for _, server := range []string{"/delaystore", "/dispatch", "cockroachdb/pebble", "go.etcd.io/bbolt"} {
		if strings.Contains(deps, server) {
			t.Errorf("a program that takes the client links %s:\n%s", server, deps)
		}
	}
}

// serveAsRelease writes a module proxy of files holding the files git
// tracks in root as module version v, and returns its directory.
func serveAsRelease(t *testing.T, root, v string) string {
	t.Helper()
	proxy := t.TempDir()
	dir := filepath.Join(proxy, filepath.FromSlash(module), "@v")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "list"), strings.NewReader(v+"\n"), 0o644)
	writeFile(t, filepath.Join(dir, v+".info"), strings.NewReader(`{"Version":"`+v+`","Time":"2026-12-05T00:00:00Z"}`), 0o644)
	mod, err := os.Open(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	defer mod.Close()
	writeFile(t, filepath.Join(dir, v+".mod"), mod, 0o644)

	f, err := os.Create(filepath.Join(dir, v+".zip"))
	if err != nil {
		t.Fatal(err)
	}
	zw := zip.NewWriter(f)
	for _, name := range strings.Split(strings.TrimSpace(runIn(t, root, "git", "ls-files")), "\n") {
		data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(name)))
		if err != nil {
			t.Fatal(err)
		}
		w, err := zw.Create(module + "@" + v + "/" + name)
		if err == nil {
			_, err = w.Write(data)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return proxy
}

// goCmd runs the go command in dir with env and returns its output,
// failing the test when it fails.
func goCmd(t *testing.T, dir string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir, cmd.Env = dir, env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}
