package bridge_test

import (
	"testing"

	natsserver "github.com/nats-io/nats-server/v2/test"
	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"

	"natsdelay/bridge"
	"natsdelay/delaystore/pebblestore"
)

// TestMain fails the package's tests if any goroutine outlives them: every
// goroutine has an owner whose Close waits for it, so one left running is a
// Close that does not stop what it started.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestService_New_FailureStopsEverything checks that a New that fails part
// way closes what it had opened: the connection is closed, so the first
// subscribe fails after the repository, the dispatcher and the janitor were
// made. TestMain finds any goroutine left behind.
func TestService_New_FailureStopsEverything(t *testing.T) {
	opts := natsserver.DefaultTestOptions
	opts.Port = -1
	srv := natsserver.RunServer(&opts)
	t.Cleanup(srv.Shutdown)
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
	st, err := pebblestore.Open(pebblestore.Config{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	if s, err := bridge.New(bridge.Config{Conn: nc, Store: st}); err == nil {
		s.Close()
		t.Fatal("New on a closed connection succeeded")
	}
}

// TestService_Close_AfterServerGone checks that Close still stops
// everything when NATS went away first.
func TestService_Close_AfterServerGone(t *testing.T) {
	opts := natsserver.DefaultTestOptions
	opts.Port = -1
	srv := natsserver.RunServer(&opts)
	// The error handler keeps the expected write errors off the output.
	nc, err := nats.Connect(srv.ClientURL(), nats.MaxReconnects(0), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	st, err := pebblestore.Open(pebblestore.Config{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	s, err := bridge.New(bridge.Config{Conn: nc, Store: st})
	if err != nil {
		t.Fatal(err)
	}
	srv.Shutdown()
	_ = s.Close() // an error is fine here; a leaked goroutine is not
}
