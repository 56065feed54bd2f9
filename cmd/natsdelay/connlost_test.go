package main

import (
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	natsserver "github.com/nats-io/nats-server/v2/test"
)

// errProxy forwards TCP connections to a NATS server and can send each
// client a protocol error of the server's, as if the server had sent it.
type errProxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	clients []net.Conn // the client side of each connection
	wg      sync.WaitGroup
}

func startErrProxy(t *testing.T, target string) *errProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &errProxy{ln: ln, target: target}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *errProxy) url() string { return "nats://" + p.ln.Addr().String() }

func (p *errProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.clients = append(p.clients, c)
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(s, c)
		go p.pipe(c, s)
	}
}

// pipe copies from src to dst, writing under mu so that a protocol error
// sent by sendErr never lands inside a read that was forwarded.
func (p *errProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			_, werr := dst.Write(buf[:n])
			p.mu.Unlock()
			if werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// sendErr sends every client the line -ERR '<text>' and then closes its
// connection, as the server does after such an error.
func (p *errProxy) sendErr(text string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.clients {
		_, _ = io.WriteString(c, "-ERR '"+text+"'\r\n")
		_ = c.Close()
	}
	p.clients = nil
}

func (p *errProxy) close() {
	p.ln.Close()
	p.sendErr("test over")
	p.wg.Wait()
}

// proxiedServer runs a nats-server and an errProxy in front of it, for
// serve to reach it through.
func proxiedServer(t *testing.T) (*server.Server, *errProxy) {
	t.Helper()
	opts := natsserver.DefaultTestOptions
	opts.Port = -1
	ns := natsserver.RunServer(&opts)
	t.Cleanup(ns.Shutdown)
	return ns, startErrProxy(t, ns.Addr().String())
}

// TestServe_ConnectionClosedForGood_ExitsNonZero checks that serve does
// not stay up without a connection: when the server sends an error after
// which nats.go closes the connection for good and never reconnects (here
// "Maximum Control Line Exceeded", which a delivery too long for the
// server's control line used to draw), serve logs why and exits with the
// runtime exit code, so that a supervisor restarts it.
func TestServe_ConnectionClosedForGood_ExitsNonZero(t *testing.T) {
	t.Parallel()
	_, proxy := proxiedServer(t)
	srv := start(t, "serve", "--nats", proxy.url(), "--engine", "memory")
	srv.waitLine(t, `msg="natsdelay ready"`, 30*time.Second)
	proxy.sendErr("Maximum Control Line Exceeded")
	if code := srv.wait(t, 30*time.Second); code != exitRuntime {
		t.Fatalf("serve exit code %d after its connection closed for good, want %d", code, exitRuntime)
	}
	srv.waitLine(t, `msg="the NATS connection closed for good: stopping, so that a supervisor restarts natsdelay" err="nats: Maximum Control Line Exceeded"`, time.Second)
	if e := srv.stderr.String(); !strings.Contains(e, "closed for good") {
		t.Fatalf("serve printed %q, want why it exits", e)
	}
}

// TestServe_AuthExpiredOnce_Reconnects checks the other side of the line:
// an authorization error that the server sends once ("User Authentication
// Expired", as when a user JWT expires) only disconnects; nats.go
// reconnects (here through the proxy, where the credentials are still
// good) and serve stays up and keeps scheduling. Only the same error again
// on the reconnect closes the connection for good, which the test above
// shows the consequence of.
func TestServe_AuthExpiredOnce_Reconnects(t *testing.T) {
	t.Parallel()
	ns, proxy := proxiedServer(t)
	srv := openServe(t, "--nats", proxy.url(), "--engine", "memory")
	proxy.sendErr("User Authentication Expired")
	srv.waitLine(t, `msg="nats reconnected"`, 30*time.Second)
	pub := start(t, "pub", "auth.later", "x", "--delay", "1h", "--nats", ns.ClientURL())
	if code := pub.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("pub after the reconnect: exit code %d", code)
	}
	// serve would stop on a connection closed for good.
	select {
	case err := <-srv.Lost():
		t.Fatalf("the connection closed for good after one authorization error: %v", err)
	default:
	}
	if err := srv.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}
