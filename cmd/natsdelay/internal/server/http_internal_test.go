package server

import (
	"fmt"
	"io"
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
	h.waitFresh(t, func(got int) bool { return got >= n }, fmt.Sprintf("want %d", n))
}

// waitNewConnsAtMost waits until h tracks at most n connections that sent
// nothing.
func (h *httpServer) waitNewConnsAtMost(t *testing.T, n int) {
	t.Helper()
	h.waitFresh(t, func(got int) bool { return got <= n }, fmt.Sprintf("want at most %d", n))
}

// waitFresh waits until done says yes to how many connections that sent
// nothing h tracks.
func (h *httpServer) waitFresh(t *testing.T, done func(int) bool, want string) {
	t.Helper()
	for {
		h.fresh.mu.Lock()
		got := len(h.fresh.conns)
		ch := h.fresh.changed
		h.fresh.mu.Unlock()
		if done(got) {
			return
		}
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatalf("the server tracks %d new connections after 10s, %s", got, want)
		}
	}
}

// TestHTTP_Close_RequestOutlastsGrace_CutNoError checks that a stop with a
// request still in progress at the end of the grace period cuts it and
// succeeds: a CPU profile asked for 30 s, or a scrape from a stalled
// client, made Close report an error and `serve` exit 1 after a stop
// that lost nothing.
func TestHTTP_Close_RequestOutlastsGrace_CutNoError(t *testing.T) {
	h, err := startHTTP("127.0.0.1:0", newRegistry(), true, false, console.Config{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	h.grace = 100 * time.Millisecond
	conn, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	h.waitNewConns(t, 1)
	if _, err := conn.Write([]byte("GET /debug/pprof/profile?seconds=30 HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	// NB: the connection leaves the new ones when its request is read.
	h.waitNewConnsAtMost(t, 0)
	if err := h.close(); err != nil {
		t.Fatalf("close with a request outlasting the grace period: %v", err)
	}
	// The request was cut: the connection ends.
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.Copy(io.Discard, conn); err != nil {
		t.Fatalf("the request in progress was not cut: %v", err)
	}
}
