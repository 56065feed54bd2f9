package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/cmd/internal/gogc"
	"github.com/natsdelay/natsdelay/cmd/internal/usage"
	"github.com/natsdelay/natsdelay/cmd/natsdelay/internal/server"

	"github.com/natsdelay/natsdelay/bridge"
	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/delaystore/engine"
)

// defaultDataDir is where serve keeps messages unless --data-dir moves it.
const defaultDataDir = "./natsdelay-data"

// serveCmd runs the service. The vars set on it in cli give the shared
// --nats flag an empty default, which means "embed a nats-server".
type serveCmd struct {
	connFlags    `embed:""`
	clusterFlags `embed:""`
	fleetFlags   `embed:""`

	// No default in the tag, so that check can tell --nats-listen given
	// alongside --nats; listen applies the default.
	NATSListen string `name:"nats-listen" help:"Address of the embedded nats-server, when there is no --nats; port 0 picks a free one. Default ${listen}." placeholder:"HOST:PORT"`

	NATSJetStream bool `name:"nats-jetstream" help:"Enable JetStream in the embedded nats-server, its streams kept in <data-dir>/jetstream, so that delayed messages can be delivered into a stream. Not with --nats: enable JetStream in that server."`

	DataDir            string          `help:"Directory of the message store (not used by the memory engine)." default:"${data_dir}"`
	Engine             string          `help:"Storage engine: pebble, bolt or memory. memory keeps nothing across restarts." default:"pebble" config:"Engine"`
	TimeBucket         time.Duration   `help:"Width of the time bucket in keys, whole milliseconds; 0 is raw milliseconds. Never change it for an existing data dir." default:"0s" config:"Repository.TimeBucket"`
	AckWait            time.Duration   `help:"How long a delivery waits for an ACK before it is redelivered." default:"30s" config:"Delivery.AckWait"`
	MaxDeliver         int             `help:"Deliveries after which an unACKed message is dead-lettered; a message's Delay-Max-Deliver wins. 0 is unlimited." default:"0" config:"Delivery.MaxDeliver"`
	Backoff            []time.Duration `help:"Waits before the redeliveries after attempts 1, 2, ..., such as 1s,5s,30s; the last repeats. Default none: redeliver right after the ack wait." placeholder:"DURATION" config:"Delivery.Backoff"`
	DeadLetter         string          `help:"Subject that dead letters are also published to; empty publishes none (they are still kept: see --dead-retention)." placeholder:"SUBJECT" config:"Delivery.DeadLetterSubject"`
	DeadLetterExp      bool            `name:"dead-letter-expired" help:"Also dead-letter expired messages (Delay-Reason: expired)." config:"Delivery.DeadLetterExpired"`
	IngestPrefix       string          `help:"Prefix that publishers send to: <prefix>.<subject>." default:"${ingest_prefix}" config:"IngestPrefix"`
	JSSchedulePrefix   string          `name:"js-schedule-prefix" help:"Prefix of JetStream schedule subjects: nats.go's jetstream.Publish with the WithSchedule options to <prefix>.<schedule subject>." default:"${js_schedule_prefix}" config:"JSSchedulePrefix"`
	AckPrefix          string          `help:"Prefix of delivery reply subjects." default:"${ack_prefix}" config:"AckPrefix"`
	APIPrefix          string          `name:"api-prefix" help:"Prefix of the request/reply API." default:"${api_prefix}" config:"APIPrefix"`
	Events             bool            `help:"Publish lifecycle events (scheduled, delivered, acked, nak, term, expired, dead, canceled, ...) to <event-prefix>.<kind>.<subject>, best effort: delivery never waits for them." config:"Events"`
	EventPrefix        string          `help:"Prefix of lifecycle events." default:"${event_prefix}" config:"EventPrefix"`
	MaxPayload         int             `help:"Largest payload accepted, in bytes; 0 is the NATS server's max_payload." default:"0" config:"MaxPayload"`
	MaxControlLine     int             `help:"The NATS server's max_control_line, which it does not announce; ingest refuses messages whose delivery would exceed it." default:"4096" config:"MaxControlLine"`
	ExpiryInterval     time.Duration   `help:"How often expired messages, and dead letters past their retention, are removed." default:"1s" config:"Expiry.Interval"`
	DeadRetention      time.Duration   `help:"How long dead letters are kept, from their death, unless replayed or deleted first; negative keeps them until then. 0 is the default, 168h (7 days)." default:"0s" config:"Expiry.DeadRetention"`
	MaxInFlight        int             `help:"Deliveries waiting for an answer at most; memory grows with it. 0 is the default, 65536." default:"0" config:"Delivery.MaxInFlight"`
	SubjectMaxInFlight int             `name:"subject-max-in-flight" help:"Deliveries of one subject waiting for an answer at most, so that no subject takes the whole window. 0 is the default, an eighth of --max-in-flight." default:"0" config:"Delivery.SubjectMaxInFlight"`
	IdleRelease        time.Duration   `help:"How long the service waits, once quiet after a burst of writes, before it hands memory back to the OS (the store's memtables, Go's free pages); negative turns it off. 0 is the default, 10s." default:"0s" config:"IdleRelease"`
	DedupWindow        time.Duration   `name:"dedup-window" help:"How long after a message is stored a resend of it (the same subject and Nats-Msg-Id, or the same subject, Delay-Id and content) is answered with the first reply and stores nothing; negative turns it off. 0 is the default, 2m." default:"0s" config:"DedupWindow"`
	HTTP               string          `name:"http" help:"Address of the HTTP listener for /metrics, /healthz and /readyz; port 0 picks a free one, \"\" turns it off." default:"${http}"`
	PProf              bool            `name:"pprof" help:"Also serve Go's profiles on /debug/pprof/ on the HTTP listener. Off by default: the listener has no auth."`
	OTel               bool            `name:"otel" help:"Record OpenTelemetry spans of the messages published with a W3C traceparent (ingest, each delivery, the ACK) and deliver them with the delivery's traceparent; exported over OTLP/HTTP as the standard OTEL_EXPORTER_OTLP_* variables say. Off by default."`
	UI                 bool            `name:"ui" help:"Serve the web console under /ui/ on the HTTP listener; --ui=false turns it off. Off a loopback address it needs --ui-auth." default:"true" negatable:""`
	UIAuth             string          `name:"ui-auth" help:"Password file of the web console: lines name:bcrypt-hash, as htpasswd -nB name writes them. Required for the console when --http is not on a loopback address." placeholder:"FILE" type:"path"`

	// bad holds the setting flags' values that did not parse; see
	// badValues. Nil when parse did not set it.
	bad *badValues
	// limits are the config file's limits, that exist from the start.
	// Nil when parse did not set it.
	limits *configLimits
}

// listen is where the embedded server listens.
func (c *serveCmd) listen() string {
	if c.NATSListen == "" {
		return defaultListen
	}
	return c.NATSListen
}

// jetStreamDir is where the embedded server's JetStream keeps its
// streams, or "" when it has none: beside the store, in the data dir.
func (c *serveCmd) jetStreamDir() string {
	if !c.NATSJetStream {
		return ""
	}
	return filepath.Join(c.DataDir, "jetstream")
}

// embedded reports whether serve runs its own nats-server.
func (c *serveCmd) embedded() bool { return c.NATS == "" }

// check reports every bad setting at once, each naming its flag and value.
func (c *serveCmd) check() error {
	var p problems
	if c.bad != nil {
		p = append(p, c.bad.errs...)
	}
	c.connFlags.check(&p)
	if c.embedded() {
		if set := c.authSet(); len(set) > 0 {
			p.add("%s: only apply with --nats; the embedded nats-server has no auth", strings.Join(set, ", "))
		}
		checkListen(&p, c.listen())
	} else if c.NATSListen != "" {
		p.add("--nats-listen %q: only applies to the embedded nats-server, and --nats %q uses another: give one of them", c.NATSListen, redact(c.NATS))
	}
	if c.NATSJetStream && !c.embedded() {
		p.add("--nats-jetstream: only applies to the embedded nats-server, and --nats %q uses another: enable JetStream in that server", redact(c.NATS))
	}
	// The engine names are engine.Config's to judge, so that a bad
	// one is reported with every other problem.
	if err := (engine.Config{Engine: c.Engine, Dir: "."}).Validate(); err != nil {
		for _, e := range leaves(err) {
			p.add("--engine %q: %s", c.Engine, withoutField(strings.TrimPrefix(e.Error(), "engine: "+delaystore.ErrInvalidConfig.Error()+": ")))
		}
	} else if c.Engine != "memory" {
		if c.DataDir == "" {
			p.add(`--data-dir "": want a directory for the %s engine`, c.Engine)
		} else if fi, err := os.Stat(c.DataDir); err == nil && !fi.IsDir() {
			p.add("--data-dir %q: is a file: want a directory", c.DataDir)
		}
	}
	c.checkCluster(&p, c.Engine, c.embedded())
	c.checkFleet(&p)
	checkHTTP(&p, c.HTTP)
	if c.PProf && c.HTTP == "" {
		p.add(`--pprof: serves on the HTTP listener, which --http "" turns off`)
	}
	c.checkUI(&p)
	// The prefixes have no default in bridge.Config to fall back on here:
	// an empty one is a mistake on the command line.
	for _, f := range []struct{ name, v, example string }{
		{"--ingest-prefix", c.IngestPrefix, wire.DefaultIngestPrefix},
		{"--js-schedule-prefix", c.JSSchedulePrefix, wire.DefaultJSSchedulePrefix},
		{"--ack-prefix", c.AckPrefix, wire.DefaultAckPrefix},
		{"--api-prefix", c.APIPrefix, wire.DefaultAPIPrefix},
		{"--event-prefix", c.EventPrefix, wire.DefaultEventPrefix},
	} {
		if f.v == "" {
			p.add("%s \"\": want a subject prefix such as %s", f.name, f.example)
		}
	}
	// Every other rule lives with the setting, in the config that owns it;
	// its complaints are reported under the flags that set them.
	if c.limits != nil {
		c.limits.check(&p, c.MaxInFlight)
	}
	var b bridge.Config
	p = append(p, c.applySettings(&b)...)
	p = append(p, c.settingProblems(b)...)
	return p.err()
}

// joinDurations writes ds as the flag takes them: 1s,5s,30s.
func joinDurations(ds []time.Duration) string {
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = d.String()
	}
	return strings.Join(parts, ",")
}

// apply copies the service settings into b; check has reported any that
// do not fit.
func (c *serveCmd) apply(b *bridge.Config) {
	_ = c.applySettings(b)
	if c.limits != nil {
		b.Limits = c.limits.stored()
	}
}

// probePorts reports, as one usage error, the ports serve would listen on
// that are taken now: the HTTP listener's and the embedded server's.
func (c *serveCmd) probePorts() error {
	var p problems
	probeHTTP(&p, c.HTTP)
	if c.embedded() {
		probeListen(&p, c.listen())
	}
	if err := p.err(); err != nil {
		return usage.Wrap(err)
	}
	return nil
}

// Run starts the service and stops it on SIGINT or SIGTERM, or when its
// NATS connection closes for good (see server.Server.Lost), in the order
// server.Close says. A second signal exits at once.
func (c *serveCmd) Run(e *env) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := e.log
	gogc.Apply(log, os.Getenv("GOGC"))
	o, err := c.serverOptions(log)
	if err != nil {
		return err
	}
	if err := armCrashHooks(&o, log); err != nil {
		return err
	}
	dataDir := c.DataDir
	if abs, err := filepath.Abs(dataDir); err == nil {
		dataDir = abs
	}
	if c.Engine == engine.Memory {
		dataDir = ""
	}
	if c.embedded() {
		log.Info("natsdelay starting", "nats_listen", c.listen(), "data_dir", dataDir, "engine", c.Engine)
	} else {
		log.Info("natsdelay starting", "nats_url", redact(c.NATS), "data_dir", dataDir, "engine", c.Engine)
	}
	srv, err := server.Open(ctx, o)
	if err != nil {
		if errors.Is(err, server.ErrSettings) {
			return usage.Wrap(err)
		}
		return err
	}

	var lostErr error
	select {
	case <-ctx.Done():
	case lostErr = <-srv.Lost():
		log.Error("the NATS connection closed for good: stopping, so that a supervisor restarts natsdelay", "err", lostErr)
	}
	// Listen for the second signal before the first handler goes, so
	// that no signal falls to the default action in between.
	done := make(chan struct{})
	defer close(done)
	exitOnSecondSignal(done, log)
	stop()
	log.Info("natsdelay stopping")
	err = srv.Close()
	if lostErr != nil {
		return errors.Join(fmt.Errorf("the NATS connection closed for good: %w", lostErr), err)
	}
	if err != nil {
		return err
	}
	log.Info("natsdelay stopped")
	return nil
}

// serverOptions are the server's options from serve's settings.
func (c *serveCmd) serverOptions(log *slog.Logger) (server.Options, error) {
	users, err := c.uiUsers()
	if err != nil {
		return server.Options{}, err
	}
	o := server.Options{
		Logger: log, Engine: c.Engine, DataDir: c.DataDir, HTTP: c.HTTP, PProf: c.PProf, UI: c.UI && c.HTTP != "", UIUsers: users, OTel: c.OTel,
		NATSListen: c.listen(), JetStreamDir: c.jetStreamDir(),
		Preflight: c.probePorts,
	}
	c.apply(&o.Service)
	if !c.embedded() {
		o.Connect = func(extra ...nats.Option) (*nats.Conn, error) { return c.connect("natsdelay", log, extra...) }
	} else {
		opts, err := c.options("natsdelay", log)
		if err != nil {
			return o, err
		}
		o.NATSOptions = opts
		o.NATSCluster = server.EmbeddedCluster{Name: c.NATSClusterName, Listen: c.NATSClusterListen, Routes: c.NATSRoutes, ServerName: "natsdelay-" + c.NATSClusterListen}
		if c.NodeID != "" {
			o.NATSCluster.ServerName = "natsdelay-" + c.NodeID
		}
	}
	if c.clustered() {
		rc, err := c.raftConfig()
		if err != nil {
			return o, err
		}
		o.Cluster = &rc
	}
	o.Fleet = c.fleetConfig()
	return o, nil
}

// exitOnSecondSignal exits the process at the next SIGINT or SIGTERM, for
// when an orderly shutdown takes too long, until done is closed.
func exitOnSecondSignal(done <-chan struct{}, log *slog.Logger) {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		defer signal.Stop(sigs)
		select {
		case s := <-sigs:
			log.Error("second signal: exiting at once", "signal", s.String())
			os.Exit(exitRuntime)
		case <-done:
		}
	}()
}
