package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/alecthomas/kong"

	"github.com/natsdelay/natsdelay/bridge"
	"github.com/natsdelay/natsdelay/cmd/internal/usage"
)

// versionCmd prints what --version prints.
type versionCmd struct{}

func (versionCmd) Run(e *env) error {
	_, err := fmt.Fprintln(e.stdout, version())
	return err
}

// releaseVersion is the version a release build names, set by the linker:
// go build -ldflags "-X main.releaseVersion=v0.1.0" (make package does).
// Empty, the build info's module version stands: the tag that go install
// ...@v0.1.0 fetched, or (devel) for a build of a checkout.
var releaseVersion string

// version describes this binary: its module version, the VCS revision it
// was built from when the build recorded one, the service version that
// INFO reports, and the Go version.
func version() string {
	bi, _ := debug.ReadBuildInfo() // nil when the binary has none
	return versionOf(released(bi, releaseVersion))
}

// released is bi with its module version replaced by v, a release build's
// version, when v is set; bi itself otherwise. bi may be nil.
func released(bi *debug.BuildInfo, v string) *debug.BuildInfo {
	if v == "" {
		return bi
	}
	if bi == nil {
		return &debug.BuildInfo{GoVersion: runtime.Version(), Main: debug.Module{Version: v}}
	}
	out := *bi
	out.Main.Version = v
	return &out
}

// versionOf is version for the build info bi, which may be nil.
func versionOf(bi *debug.BuildInfo) string {
	if bi == nil {
		return fmt.Sprintf("natsdelay (unknown build) service %s", bridge.Version)
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "natsdelay %s", v)
	setting := func(k string) string {
		i := slices.IndexFunc(bi.Settings, func(s debug.BuildSetting) bool { return s.Key == k })
		if i < 0 {
			return ""
		}
		return bi.Settings[i].Value
	}
	if rev := setting("vcs.revision"); rev != "" {
		fmt.Fprintf(&b, " revision %s", rev)
		if t := setting("vcs.time"); t != "" {
			fmt.Fprintf(&b, " %s", t)
		}
		if setting("vcs.modified") == "true" {
			b.WriteString(" (modified)")
		}
	}
	fmt.Fprintf(&b, " service %s %s", bridge.Version, bi.GoVersion)
	return b.String()
}

// helpCmd prints the help of the command it names, or of natsdelay: help
// pub is pub --help.
type helpCmd struct {
	Command []string `arg:"" optional:"" help:"Command to show the help of."`
}

func (c *helpCmd) Run(kctx *kong.Context) error {
	// --help prints the help and exits; Parse returns only when the
	// words name no command.
	if _, err := kctx.Kong.Parse(append(slices.Clone(c.Command), "--help")); err != nil {
		return usage.Errorf("help %s: %w", strings.Join(c.Command, " "), err)
	}
	return nil
}
