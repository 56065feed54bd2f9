// Command natsdelay-bench measures natsdelay beside JetStream message
// schedules on this machine: ingest, fire lateness, end to end, scale,
// memory waves, recurring schedules, flow control, a cluster and cells,
// and writes a table, the figures as JSON and a chart.
//
// It is a binary of its own so that the service's binary links none of its
// plotting. The phases that run natsdelay as a process of its own run the
// natsdelay binary next to this one, or on the PATH, or --serve-binary.
//
//	go build -o bin/ ./cmd/natsdelay ./cmd/natsdelay-bench
//	bin/natsdelay-bench --quick
package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/alecthomas/kong"

	"github.com/natsdelay/natsdelay/cmd/internal/bench"
	"github.com/natsdelay/natsdelay/cmd/internal/gogc"
	"github.com/natsdelay/natsdelay/cmd/internal/usage"
)

// Exit codes: 2 for a command line that is wrong, 1 for a run that failed.
const (
	exitOK      = 0
	exitRuntime = 1
	exitUsage   = 2
)

// env is what a run writes to.
type env struct {
	stdout io.Writer
	log    *slog.Logger
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run parses args, runs the benchmark and returns the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	c, err := parse(args, stdout, stderr)
	if err != nil {
		return fail(stderr, err)
	}
	if c == nil {
		return exitOK // --help
	}
	e := &env{stdout: stdout, log: slog.New(slog.NewTextHandler(stderr, nil))}
	// The service runs in this process in most phases: with serve's
	// collector target, so that it is measured as it runs.
	gogc.Apply(e.log, os.Getenv("GOGC"))
	if err := c.Run(e); err != nil {
		return fail(stderr, err)
	}
	return exitOK
}

// parse reads args and NATSDELAY_* env vars into the command and checks
// it; every bad setting is reported at once. It returns nil and no error
// when it printed the help.
func parse(args []string, stdout, stderr io.Writer) (*benchCmd, error) {
	var c benchCmd
	exited := false
	p, err := kong.New(&c,
		kong.Name("natsdelay-bench"),
		kong.Description("Benchmark natsdelay beside JetStream message schedules; prints a table, writes JSON and a chart."),
		kong.Writers(stdout, stderr),
		kong.DefaultEnvars("NATSDELAY"),
		kong.Exit(func(int) { exited = true }),
		kong.Vars{"quick_takes": bench.QuickTakes},
	)
	if err != nil {
		// Only a mistake in the struct tags gets here.
		panic(err)
	}
	if _, err := p.Parse(args); err != nil {
		return nil, usage.Wrap(err)
	}
	if exited {
		return nil, nil
	}
	if err := c.check(); err != nil {
		return nil, usage.Wrap(fmt.Errorf("invalid settings:\n%w", err))
	}
	return &c, nil
}

// fail prints err and returns its exit code.
func fail(stderr io.Writer, err error) int {
	fmt.Fprintf(stderr, "natsdelay-bench: error: %s\n", strings.ReplaceAll(err.Error(), "\n", "\n  "))
	if errors.Is(err, usage.ErrUsage) {
		return exitUsage
	}
	return exitRuntime
}

// problems gathers every bad setting, to report them at once.
type problems []error

func (p *problems) add(format string, args ...any) { *p = append(*p, fmt.Errorf(format, args...)) }
func (p problems) err() error                      { return errors.Join(p...) }
