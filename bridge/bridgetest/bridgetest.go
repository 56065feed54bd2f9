// Package bridgetest runs a natsdelay Service for tests, as storetest runs
// the store suite: an embedded nats-server on a random port, a store, the
// Service on its own connection, and a client connection, each stopped by
// tb.Cleanup. Every helper calls tb.Helper and takes testing.TB, so tests
// and benchmarks share them.
//
// It starts no goroutines of its own; the server and the Service it starts
// are closed when the test ends.
package bridgetest

import (
	"log/slog"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	natsserver "github.com/nats-io/nats-server/v2/test"
	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge"
	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/delaystore/pebblestore"
)

// RunServer runs an embedded nats-server on a random port, shut down when
// tb ends.
func RunServer(tb testing.TB) *server.Server {
	tb.Helper()
	opts := natsserver.DefaultTestOptions
	opts.Port = -1
	s := natsserver.RunServer(&opts)
	tb.Cleanup(s.Shutdown)
	return s
}

// Connect opens a connection to srv with opts, closed when tb ends.
func Connect(tb testing.TB, srv *server.Server, opts ...nats.Option) *nats.Conn {
	tb.Helper()
	nc, err := nats.Connect(srv.ClientURL(), opts...)
	if err != nil {
		tb.Fatalf("connect: %v", err)
	}
	tb.Cleanup(nc.Close)
	return nc
}

// MemStore opens an in-memory Pebble store, for tests that are not about
// storage. The Service that takes it closes it.
func MemStore(tb testing.TB) delaystore.Store {
	tb.Helper()
	st, err := pebblestore.Open(pebblestore.Config{InMemory: true})
	if err != nil {
		tb.Fatalf("pebblestore.Open: %v", err)
	}
	return st
}

// Logger logs to tb's output, shown only when the test fails.
func Logger(tb testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tb.Output(), nil))
}

// Start runs a Service over st on its own connection to srv. mod, if not
// nil, adjusts the config, which starts with the connection, st and
// Logger(tb). Close is registered with tb.Cleanup, and an error from it
// fails the test; it is harmless when the test closed the Service itself.
func Start(tb testing.TB, srv *server.Server, st delaystore.Store, mod func(*bridge.Config), opts ...bridge.Option) *bridge.Service {
	tb.Helper()
	return StartOn(tb, Connect(tb, srv, nats.MaxReconnects(0)), st, mod, opts...)
}

// StartOn is Start on the connection nc, which the test owns.
func StartOn(tb testing.TB, nc *nats.Conn, st delaystore.Store, mod func(*bridge.Config), opts ...bridge.Option) *bridge.Service {
	tb.Helper()
	var cfg bridge.Config
	cfg.Logger = Logger(tb)
	if mod != nil {
		mod(&cfg)
	}
	svc, err := bridge.New(nc, st, cfg, opts...)
	if err != nil {
		tb.Fatalf("bridge.New: %v", err)
	}
	tb.Cleanup(func() {
		if err := svc.Close(); err != nil {
			tb.Errorf("Service.Close: %v", err)
		}
	})
	return svc
}

// Harness is one server, one Service on an in-memory store, and one client
// connection.
type Harness struct {
	Server  *server.Server
	Service *bridge.Service
	// Conn is a client connection of its own, not the Service's.
	Conn *nats.Conn
}

// New runs a server, a Service on MemStore with mod applied (see Start),
// and a client connection.
func New(tb testing.TB, mod func(*bridge.Config), opts ...bridge.Option) *Harness {
	tb.Helper()
	return NewOn(tb, MemStore(tb), mod, opts...)
}

// NewOn is New with the Service on st, which it owns from here on.
func NewOn(tb testing.TB, st delaystore.Store, mod func(*bridge.Config), opts ...bridge.Option) *Harness {
	tb.Helper()
	srv := RunServer(tb)
	svc := Start(tb, srv, st, mod, opts...)
	return &Harness{Server: srv, Service: svc, Conn: Connect(tb, srv, nats.MaxReconnects(0))}
}
