package server

import (
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/natsdelay/natsdelay/cmd/natsdelay/internal/console"
)

// TestHTTP_Close_ConnectionWithoutRequest_NoError checks that a stop
// does not wait for, or fail on, a connection that never sent a request:
// browsers open such connections ahead of need, and net/http's Shutdown
// counts one as in progress for its first 5 seconds, which ran out the
// shutdown's whole grace period and made Close report an error.
func TestHTTP_Close_ConnectionWithoutRequest_NoError(t *testing.T) {
	h, err := startHTTP("127.0.0.1:0", newRegistry(), false, false, console.Config{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// NB: the server has the connection once it reports it new; the
	// tracker records that before Close can run.
	h.waitNewConns(t, 1)
	if err := h.close(); err != nil {
		t.Fatalf("close with a connection that sent nothing: %v", err)
	}
}

// waitNewConns waits until h tracks n connections that sent nothing.
func (h *httpServer) waitNewConns(t *testing.T, n int) {
	t.Helper()
	for {
		h.fresh.mu.Lock()
		got := len(h.fresh.conns)
		ch := h.fresh.changed
		h.fresh.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatalf("the server tracks %d new connections after 10s, want %d", got, n)
		}
	}
}
