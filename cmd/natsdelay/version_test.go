package main

import (
	"runtime/debug"
	"strings"
	"testing"

	"github.com/natsdelay/natsdelay/bridge"
)

// TestVersionOf_BuildInfo checks what version prints for the builds it
// can come from: a module version, a local build with a VCS revision, one
// without, and no build info at all.
func TestVersionOf_BuildInfo(t *testing.T) {
	vcs := []debug.BuildSetting{
		{Key: "vcs", Value: "git"},
		{Key: "vcs.revision", Value: "2e05afa0c0ffee"},
		{Key: "vcs.time", Value: "2026-12-03T06:00:00Z"},
		{Key: "vcs.modified", Value: "true"},
	}
	tests := []struct {
		name string
		bi   *debug.BuildInfo
		want string
	}{
		{"module version", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v0.3.0"}},
			"natsdelay v0.3.0 service " + bridge.Version + " go1.26.0"},
		{"local build with revision", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"}, Settings: vcs},
			"natsdelay (devel) revision 2e05afa0c0ffee 2026-12-03T06:00:00Z (modified) service " + bridge.Version + " go1.26.0"},
		{"no version", &debug.BuildInfo{GoVersion: "go1.26.0"},
			"natsdelay (devel) service " + bridge.Version + " go1.26.0"},
		{"no build info", nil, "natsdelay (unknown build) service " + bridge.Version},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := versionOf(tt.bi); got != tt.want {
				t.Errorf("versionOf = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestVersion_CommandAndFlag checks that natsdelay version and --version
// print the same line, exit 0, and start nothing.
func TestVersion_CommandAndFlag(t *testing.T) {
	t.Parallel()
	want := version() + "\n"
	for _, args := range [][]string{{"version"}, {"--version"}, {"pub", "--version"}} {
		code, out, errOut := runCmd(t, args...)
		if code != 0 || out != want || errOut != "" {
			t.Errorf("natsdelay %s: exit code %d, stdout %q, stderr %q; want 0, %q and nothing", strings.Join(args, " "), code, out, errOut, want)
		}
	}
}

// TestHelp_Command checks that natsdelay help is --help, that help NAME is
// NAME --help, and that help of an unknown command is a usage error.
func TestHelp_Command(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"help"}, "Usage: natsdelay <command> [flags]"},
		{[]string{"help", "pub"}, "Usage: natsdelay pub <subject> [<data>] [flags]"},
		{[]string{"help", "serve"}, "Usage: natsdelay serve [flags]"},
	} {
		code, out, errOut := runCmd(t, tt.args...)
		if code != 0 || !strings.HasPrefix(out, tt.want+"\n") {
			t.Errorf("natsdelay %s: exit code %d, stdout %q, stderr %q; want 0 and %q", strings.Join(tt.args, " "), code, out, errOut, tt.want)
		}
	}
	code, _, errOut := runCmd(t, "help", "nope")
	if code != exitUsage || !strings.Contains(errOut, "help nope") || !strings.Contains(errOut, "nope") {
		t.Errorf("natsdelay help nope: exit code %d, stderr %q; want %d and the word it did not know", code, errOut, exitUsage)
	}
}

// TestHelp_Backoff_ShowsNoDefault checks that serve's help does not show an
// example list where a default would go: --backoff has none.
func TestHelp_Backoff_ShowsNoDefault(t *testing.T) {
	t.Parallel()
	out := mustRun(t, "serve", "--help")
	if !strings.Contains(out, "--backoff=DURATION,...") || !strings.Contains(out, "Default none") {
		t.Errorf("serve --help shows --backoff as %q, want --backoff=DURATION,... and Default none", helpLine(out, "--backoff"))
	}
}

// helpLine returns the line of help that mentions flag.
func helpLine(help, flag string) string {
	for line := range strings.Lines(help) {
		if strings.Contains(line, flag) {
			return strings.TrimSpace(line)
		}
	}
	return ""
}

// TestReleased_LinkerVersionWins checks that a version set by the linker
// (make package's -X main.releaseVersion) replaces the module version and
// keeps the VCS revision, and that without one the build info is as it was.
func TestReleased_LinkerVersionWins(t *testing.T) {
	vcs := []debug.BuildSetting{{Key: "vcs.revision", Value: "2e05afa0c0ffee"}}
	bi := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"}, Settings: vcs}
	if got, want := versionOf(released(bi, "v0.1.0")), "natsdelay v0.1.0 revision 2e05afa0c0ffee service "+bridge.Version+" go1.26.0"; got != want {
		t.Errorf("release build: %q, want %q", got, want)
	}
	if bi.Main.Version != "(devel)" {
		t.Errorf("released changed the build info it was given: module version %q", bi.Main.Version)
	}
	if got := released(bi, ""); got != bi {
		t.Errorf("no release version: got a new build info %+v, want the one given", got)
	}
	if got := versionOf(released(nil, "v0.1.0")); !strings.HasPrefix(got, "natsdelay v0.1.0 service "+bridge.Version+" go") {
		t.Errorf("release build without build info: %q, want natsdelay v0.1.0 service %s go...", got, bridge.Version)
	}
}
