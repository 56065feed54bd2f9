package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// ListenError explains why the embedded server cannot listen on addr and
// what to do about it.
func ListenError(addr string, err error) error {
	if !errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("--nats-listen %s: cannot listen there: %w", addr, err)
	}
	host, port, _ := net.SplitHostPort(addr)
	n, _ := strconv.Atoi(port)
	return fmt.Errorf("--nats-listen %s: the port is already in use, perhaps by another natsdelay or nats-server; "+
		"choose another with --nats-listen %s, or connect to the server there with --nats nats://%s",
		addr, net.JoinHostPort(host, strconv.Itoa(n+1)), net.JoinHostPort(clientHost(host), port))
}

// clientHost is the host a client uses to reach a server listening on host.
func clientHost(host string) string {
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		return "127.0.0.1"
	}
	return host
}

// EmbeddedCluster makes the embedded nats-server one of a NATS cluster:
// it takes routes on listen and routes to routes. Zero: a lone server.
type EmbeddedCluster struct {
	Name   string
	Listen string
	Routes []string
	// ServerName names the server in the NATS cluster; names must differ.
	ServerName string
}

// startEmbedded runs a nats-server listening on addr, which checkListen
// has accepted, routing as rc says, with JetStream keeping its streams in
// jsDir unless jsDir is empty. Its logs go to log at debug level, except
// warnings and errors. The caller shuts it down.
func startEmbedded(addr string, log *slog.Logger, rc EmbeddedCluster, jsDir string) (*server.Server, error) {
	host, port, _ := net.SplitHostPort(addr)
	n, _ := strconv.Atoi(port)
	if n == 0 {
		// nats-server reads 0 as its default port 4222; -1 asks for any
		// free port, which is what :0 means everywhere else.
		n = server.RANDOM_PORT
	}
	debug := log.Enabled(context.Background(), slog.LevelDebug)
	opts := &server.Options{
		ServerName: "natsdelay",
		Host:       host,
		Port:       n,
		// Signals are ours: serve shuts the server down after the service.
		NoSigs: true,
		Debug:  debug,
		// JetStream is off unless asked for: it takes memory, a
		// directory and, in a NATS cluster, a quorum of its own.
		JetStream: jsDir != "",
		StoreDir:  jsDir,
	}
	if rc.Listen != "" {
		ch, cp, _ := net.SplitHostPort(rc.Listen)
		cn, _ := strconv.Atoi(cp)
		if cn == 0 {
			cn = server.RANDOM_PORT
		}
		opts.ServerName = rc.ServerName
		opts.Cluster = server.ClusterOpts{Name: rc.Name, Host: ch, Port: cn}
		// A peer that is down makes the server retry its route every
		// second; it tells the first failure, then one a minute.
		opts.ReconnectErrorReports = routeErrorReports
		for _, r := range rc.Routes {
			u, err := url.Parse(r)
			if err != nil {
				return nil, fmt.Errorf("embedded nats-server: route %q: %w", r, err)
			}
			opts.Routes = append(opts.Routes, u)
		}
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded nats-server: %w", err)
	}
	lg := &serverLogger{log: log.With("component", "nats-server")}
	s.SetLogger(lg, debug, false)
	// Start returns once the client listener is up or has failed.
	s.Start()
	if ferr := lg.fatalErr(); ferr != nil {
		s.Shutdown()
		// The server's message holds its listen error only as text; try
		// the address once more to learn whether it is in use.
		if ln, err := net.Listen("tcp", addr); err != nil && errors.Is(err, syscall.EADDRINUSE) {
			return nil, settingsError{ListenError(addr, err)}
		} else if err == nil {
			_ = ln.Close()
		}
		return nil, fmt.Errorf("embedded nats-server on %s: %w", addr, ferr)
	}
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		return nil, fmt.Errorf("embedded nats-server on %s: not ready after 10s", addr)
	}
	return s, nil
}

// embeddedURL is the URL clients use to reach s.
func embeddedURL(s *server.Server) string {
	u, err := url.Parse(s.ClientURL())
	if err != nil {
		return s.ClientURL()
	}
	u.Host = net.JoinHostPort(clientHost(u.Hostname()), u.Port())
	return u.String()
}

// serverLogger adapts slog to nats-server's printf-style logger. Notices
// go to debug: the server's start-up banner would crowd out our own lines.
type serverLogger struct {
	log *slog.Logger

	mu struct {
		sync.Mutex
		fatal error
	}
}

var _ server.Logger = (*serverLogger)(nil)

func (l *serverLogger) Noticef(format string, v ...any) { l.log.Debug(fmt.Sprintf(format, v...)) }
func (l *serverLogger) Warnf(format string, v ...any)   { l.log.Warn(fmt.Sprintf(format, v...)) }

// Errorf logs at error level, but a failed attempt to connect a route
// to a peer at warning level: the peer is down or not started yet, which
// the cluster rides out; the server retries it every second and reports
// the first failure and then one in routeErrorReports.
func (l *serverLogger) Errorf(format string, v ...any) {
	if strings.HasPrefix(format, routeConnectError) {
		l.log.Warn(fmt.Sprintf(format, v...))
		return
	}
	l.log.Error(fmt.Sprintf(format, v...))
}

// routeConnectError starts nats-server's report of a failed attempt to
// connect a route (server/route.go connectToRoute).
const routeConnectError = "Error trying to connect to route"

// routeErrorReports is how many failed attempts to reconnect a route
// make one report: at the server's one attempt a second, one a minute.
const routeErrorReports = 60

func (l *serverLogger) Debugf(format string, v ...any) { l.log.Debug(fmt.Sprintf(format, v...)) }
func (l *serverLogger) Tracef(format string, v ...any) { l.log.Debug(fmt.Sprintf(format, v...)) }

// Fatalf records the first fatal error for startEmbedded to report. NB:
// nats-server's own logger exits the process here; ours must not, so the
// service can still shut down in order.
func (l *serverLogger) Fatalf(format string, v ...any) {
	err := fmt.Errorf(format, v...)
	l.log.Error(err.Error())
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mu.fatal == nil {
		l.mu.fatal = err
	}
}

func (l *serverLogger) fatalErr() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.fatal
}
