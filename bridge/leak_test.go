package bridge_test

import (
	"testing"

	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"

	"github.com/natsdelay/natsdelay/bridge"
	"github.com/natsdelay/natsdelay/bridge/bridgetest"
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
	nc := bridgetest.Connect(t, bridgetest.RunServer(t))
	nc.Close()
	if s, err := bridge.New(nc, bridgetest.MemStore(t), bridge.Config{}); err == nil {
		s.Close()
		t.Fatal("New on a closed connection succeeded")
	}
}

// TestService_Close_AfterServerGone checks that Close still stops
// everything when NATS went away first.
func TestService_Close_AfterServerGone(t *testing.T) {
	srv := bridgetest.RunServer(t)
	// The error handler keeps the expected write errors off the output.
	nc := bridgetest.Connect(t, srv, nats.MaxReconnects(0), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	s, err := bridge.New(nc, bridgetest.MemStore(t), bridge.Config{})
	if err != nil {
		t.Fatal(err)
	}
	srv.Shutdown()
	_ = s.Close() // an error is fine here; a leaked goroutine is not
}
