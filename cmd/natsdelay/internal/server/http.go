package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/natsdelay/natsdelay/cmd/natsdelay/internal/console"
)

// httpShutdownTimeout bounds how long a request in progress (a scrape, a
// profile) may hold up a stop; past it the request is cut.
const httpShutdownTimeout = 5 * time.Second

// readiness is what /readyz and /leader ask; *bridge.Service implements
// it.
type readiness interface {
	Ready() error
	// Leader reports whether the service serves ingest, acks and the API:
	// always, unless it is a node of a cluster that is not the leader.
	Leader() bool
	// Role is the node's role in its cluster, "" outside a cluster.
	Role() string
}

// httpServer serves /metrics, /healthz, /readyz and /leader. It owns its listener
// and the one goroutine that serves it.
type httpServer struct {
	srv   *http.Server
	addr  string
	ready atomic.Pointer[readiness] // nil until the service is up
	done  chan struct{}             // closed when the serving goroutine returns
	err   error                     // Serve's error, set before done is closed
	// console serves the web console under console.Prefix; nil when it
	// is turned off.
	console *console.Console
	// fresh holds the connections that have sent no request yet.
	fresh freshConns
	// grace is how long close lets requests in progress finish.
	grace time.Duration
	log   *slog.Logger
}

// freshConns tracks the connections an http.Server has accepted that
// have sent no request yet, so that a stop can close them: browsers open
// connections ahead of need, and Shutdown counts one that is new as in
// progress for its first 5 seconds, which would hold up every stop
// (and use up its grace period) while a console page was open.
type freshConns struct {
	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	closing bool
	changed chan struct{} // told of each change, without waiting
}

// track is the server's ConnState hook.
func (f *freshConns) track(c net.Conn, state http.ConnState) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case state == http.StateNew && f.closing:
		_ = c.Close()
	case state == http.StateNew:
		if f.conns == nil {
			f.conns = make(map[net.Conn]struct{})
		}
		f.conns[c] = struct{}{}
	default:
		delete(f.conns, c)
	}
	select {
	case f.changed <- struct{}{}:
	default:
	}
}

// closeAll closes the connections that have sent nothing, and any
// accepted from now on before they send anything.
func (f *freshConns) closeAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closing = true
	for c := range f.conns {
		_ = c.Close()
	}
	clear(f.conns)
}

// startHTTP listens on addr and serves reg's metrics and the health checks,
// and with ui the web console of ccfg (see package console; its Users, if
// not nil, are who may log in to it; its Addr and Logger are set here).
// /readyz answers 503 until setReady is
// called. The caller calls close.
//
// With pprof, it also serves Go's profiles on /debug/pprof/. They are off
// by default: the listener has no auth, and a profile shows the
// process's internals and costs CPU while it runs.
func startHTTP(addr string, reg *prometheus.Registry, pprofOn, ui bool, ccfg console.Config, log *slog.Logger) (*httpServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, settingsf("--http %s: the port is already in use: choose another with --http HOST:PORT, or turn the listener off with --http \"\"", addr)
		}
		return nil, settingsf("--http %s: cannot listen there: %w", addr, err)
	}
	h := &httpServer{addr: ln.Addr().String(), done: make(chan struct{}), grace: httpShutdownTimeout, log: log}
	h.fresh.changed = make(chan struct{}, 1)
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		// A failing collector should not hide every other metric.
		ErrorHandling: promhttp.ContinueOnError,
		ErrorLog:      slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		// The process answers, so it is alive; readiness is /readyz.
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", h.readyz)
	mux.HandleFunc("GET /leader", h.leader)
	if pprofOn {
		// The pprof package registers on http.DefaultServeMux when
		// imported; this mux only has what is added here.
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	if ui {
		ccfg.Addr, ccfg.Logger = h.addr, log.With("component", "console")
		c, err := console.New(ccfg)
		if err != nil {
			_ = ln.Close()
			return nil, err
		}
		h.console = c
		mux.Handle(console.Prefix, c)
	}
	h.srv = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		ConnState:         h.fresh.track,
	}
	go func() {
		defer close(h.done)
		if err := h.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			h.err = err
			log.Error("http listener stopped", "err", err)
		}
	}()
	return h, nil
}

// newRegistry returns the registry that /metrics serves: the service's
// metrics go in later, the Go runtime and process metrics are in from the start.
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// setReady makes /readyz ask r.
func (h *httpServer) setReady(r readiness) { h.ready.Store(&r) }

func (h *httpServer) readyz(w http.ResponseWriter, _ *http.Request) {
	r := h.ready.Load()
	if r == nil {
		http.Error(w, "starting", http.StatusServiceUnavailable)
		return
	}
	if err := (*r).Ready(); err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	// NB: a follower is ready: it replicates and would take over; the
	// body says which it is, and /leader tells load balancers apart.
	if role := (*r).Role(); role != "" {
		fmt.Fprintf(w, "ok: %s\n", role)
		return
	}
	fmt.Fprintln(w, "ok")
}

// leader answers 200 on the node that serves ingest, acks and the API (a
// service outside a cluster always does), and 503 with the node's role
// elsewhere: a load balancer in front of a cluster's HTTP listeners sends
// to the leader only.
func (h *httpServer) leader(w http.ResponseWriter, _ *http.Request) {
	r := h.ready.Load()
	if r == nil {
		http.Error(w, "starting", http.StatusServiceUnavailable)
		return
	}
	if (*r).Leader() {
		fmt.Fprintln(w, "leader")
		return
	}
	role := (*r).Role()
	if role == "" {
		role = "not serving"
	}
	http.Error(w, role, http.StatusServiceUnavailable)
}

// close stops the listener, lets requests in progress finish for up to
// its grace period and cuts those still running, and waits for the
// serving goroutine. A request cut is not an error of the stop: nothing
// the service holds depends on the listener, and an exit status that
// says the stop failed would be wrong for a profile asked for a minute.
func (h *httpServer) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), h.grace)
	defer cancel()
	if h.console != nil {
		// NB: Shutdown waits for the requests in progress, and a live
		// tail's stream is one until the console ends it.
		h.console.StopTail()
	}
	h.fresh.closeAll()
	err := h.srv.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		h.log.Warn("http requests still in progress at the stop were cut", "grace", h.grace)
		err = h.srv.Close()
	}
	<-h.done
	if h.console != nil {
		h.console.Close()
	}
	if err != nil {
		return fmt.Errorf("stop the http listener: %w", err)
	}
	return h.err
}
