package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The crash tests' hooks kill the process on an environment variable:
// the default build links none of them, and only the crashtest tag, which
// the integration tests build with, brings them in.
func TestDefaultBuild_HasNoCrashHooks(t *testing.T) {
	t.Parallel()
	const hooks = "github.com/natsdelay/natsdelay/cmd/natsdelay/internal/crashhook"
	deps := func(args ...string) []string {
		t.Helper()
		cmd := exec.Command("go", append([]string{"list", "-deps"}, args...)...)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list -deps %v: %v", args, err)
		}
		return strings.Fields(string(out))
	}
	if slices.Contains(deps("."), hooks) {
		t.Errorf("the default build links %s", hooks)
	}
	if !slices.Contains(deps("-tags", "crashtest", "."), hooks) {
		t.Errorf("a build with the crashtest tag does not link %s", hooks)
	}
}
