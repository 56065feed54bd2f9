// Package server assembles a running natsdelay: the data dir's lock, the
// HTTP listener, the NATS connection (and the embedded nats-server), the
// store, the cluster node and the service, opened in that order by Open
// and closed in the reverse order by Close. The command line's serve is
// its settings, Open, and a wait for a signal.
package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/natsdelay/natsdelay/bridge"
	"github.com/natsdelay/natsdelay/bridge/fleet"
	"github.com/natsdelay/natsdelay/cmd/natsdelay/internal/console"
	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/delaystore/engine"
	"github.com/natsdelay/natsdelay/delaystore/raftstore"
)

// ErrSettings is matched by every error of Open that other settings would
// fix: a port in use, a data dir another natsdelay holds, a store of the
// other engine, a cluster that does not fit this node.
var ErrSettings = errors.New("settings")

type settingsError struct{ err error }

func (e settingsError) Error() string        { return e.err.Error() }
func (e settingsError) Unwrap() error        { return e.err }
func (e settingsError) Is(target error) bool { return target == ErrSettings }

func settingsf(format string, args ...any) error {
	return settingsError{fmt.Errorf(format, args...)}
}

// Options are a server's settings and what it cannot build itself.
type Options struct {
	// Logger receives logs; nil discards them.
	Logger *slog.Logger

	// Connect connects to the NATS server to use, with the options the
	// server adds (reconnecting forever, its handler of a connection
	// closed for good). Nil embeds a nats-server that listens on
	// NATSListen, routed as NATSCluster says, with JetStream keeping its
	// streams in JetStreamDir if that is set, and connects to it in
	// process with NATSOptions (the connection's name, credentials, TLS).
	Connect      func(opts ...nats.Option) (*nats.Conn, error)
	NATSListen   string
	NATSCluster  EmbeddedCluster
	JetStreamDir string
	NATSOptions  []nats.Option

	// Engine and DataDir say where messages are kept; the memory engine
	// keeps none across restarts and takes no data dir.
	Engine  string
	DataDir string

	// HTTP is the address of the listener of /metrics, /healthz, /readyz
	// and /leader; empty turns it off. PProf adds Go's profiles to it.
	HTTP  string
	PProf bool
	// UI serves the web console under /ui/ on the HTTP listener; UIUsers,
	// if not nil, are who may log in to it (see package console).
	UI      bool
	UIUsers *console.Users
	// UITailIdle is how long a live tail's stream stays open with no
	// event to send; default console.DefaultTailIdle.
	UITailIdle time.Duration

	// Cluster, if not nil, makes this a node of a cluster, over the store
	// Open opens: its Dir and Logger are set by Open.
	Cluster *raftstore.Config

	// Fleet, if not nil, makes this node serve a cell of a fleet (see
	// package bridge/fleet): the fleet's subjects are routed by partition,
	// and the service serves on the cell's own. Its DataDir, Logger, Node
	// and prefixes are set by Open.
	Fleet *fleet.Config

	// Service holds the service's settings; Open sets its Logger.
	Service bridge.Config

	// OTel records the spans of traced messages (see
	// bridge.WithTracerProvider) and exports them over OTLP/HTTP as the
	// standard OTEL_EXPORTER_OTLP_* variables say; Close flushes them,
	// within a bound. Off, nothing is recorded.
	OTel bool

	// Preflight, if set, runs once the data dir is locked and before
	// anything listens: serve probes its ports there, so that a second
	// serve on the same data dir is told about the data dir.
	Preflight func() error
}

// Validate reports every bad option at once, each wrapping ErrSettings:
// options that contradict each other, and the dependencies of the store,
// the node and the service that Open builds itself and must find unset.
func (o Options) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, settingsf(format, args...)) }
	if o.Engine != "" && !slices.Contains(engine.Names(), o.Engine) {
		bad("Engine %q: want one of %s", o.Engine, strings.Join(engine.Names(), ", "))
	}
	if o.DataDir == "" && o.Engine != engine.Memory {
		bad("no DataDir: the %s engine keeps its messages there", cmp.Or(o.Engine, engine.Pebble))
	}
	switch {
	case o.Connect == nil && o.NATSListen == "":
		bad("no NATS server: set Connect, or NATSListen for the embedded one")
	case o.Connect != nil && (o.NATSCluster.Name != "" || o.NATSCluster.Listen != "" || len(o.NATSCluster.Routes) > 0 || o.JetStreamDir != ""):
		bad("NATSCluster and JetStreamDir configure the embedded nats-server, which Connect replaces")
	}
	if o.HTTP == "" && (o.UI || o.PProf) {
		bad("UI and PProf are served on the HTTP listener: set HTTP")
	}
	if o.UIUsers != nil && !o.UI {
		bad("UIUsers without UI: nobody would log in")
	}
	if c := o.Cluster; c != nil && (c.Dir != "" || c.Logger != nil) {
		bad("Cluster.Dir and Logger are set by Open (from DataDir and Logger): leave them unset")
	}
	if o.Service.Logger != nil {
		bad("Service.Logger is set by Open (from Logger): leave it unset")
	}
	if err := o.Service.Validate(); err != nil {
		errs = append(errs, settingsError{fmt.Errorf("Service: %w", err)})
	}
	return errors.Join(errs...)
}

// Server is a running natsdelay.
type Server struct {
	log *slog.Logger
	// closers stop what Open started, in the order they must stop: the
	// reverse of the start.
	closers []closer

	svc      *bridge.Service
	nc       *nats.Conn
	embedded *server.Server // nil when Options.Connect connects
	url      string
	httpAddr string

	lost     chan error
	stopping atomic.Bool
}

type closer struct {
	what string
	stop func() error
}

// Open starts a natsdelay as o says (see Options.Validate) and returns
// once it serves (or, in a cluster, follows). ctx bounds the start, a cluster's wait for its peers
// included. On error, what was started is stopped again.
func Open(ctx context.Context, o Options) (*Server, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	s := &Server{log: cmp.Or(o.Logger, slog.New(slog.DiscardHandler)), lost: make(chan error, 1)}
	if err := s.open(ctx, o); err != nil {
		if cerr := s.Close(); cerr != nil {
			s.log.Warn("stopping what started", "err", cerr)
		}
		return nil, err
	}
	return s, nil
}

// open starts what o says, pushing on s.closers what stops each part.
func (s *Server) open(ctx context.Context, o Options) error {
	dataDir, memory := dataDirOf(o)

	// The data dir comes first: a second serve on it stops here, before
	// it starts a NATS server or takes a port.
	if !memory {
		unlock, err := lockDataDir(dataDir)
		if err != nil {
			return err
		}
		s.push("data dir lock", func() error { unlock(); return nil })
	}
	if o.Preflight != nil {
		if err := o.Preflight(); err != nil {
			return err
		}
	}

	// The HTTP listener comes next: a port in use fails before anything
	// else starts, and /healthz answers while the rest starts.
	hs, reg, err := s.listenHTTP(o)
	if err != nil {
		return err
	}

	if err := s.connect(o); err != nil {
		return err
	}

	var traced bridge.Option
	if o.OTel {
		// Started before the service, so stopped after it: the spans of
		// what the service finishes while it stops are flushed too.
		if traced, err = s.startTracing(ctx); err != nil {
			return err
		}
	}

	st, err := openStore(o.Engine, o.DataDir, s.log, o.Cluster != nil)
	if err != nil {
		return err
	}
	cfg := o.Service
	cfg.Logger = s.log
	rec, fc, err := s.prepareFleet(o, dataDir, &cfg)
	if err != nil {
		return err
	}
	svcStore, svcOpts, err := s.serviceStore(ctx, o, st, dataDir, memory, reg)
	if err != nil {
		return err
	}
	if traced != nil {
		svcOpts = append(svcOpts, traced)
	}
	if o.Fleet != nil {
		// Before the first delivery: a cell's store may hold messages of
		// partitions it does not own (staged by a move, or left by one).
		svcOpts = append(svcOpts, bridge.WithFrozen(frozenAtStart(rec, fc)))
	}
	// From here the service owns the store, and closes it also when
	// New fails.
	if s.svc, err = bridge.New(s.nc, svcStore, cfg, svcOpts...); err != nil {
		return fmt.Errorf("start the service: %w", err)
	}
	s.push("service", s.svc.Close)
	if err := s.startFleet(o, rec, fc); err != nil {
		return err
	}
	if hs != nil {
		s.serveHTTP(o, hs)
	}
	s.log.Info("natsdelay ready", "nats_url", s.url, "data_dir", dataDir, "engine", o.Engine,
		"ingest", cfg.IngestPrefix+".>", "max_payload", s.nc.MaxPayload(), "http", s.httpAddr)
	return nil
}

// dataDirOf returns the absolute data dir of o, and whether it keeps
// its messages in memory, with no data dir ("" then).
func dataDirOf(o Options) (dataDir string, memory bool) {
	dataDir = o.DataDir
	if abs, err := filepath.Abs(dataDir); err == nil {
		dataDir = abs
	}
	memory = o.Engine == engine.Memory
	if memory {
		dataDir = ""
	}
	return dataDir, memory
}

// listenHTTP starts the HTTP listener o asks for, if any, and returns it
// with the registry the service is to report its metrics to; both are nil
// when o.HTTP is empty.
func (s *Server) listenHTTP(o Options) (*httpServer, prometheus.Registerer, error) {
	s.httpAddr = "off"
	if o.HTTP == "" {
		return nil, nil, nil
	}
	r := newRegistry()
	hs, err := startHTTP(o.HTTP, r, o.PProf, o.UI, console.Config{Users: o.UIUsers, TailIdle: o.UITailIdle}, s.log)
	if err != nil {
		return nil, nil, err
	}
	s.httpAddr = hs.addr
	s.push("http listener", hs.close)
	return hs, r, nil
}

// serviceStore returns the store the service is to use, st or, in a
// cluster, the replicated store of a node started on it, with the options
// that go with it. reg is where the service reports its metrics, nil for
// nowhere.
func (s *Server) serviceStore(ctx context.Context, o Options, st delaystore.Store, dataDir string, memory bool, reg prometheus.Registerer) (delaystore.Store, []bridge.Option, error) {
	svcStore, svcOpts := st, []bridge.Option{bridge.WithRegisterer(reg)}
	if o.Cluster != nil {
		// The service does not own the local store of a node: the node
		// applies to it, and it is closed after the node.
		s.push("store", st.Close)
		rc := *o.Cluster
		rc.Dir = filepath.Join(dataDir, raftDir)
		rc.Logger = s.log.With("component", "raft")
		node, err := openNode(ctx, st, rc, s.log)
		if err != nil {
			return nil, nil, err
		}
		s.push("cluster node", func() error { return s.closeNode(node, transferTimeout(rc.ElectionTimeout)) })
		// The service suspends its core while this node follows,
		// closing the store it holds, and resumes on the replicated store
		// again when it leads: Close of node.Store() leaves the node and
		// the local store running.
		svcStore = node.Store()
		reopen := func() (delaystore.Store, error) { return node.Store(), nil }
		cluster := advertisingHTTP{bridge.RaftCluster(node), httpURL(s.httpAddr, node.Status().Addr)}
		svcOpts = append(svcOpts, bridge.WithCluster(cluster), bridge.WithReopen(reopen))
	} else if !memory {
		// After a write to disk fails, the service closes the store and
		// opens it again with the same settings, until the disk takes
		// writes again. Not in memory, where a reopen starts empty.
		svcOpts = append(svcOpts, bridge.WithReopen(func() (delaystore.Store, error) { return openStore(o.Engine, o.DataDir, s.log, false) }))
	}
	return svcStore, svcOpts, nil
}

// serveHTTP tells hs, and its console if it has one, that the service is
// up.
func (s *Server) serveHTTP(o Options, hs *httpServer) {
	hs.setReady(s.svc)
	if hs.console != nil {
		hs.console.SetService(s.svc)
		if s.svc.Events() != nil {
			s.connectConsole(o, hs.console)
		}
	}
}

// connect connects with o.Connect, or starts the embedded server and
// connects to it in process.
func (s *Server) connect(o Options) error {
	// A connection that nats.go gives up on for good (the server's
	// "maximum control line exceeded", an authorization error twice in a
	// row) while the service runs is reported on Lost: a service without
	// one can neither take nor deliver messages.
	onClosed := nats.ClosedHandler(func(nc *nats.Conn) {
		if s.stopping.Load() {
			return
		}
		err := nc.LastError()
		if err == nil {
			err = errors.New("closed")
		}
		select {
		case s.lost <- err:
		default:
		}
	})
	if o.Connect != nil {
		nc, err := o.Connect(append(reconnectForever(), onClosed)...)
		if err != nil {
			return err
		}
		s.nc, s.url = nc, nc.ConnectedUrlRedacted()
		s.push("nats connection", s.closeConn)
		return nil
	}
	srv, err := startEmbedded(o.NATSListen, s.log, o.NATSCluster, o.JetStreamDir)
	if err != nil {
		return err
	}
	s.push("embedded nats-server", func() error { shutdownEmbedded(srv, s.log); return nil })
	s.embedded = srv
	s.url = embeddedURL(srv)
	s.log.Info("embedded nats-server listening", "client_url", s.url)
	// In process: the service's own traffic skips TCP.
	opts := append(append(append([]nats.Option(nil), o.NATSOptions...), reconnectForever()...), onClosed, nats.InProcessServer(srv))
	nc, err := nats.Connect(s.url, opts...)
	if err != nil {
		return fmt.Errorf("connect to the embedded nats-server: %w", err)
	}
	s.nc = nc
	s.push("nats connection", s.closeConn)
	return nil
}

// connectConsole gives the console's live tail a NATS connection of its
// own to subscribe to the lifecycle events on (package console, tail.go,
// says why not the service's): with the service's settings and
// credentials, reconnecting forever, but whose trouble is not the
// service's. Its closer, which runs before the service stops, ends the
// tails' streams first. Without it the tail answers 503, and the rest of
// the console and the service run on: it is logged, not fatal.
func (s *Server) connectConsole(o Options, c *console.Console) {
	log := s.log.With("component", "console")
	opts := append(reconnectForever(), nats.Name("natsdelay console"),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			// NB: a tail whose browser is slow overflows its
			// subscription; the console counts and shows those drops.
			if errors.Is(err, nats.ErrSlowConsumer) {
				log.Debug("live tail: a browser does not keep up; events dropped", "err", err)
				return
			}
			log.Warn("live tail's NATS connection", "err", err)
		}),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) { log.Debug("live tail's NATS connection lost", "err", err) }),
		nats.ReconnectHandler(func(*nats.Conn) { log.Debug("live tail's NATS connection back") }))
	var nc *nats.Conn
	var err error
	if o.Connect != nil {
		nc, err = o.Connect(opts...)
	} else {
		nc, err = nats.Connect(s.url, append(append(append([]nats.Option(nil), o.NATSOptions...), opts...), nats.InProcessServer(s.embedded))...)
	}
	if err != nil {
		log.Warn("the console's live tail has no NATS connection: its page answers 503; the service runs on", "err", err)
		return
	}
	c.SetEvents(nc)
	s.push("console's NATS connection", func() error {
		c.StopTail()
		nc.Close()
		return nil
	})
}

// reconnectForever keeps the service's connection through a NATS restart
// instead of giving up after nats.go's 60 attempts: the service holds
// messages that must go out when NATS is back.
func reconnectForever() []nats.Option {
	return []nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(time.Second)}
}

// Service is the running service.
func (s *Server) Service() *bridge.Service { return s.svc }

// URL is the NATS server's client URL, redacted.
func (s *Server) URL() string { return s.url }

// HTTPAddr is where the HTTP listener listens, or "off".
func (s *Server) HTTPAddr() string { return s.httpAddr }

// Lost receives the error of a NATS connection closed for good while the
// server runs; the server should then be closed and the process exit, for
// its supervisor to start it again.
func (s *Server) Lost() <-chan error { return s.lost }

// Close stops everything Open started, in the reverse order: the
// console's live tails and their NATS connection, the service (it answers
// what it accepted and closes its store), then the cluster node (a leader
// hands its leadership over first) and its local store, the NATS
// connection, the embedded server, the HTTP listener (so that /readyz
// says 503 to the end), and the data dir's lock. A part that fails to
// stop does not keep the others from stopping: each error is logged, and
// all are returned, joined.
func (s *Server) Close() error {
	var errs []error
	for i := len(s.closers) - 1; i >= 0; i-- {
		c := s.closers[i]
		if err := c.stop(); err != nil {
			s.log.Warn("stopping the "+c.what, "err", err)
			errs = append(errs, fmt.Errorf("stop the %s: %w", c.what, err))
		}
	}
	s.closers = nil
	return errors.Join(errs...)
}

func (s *Server) push(what string, stop func() error) {
	s.closers = append(s.closers, closer{what: what, stop: stop})
}

// closeNode hands a leader's leadership over, then stops the node. NB:
// after the service stopped, so that every request it took was answered
// while it still led; the others then need no election timeout to go on
// serving.
func (s *Server) closeNode(node *raftstore.Node, timeout time.Duration) error {
	if node.Status().Role == "leader" {
		tctx, cancel := context.WithTimeout(context.Background(), timeout)
		h, err := node.HandOver(tctx)
		cancel()
		logHandover(s.log, h, err)
	}
	return node.Close()
}

// logHandover tells what a leader's handover at its stop did, as it was:
// handed over to a named leader, given up with no successor heard of,
// nothing to hand over (the leadership was lost meanwhile), or failed.
func logHandover(log *slog.Logger, h raftstore.Handover, err error) {
	switch {
	case err != nil:
		log.Warn("could not hand the cluster leadership over before stopping: the others elect a leader after --cluster-timeout", "err", err)
	case !h.Led && h.Leader != "":
		log.Info("cluster leadership already lost before the stop: nothing to hand over", "leader", h.Leader)
	case !h.Led:
		log.Warn("cluster leadership already lost before the stop, and no leader known: the others elect one after --cluster-timeout")
	case h.Leader == "":
		log.Warn("cluster leadership given up, but no new leader heard of before stopping: the others elect one after --cluster-timeout")
	default:
		log.Info("cluster leadership handed over", "leader", h.Leader)
	}
}

// closeConn sends what the service still buffers, then closes the
// connection; its closing is no longer news for Lost.
func (s *Server) closeConn() error {
	s.stopping.Store(true)
	if err := s.nc.FlushTimeout(5 * time.Second); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		s.log.Warn("flushing the NATS connection", "err", err)
	}
	s.nc.Close()
	return nil
}

func shutdownEmbedded(srv *server.Server, log *slog.Logger) {
	srv.Shutdown()
	srv.WaitForShutdown()
	log.Debug("embedded nats-server stopped")
}

// openStore opens the engine name in dir. A data dir that holds the other
// engine's store is an error of the settings: opening it would start empty
// and leave the messages there undelivered. In a cluster Pebble runs with
// its WAL off: the Raft log is the WAL, and the node replays it into the
// store.
func openStore(name, dir string, log *slog.Logger, clustered bool) (delaystore.Store, error) {
	ec := engine.Config{Engine: name, Dir: dir, Logger: log}
	ec.Pebble.DisableWAL = clustered
	st, err := engine.Open(ec)
	switch {
	case errors.Is(err, delaystore.ErrInvalidConfig):
		return nil, settingsf("--engine %s --data-dir %s: %v", name, dir, err)
	case err != nil:
		return nil, fmt.Errorf("open the %s store in %s: %w", name, dir, err)
	}
	return st, nil
}
