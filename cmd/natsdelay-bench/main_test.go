package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// execEnv makes the test binary run main instead of the tests, so the
// tests run the real command.
const execEnv = "GO_TEST_NATSDELAY_BENCH_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(execEnv) == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	// The tests choose their own settings: the shell's must not leak in.
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, "NATSDELAY_") || strings.HasPrefix(name, "NATS_") {
			os.Unsetenv(name)
		}
	}
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

var (
	binOnce sync.Once
	binDir  string
	binPath string
	binErr  error
)

// natsdelayBinary builds the natsdelay of this tree once, for the phases
// that run its serve as a process of their own.
func natsdelayBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		if binDir, binErr = os.MkdirTemp("", "natsdelay-bench-test"); binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "natsdelay")
		out, err := exec.Command("go", "build", "-o", binPath, "github.com/natsdelay/natsdelay/cmd/natsdelay").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build natsdelay: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}
