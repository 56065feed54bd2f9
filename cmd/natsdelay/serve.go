package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"natsdelay/bridge"
	"natsdelay/bridge/wire"
	"natsdelay/delaystore"
	"natsdelay/delaystore/engine"
)

// defaultDataDir is where serve keeps messages unless --data-dir moves it.
const defaultDataDir = "./natsdelay-data"

// serveCmd runs the service. The vars set on it in cli give the shared
// --nats flag an empty default, which means "embed a nats-server".
type serveCmd struct {
	connFlags    `embed:""`
	clusterFlags `embed:""`

	// NB: no default in the tag, so that check can tell --nats-listen given
	// alongside --nats; listen applies the default.
	NATSListen string `name:"nats-listen" help:"Address of the embedded nats-server, when there is no --nats; port 0 picks a free one. Default ${listen}." placeholder:"HOST:PORT"`

	NATSJetStream bool `name:"nats-jetstream" help:"Enable JetStream in the embedded nats-server, its streams kept in <data-dir>/jetstream, so that delayed messages can be delivered into a stream. Not with --nats: enable JetStream in that server."`

	DataDir            string          `help:"Directory of the message store (not used by the memory engine)." default:"${data_dir}"`
	Engine             string          `help:"Storage engine: pebble, bolt or memory. memory keeps nothing across restarts." default:"pebble" config:"Engine"`
	TimeBucket         time.Duration   `help:"Width of the time bucket in keys, whole milliseconds; 0 is raw milliseconds. Never change it for an existing data dir." default:"0s" config:"TimeBucket"`
	AckWait            time.Duration   `help:"How long a delivery waits for an ACK before it is redelivered." default:"30s" config:"AckWait"`
	MaxDeliver         int             `help:"Deliveries after which an unACKed message is dead-lettered; a message's Delay-Max-Deliver wins. 0 is unlimited." default:"0" config:"MaxDeliver"`
	Backoff            []time.Duration `help:"Waits before the redeliveries after attempts 1, 2, ..., such as 1s,5s,30s; the last repeats. Default none: redeliver right after the ack wait." placeholder:"DURATION" config:"Backoff"`
	DeadLetter         string          `help:"Subject that receives dead letters; empty deletes them unpublished." placeholder:"SUBJECT" config:"DeadLetterSubject"`
	DeadLetterExp      bool            `name:"dead-letter-expired" help:"Also dead-letter expired messages (Delay-Reason: expired)." config:"DeadLetterExpired"`
	IngestPrefix       string          `help:"Prefix that publishers send to: <prefix>.<subject>." default:"${ingest_prefix}" config:"IngestPrefix"`
	AckPrefix          string          `help:"Prefix of delivery reply subjects." default:"${ack_prefix}" config:"AckPrefix"`
	APIPrefix          string          `name:"api-prefix" help:"Prefix of the request/reply API." default:"${api_prefix}" config:"APIPrefix"`
	MaxPayload         int             `help:"Largest payload accepted, in bytes; 0 is the NATS server's max_payload." default:"0" config:"MaxPayload"`
	MaxControlLine     int             `help:"The NATS server's max_control_line, which it does not announce; ingest refuses messages whose delivery would exceed it." default:"4096" config:"MaxControlLine"`
	ExpiryInterval     time.Duration   `help:"How often expired messages are removed." default:"1s" config:"Expiry.Interval"`
	MaxInFlight        int             `help:"Deliveries waiting for an answer at most; memory grows with it. 0 is the default, 65536." default:"0" config:"MaxInFlight"`
	SubjectMaxInFlight int             `name:"subject-max-in-flight" help:"Deliveries of one subject waiting for an answer at most, so that no subject takes the whole window. 0 is the default, an eighth of --max-in-flight." default:"0" config:"SubjectMaxInFlight"`
	IdleRelease        time.Duration   `help:"How long the service waits, once quiet after a burst of writes, before it hands memory back to the OS (the store's memtables, Go's free pages); negative turns it off. 0 is the default, 10s." default:"0s" config:"IdleRelease"`
	HTTP               string          `name:"http" help:"Address of the HTTP listener for /metrics, /healthz and /readyz; port 0 picks a free one, \"\" turns it off." default:"${http}"`
	PProf              bool            `name:"pprof" help:"Also serve Go's profiles on /debug/pprof/ on the HTTP listener. Off by default: the listener has no auth."`

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
	// NB: the engine names are engine.Config's to judge, so that a bad
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
	checkHTTP(&p, c.HTTP)
	if c.PProf && c.HTTP == "" {
		p.add(`--pprof: serves on the HTTP listener, which --http "" turns off`)
	}
	// The prefixes have no default in bridge.Config to fall back on here:
	// an empty one is a mistake on the command line.
	for _, f := range []struct{ name, v, example string }{
		{"--ingest-prefix", c.IngestPrefix, wire.DefaultIngestPrefix},
		{"--ack-prefix", c.AckPrefix, wire.DefaultAckPrefix},
		{"--api-prefix", c.APIPrefix, wire.DefaultAPIPrefix},
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

// defaultGCPercent is serve's GOGC unless the environment gives one. The
// service's Go heap is small (the store's memtables and block cache are
// outside it), so each collection has little to scan, and under load Go's
// default of 100 collected every ~150 ms. On two cores every mark phase
// took CPU from the dispatcher and the NATS client and showed as the
// lateness tail; 200 halves the collections (and took ~10% off the CPU per
// delivered message) for a heap peak of three times the live heap instead
// of two, a few tens of MB at most. See docs/performance.md.
const defaultGCPercent = 200

// gcPercent is the GOGC serve sets given the environment's GOGC: its
// default when there is none, and none (set false) when the operator
// chose one, which the Go runtime has applied already.
func gcPercent(env string) (pct int, set bool) {
	if env != "" {
		return 0, false
	}
	return defaultGCPercent, true
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
		return usageError{err}
	}
	return nil
}

// Run starts the service and stops it on SIGINT or SIGTERM: first the
// service (it answers what it accepted and closes the store), then the
// NATS connection, then the embedded server. A second signal exits at once.
func (c *serveCmd) Run(e *env) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := e.log
	crashHook, err := advanceCrashHook(os.Getenv(crashAdvanceEnv), log)
	if err != nil {
		return err
	}

	if pct, set := gcPercent(os.Getenv("GOGC")); set {
		debug.SetGCPercent(pct)
		log.Info("garbage collector target set", "gogc", pct, "source", "serve's default; the GOGC environment variable overrides it")
	}

	dataDir := c.DataDir
	if abs, err := filepath.Abs(dataDir); err == nil {
		dataDir = abs
	}
	if c.Engine == "memory" {
		dataDir = ""
	}
	if c.embedded() {
		log.Info("natsdelay starting", "nats_listen", c.listen(), "data_dir", dataDir, "engine", c.Engine)
	} else {
		log.Info("natsdelay starting", "nats_url", redact(c.NATS), "data_dir", dataDir, "engine", c.Engine)
	}

	// The data dir comes first: a second serve on it stops here, before
	// it starts a NATS server or takes a port.
	if c.Engine != engine.Memory {
		unlock, err := lockDataDir(dataDir)
		if err != nil {
			return err
		}
		defer unlock()
	}
	if err := c.probePorts(); err != nil {
		return err
	}

	// The HTTP listener comes next: a port in use fails before anything
	// else starts, and /healthz answers while the rest starts.
	var hs *httpServer
	var reg prometheus.Registerer
	httpAddr := "off"
	if c.HTTP != "" {
		r := newRegistry()
		var err error
		if hs, err = startHTTP(c.HTTP, r, c.PProf, log); err != nil {
			return err
		}
		reg, httpAddr = r, hs.addr
	}
	stopHTTP := func() {
		if hs == nil {
			return
		}
		if err := hs.close(); err != nil {
			log.Warn("stopping the http listener", "err", err)
		}
	}
	// lost hears when the connection closes for good while the service
	// runs: nats.go gives up on some errors (the server's "maximum control
	// line exceeded", an authorization error twice in a row) however many
	// reconnects it is allowed. A service without a connection can neither
	// take nor deliver messages, so it exits non-zero for its supervisor
	// to restart it rather than stay up, unready, forever.
	lost := make(chan error, 1)
	var stopping atomic.Bool
	onClosed := nats.ClosedHandler(func(nc *nats.Conn) {
		if stopping.Load() {
			return
		}
		err := nc.LastError()
		if err == nil {
			err = errors.New("closed")
		}
		select {
		case lost <- err:
		default:
		}
	})
	srv, nc, url, err := c.connectOrEmbed(log, onClosed)
	if err != nil {
		stopHTTP()
		return err
	}
	// stopNATS closes what connectOrEmbed started, after the service, and
	// then the HTTP listener, so /readyz says 503 to the end.
	stopNATS := func() {
		stopping.Store(true)
		closeConn(nc, log)
		if srv != nil {
			shutdownEmbedded(srv, log)
		}
		stopHTTP()
	}
	clustered := c.clustered()
	st, err := openStore(c.Engine, c.DataDir, log, clustered)
	if err != nil {
		stopNATS()
		return err
	}
	cfg := bridge.Config{Conn: nc, Registerer: reg}
	cfg.Store, cfg.Logger = st, log
	// closeLocal closes what the service does not own in a cluster: the
	// node, then the local store it applies to.
	closeLocal := func() {}
	if clustered {
		node, err := c.openNode(ctx, dataDir, st, log)
		if err != nil {
			if cerr := st.Close(); cerr != nil {
				log.Warn("closing the store", "err", cerr)
			}
			stopNATS()
			return err
		}
		closeLocal = func() {
			// A leader that stops hands its leadership over first: the
			// others then need no election timeout to go on serving.
			// NB: after the service stopped, so that every request it took
			// was answered while it still led.
			if node.Status().Role == "leader" {
				tctx, cancel := context.WithTimeout(context.Background(), transferTimeout(c.ClusterTimeout))
				if leader, err := node.TransferLeadership(tctx); err != nil {
					log.Warn("could not hand the cluster leadership over before stopping: the others elect a leader after --cluster-timeout", "err", err)
				} else {
					log.Info("cluster leadership handed over", "leader", leader)
				}
				cancel()
			}
			if err := node.Close(); err != nil {
				log.Warn("stopping the cluster node", "err", err)
			}
			if err := st.Close(); err != nil {
				log.Warn("closing the store", "err", err)
			}
		}
		// NB: the service suspends its core while this node follows,
		// closing the store it holds, and resumes on the replicated store
		// again when it leads: Close of node.Store() leaves the node and
		// the local store running.
		cfg.Store = node.Store()
		cfg.Reopen = func() (delaystore.Store, error) { return node.Store(), nil }
		cfg.Cluster = bridge.RaftCluster(node)
	} else if c.Engine != engine.Memory {
		// After a write to disk fails, the service closes the store and
		// opens it again with the same settings, until the disk takes
		// writes again. NB: not in memory, where a reopen starts empty.
		cfg.Reopen = func() (delaystore.Store, error) { return openStore(c.Engine, c.DataDir, log, false) }
	}
	c.apply(&cfg)
	cfg.AdvanceHook = crashHook
	svc, err := bridge.New(cfg)
	if err != nil {
		closeLocal()
		stopNATS()
		return fmt.Errorf("start the service: %w", err)
	}
	if hs != nil {
		hs.setReady(svc)
	}
	log.Info("natsdelay ready", "nats_url", url, "data_dir", dataDir, "engine", c.Engine,
		"ingest", c.IngestPrefix+".>", "max_payload", nc.MaxPayload(), "http", httpAddr)

	var lostErr error
	select {
	case <-ctx.Done():
	case lostErr = <-lost:
		log.Error("the NATS connection closed for good: stopping, so that a supervisor restarts natsdelay", "err", lostErr)
	}
	// NB: listen for the second signal before the first handler goes, so
	// that no signal falls to the default action in between.
	done := make(chan struct{})
	defer close(done)
	exitOnSecondSignal(done, log)
	stop()
	log.Info("natsdelay stopping")
	err = svc.Close()
	closeLocal()
	stopNATS()
	if lostErr != nil {
		return errors.Join(fmt.Errorf("the NATS connection closed for good: %w", lostErr), err)
	}
	if err != nil {
		return fmt.Errorf("stop the service: %w", err)
	}
	log.Info("natsdelay stopped")
	return nil
}

// connectOrEmbed connects to --nats, or starts the embedded server and
// connects to it in process. srv is nil when there is no embedded server.
func (c *serveCmd) connectOrEmbed(log *slog.Logger, extra ...nats.Option) (srv *server.Server, nc *nats.Conn, url string, err error) {
	extra = append(reconnectForever(), extra...)
	if !c.embedded() {
		if nc, err = c.connect("natsdelay", log, extra...); err != nil {
			return nil, nil, "", err
		}
		return nil, nc, nc.ConnectedUrlRedacted(), nil
	}
	rc := embeddedRoutes{name: c.NATSClusterName, listen: c.NATSClusterListen, routes: c.NATSRoutes, serverName: "natsdelay-" + c.NATSClusterListen}
	if c.NodeID != "" {
		rc.serverName = "natsdelay-" + c.NodeID
	}
	if srv, err = startEmbedded(c.listen(), log, rc, c.jetStreamDir()); err != nil {
		return nil, nil, "", err
	}
	url = embeddedURL(srv)
	log.Info("embedded nats-server listening", "client_url", url)
	opts, err := c.options("natsdelay", log)
	if err == nil {
		// In process: the service's own traffic skips TCP.
		opts = append(opts, nats.InProcessServer(srv))
		nc, err = nats.Connect(url, append(opts, extra...)...)
	}
	if err != nil {
		shutdownEmbedded(srv, log)
		return nil, nil, "", fmt.Errorf("connect to the embedded nats-server: %w", err)
	}
	return srv, nc, url, nil
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

// openStore opens the engine named by --engine. A data dir that holds the
// other engine's store is a usage error: opening it would start empty and
// leave the messages there undelivered. In a cluster Pebble runs with its
// WAL off: the Raft log is the WAL, and the node replays it into the store.
func openStore(name, dir string, log *slog.Logger, clustered bool) (delaystore.Store, error) {
	ec := engine.Config{Engine: name, Dir: dir, Logger: log}
	ec.Pebble.DisableWAL = clustered
	st, err := engine.Open(ec)
	switch {
	case errors.Is(err, delaystore.ErrInvalidConfig):
		return nil, usagef("--engine %s --data-dir %s: %v", name, dir, err)
	case err != nil:
		return nil, fmt.Errorf("open the %s store in %s: %w", name, dir, err)
	}
	return st, nil
}

// closeConn sends what the service still buffers, then closes nc.
func closeConn(nc *nats.Conn, log *slog.Logger) {
	if err := nc.FlushTimeout(5 * time.Second); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		log.Warn("flushing the NATS connection", "err", err)
	}
	nc.Close()
}

func shutdownEmbedded(s *server.Server, log *slog.Logger) {
	s.Shutdown()
	s.WaitForShutdown()
	log.Debug("embedded nats-server stopped")
}
