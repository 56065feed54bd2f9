// Command natsdelay runs the natsdelay service and speaks its protocol.
//
// With no subcommand it runs "serve": an embedded nats-server on
// 127.0.0.1:4222 and the service over it, keeping messages in
// ./natsdelay-data. "pub" schedules a message and "sub" prints and ACKs
// deliveries; both use plain NATS requests, as any client would. "info",
// "subjects", "ls", "get" and "cancel" use only the request/reply API on
// $DELAY.API.
//
// Every setting comes, in order of precedence, from a flag, an environment
// variable NATSDELAY_<FLAG> (NATSDELAY_DATA_DIR for --data-dir), a JSON
// config file named by --config or NATSDELAY_CONFIG, or its default.
//
// Exit codes: 0 on success, 1 on a runtime error, 2 on a usage or
// configuration error.
package main

//lint:file-ignore SA5008 kong reads a set tag given more than once, one variable each.

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/alecthomas/kong"

	"github.com/natsdelay/natsdelay/bridge"
	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/cmd/internal/usage"
)

const (
	exitOK      = 0
	exitRuntime = 1
	exitUsage   = 2
)

// cli is the whole command line.
type cli struct {
	Config    configFile       `help:"JSON file of settings: keys are flag names such as data_dir; flags and env vars override it." placeholder:"FILE"`
	LogLevel  string           `help:"Log level: ${enum}." enum:"debug,info,warn,error" default:"info"`
	LogFormat string           `help:"Log format: ${enum}." enum:"text,json" default:"text"`
	Version   kong.VersionFlag `help:"Print the version and exit." env:"-"`

	// The vars fill in connFlags' tags: serve embeds a server unless told
	// otherwise, the clients talk to the one serve embeds by default.
	Serve serveCmd `cmd:"" default:"withargs" help:"Run the service; the default when no command is given." set:"nats_url=" set:"nats_help=URL of the NATS server to use; without it serve embeds one (see --nats-listen)."`
	Pub   pubCmd   `cmd:"" help:"Schedule one message and print its tag and fire time." set:"nats_url=" set:"nats_help=${client_nats_help}"`
	Sub   subCmd   `cmd:"" help:"Print the deliveries of a subject and ACK them." set:"nats_url=" set:"nats_help=${client_nats_help}"`

	// The admin commands use only the API, as any NATS client could.
	Info       infoCmd       `cmd:"" help:"Print the service's version, counts, stats and configuration." set:"nats_url=" set:"nats_help=${client_nats_help}"`
	Subjects   subjectsCmd   `cmd:"" help:"List the subjects with pending messages, with their pending and due counts." set:"nats_url=" set:"nats_help=${client_nats_help}"`
	Ls         lsCmd         `cmd:"" help:"List the pending messages of a subject, or of the subjects a filter matches, in fire order." set:"nats_url=" set:"nats_help=${client_nats_help}"`
	Schedules  schedulesCmd  `cmd:"" help:"List the recurring schedules, with their spec, zone, next time and occurrences fired; pause, resume or trigger one." set:"nats_url=" set:"nats_help=${client_nats_help}"`
	Events     eventsCmd     `cmd:"" help:"Print the lifecycle events of a service started with --events, one a line, until interrupted." set:"nats_url=" set:"nats_help=${client_nats_help}"`
	UIPasswd   uiPasswdCmd   `cmd:"" name:"ui-passwd" help:"Print a line of the console's --ui-auth password file for a user: name:bcrypt-hash, the password read from stdin."`
	Completion completionCmd `cmd:"" help:"Print the shell code of natsdelay's tab completion: bash, zsh or fish."`
	Get        getCmd        `cmd:"" help:"Print one pending message, by tag or by subject and id." set:"nats_url=" set:"nats_help=${client_nats_help}"`
	Cancel     cancelCmd     `cmd:"" help:"Cancel one pending message, by tag or by subject and id, or every one a --filter matches." set:"nats_url=" set:"nats_help=${client_nats_help}"`
	Reschedule rescheduleCmd `cmd:"" help:"Move pending messages to another fire time (--at or --shift; never before now): one, or every one a --filter matches." set:"nats_url=" set:"nats_help=${client_nats_help}"`
	Fire       fireCmd       `cmd:"" help:"Make pending messages due now: one, or every one a --filter matches." set:"nats_url=" set:"nats_help=${client_nats_help}"`
	Dead       deadCmd       `cmd:"" help:"List, replay or delete the dead letters kept." set:"nats_url=" set:"nats_help=${client_nats_help}"`
	Limits     limitsCmd     `cmd:"" help:"Set, list or delete the flow control of subject patterns: max in flight, rate, burst." set:"nats_url=" set:"nats_help=${client_nats_help}"`
	Pause      pauseCmd      `cmd:"" help:"Hold back every delivery of the subjects a pattern matches; they keep taking messages." set:"nats_url=" set:"nats_help=${client_nats_help}"`
	Resume     resumeCmd     `cmd:"" help:"Deliver a paused pattern's subjects again, in fire order." set:"nats_url=" set:"nats_help=${client_nats_help}"`
	Cluster    clusterCmd    `cmd:"" help:"Show a cluster's nodes, or add or remove one." set:"nats_url=" set:"nats_help=${client_nats_help}"`
	Cells      cellsCmd      `cmd:"" help:"List the cells of a fleet: the partitions each owns, the node that serves it, its counts." set:"nats_url=" set:"nats_help=${client_nats_help}"`
	Backup     backupCmd     `cmd:"" help:"Write a consistent backup of the running service's store to a file." set:"nats_url=" set:"nats_help=${client_nats_help}"`
	Restore    restoreCmd    `cmd:"" help:"Write a backup into an empty data directory, for serve to start on."`

	VersionCmd versionCmd `cmd:"" name:"version" help:"Print the version and exit."`
	Help       helpCmd    `cmd:"" help:"Show the help of natsdelay or of one command."`
}

// env is what every command's Run gets: its input and output, and the
// logger, which writes to stderr.
type env struct {
	stdin  io.Reader
	stdout io.Writer
	// stderr takes what is not the command's output, such as a progress
	// bar.
	stderr io.Writer
	log    *slog.Logger
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run parses args, runs the chosen command and returns the exit code.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	c, kctx, err := parse(args, stdout, stderr)
	if err != nil {
		return fail(stderr, err)
	}
	e := &env{stdin: stdin, stdout: stdout, stderr: stderr, log: newLogger(stderr, c.LogLevel, c.LogFormat)}
	if err := kctx.Run(e); err != nil {
		return fail(stderr, err)
	}
	return exitOK
}

// parse reads args, env vars and the config file into a cli and checks the
// chosen command's settings. Every error it returns wraps usage.ErrUsage.
func parse(args []string, stdout, stderr io.Writer) (*cli, *kong.Context, error) {
	var c cli
	bad := &badValues{}
	limits := &configLimits{}
	p, err := kong.New(&c,
		kong.Name("natsdelay"),
		kong.Description("Durable delayed delivery for core NATS."),
		kong.Writers(stdout, stderr),
		kong.DefaultEnvars("NATSDELAY"),
		kong.TypeMapper(reflect.TypeFor[time.Duration](), kong.MapperFunc(bad.decodeDuration)),
		kong.Bind(bad, limits),
		kong.Vars{
			"ingest_prefix":      wire.DefaultIngestPrefix,
			"js_schedule_prefix": wire.DefaultJSSchedulePrefix,
			"ack_prefix":         wire.DefaultAckPrefix,
			"api_prefix":         wire.DefaultAPIPrefix,
			"event_prefix":       wire.DefaultEventPrefix,
			"listen":             defaultListen,
			"data_dir":           defaultDataDir,
			"http":               defaultHTTP,
			"version":            version(),
			"client_nats_help":   "URL of the NATS server where natsdelay runs; default $NATS_URL, else the nats context's URL, else " + defaultClientURL + ".",
		},
	)
	if err != nil {
		// Only a mistake in the struct tags above gets here.
		panic(err)
	}
	complete(p)
	var withContext []string
	for _, n := range p.Model.Children {
		if hasFlag(n, "context") {
			withContext = append(withContext, n.Name)
		}
	}
	kctx, err := p.Parse(hoistContext(args, withContext))
	if err != nil {
		return nil, nil, usage.Wrap(err)
	}
	if sc, ok := kctx.Selected().Target.Addr().Interface().(*serveCmd); ok {
		sc.bad, sc.limits = bad, limits
	}
	if ch, ok := kctx.Selected().Target.Addr().Interface().(checker); ok {
		err := ch.check()
		switch {
		case errors.Is(err, usage.ErrUsage):
			// Already a whole sentence about the command line.
			return nil, nil, err
		case err != nil:
			return nil, nil, usage.Errorf("invalid settings:\n%w", err)
		}
	}
	return &c, kctx, nil
}

// checker is a command whose settings are checked once parsing is done, so
// that every bad value is reported at once, before anything starts.
type checker interface {
	check() error
}

// fail prints err and returns its exit code.
func fail(stderr io.Writer, err error) int {
	msg := strings.ReplaceAll(err.Error(), "\n", "\n  ")
	fmt.Fprintf(stderr, "natsdelay: error: %s\n", msg)
	if errors.Is(err, usage.ErrUsage) || errors.Is(err, bridge.ErrInvalidConfig) {
		return exitUsage
	}
	return exitRuntime
}

// newLogger logs to w at level in format; parse has checked both.
func newLogger(w io.Writer, level, format string) *slog.Logger {
	var lv slog.Level
	_ = lv.UnmarshalText([]byte(level))
	opts := &slog.HandlerOptions{Level: lv}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// hoistContext moves a --context given before the command to after it,
// when the command is one of commands, which have the flag: nats CLI users
// write it first (nats --context X stream ls). Anything else is left for
// kong to judge.
func hoistContext(args, commands []string) []string {
	for i := 0; i < len(args); i++ {
		if !slices.Contains(commands, args[i]) {
			continue
		}
		var ctx, rest []string
		for j := 0; j < i; j++ {
			switch a := args[j]; {
			case a == "--context" && j+1 < i:
				ctx = append(ctx, a, args[j+1])
				j++
			case strings.HasPrefix(a, "--context="):
				ctx = append(ctx, a)
			default:
				rest = append(rest, a)
			}
		}
		if len(ctx) == 0 {
			return args
		}
		out := append(rest, args[i])
		out = append(out, ctx...)
		return append(out, args[i+1:]...)
	}
	return args
}

// hasFlag reports whether the command n has the flag name.
func hasFlag(n *kong.Node, name string) bool {
	for _, f := range n.Flags {
		if f.Name == name {
			return true
		}
	}
	return false
}
