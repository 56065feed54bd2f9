package integration_test

import (
	"bytes"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// partition sits between the nodes of a cluster of child processes: each
// node is reached through a raftProxy of its own, and cut isolates one
// node, both ways, as a network partition would, while its NATS
// connection stays up.
//
// A proxy learns which node opened a connection from the first Raft
// request on it: every request of hashicorp/raft carries its sender's
// node id in its header. The ids of the test nodes (nodea, nodeb, ...)
// appear nowhere else in what the test sends.
type partition struct {
	ids []string

	mu struct {
		sync.Mutex
		isolated string
		conns    map[*proxiedConn]bool
		// closed is set when the test ends: a connection accepted
		// before and not yet forwarding is closed instead of joining
		// conns, which the closing has already emptied.
		closed bool
	}
	wg sync.WaitGroup
}

// proxiedConn is one connection through a proxy: from the node src (empty
// when unknown) to the node dst.
type proxiedConn struct {
	src, dst       string
	client, server net.Conn
}

func (c *proxiedConn) close() {
	_ = c.client.Close()
	_ = c.server.Close()
}

func newPartition(t *testing.T, ids []string) *partition {
	p := &partition{ids: ids}
	p.mu.conns = map[*proxiedConn]bool{}
	t.Cleanup(p.wg.Wait)
	return p
}

// proxy listens on a free loopback port and forwards to the node dst
// listening on target. It stops when t ends.
func (p *partition) proxy(t *testing.T, dst, target string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = ln.Close()
		p.mu.Lock()
		p.mu.closed = true
		for c := range p.mu.conns {
			c.close()
		}
		p.mu.Unlock()
	})
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				p.serve(c, dst, target)
			}()
		}
	}()
	return ln.Addr().String()
}

// serve identifies the sender of c, refuses it while either end is
// isolated, and otherwise forwards both ways until one side closes.
func (p *partition) serve(client net.Conn, dst, target string) {
	head, src := p.identify(client)
	pc := &proxiedConn{src: src, dst: dst, client: client}
	p.mu.Lock()
	if p.cutOff(pc) || p.mu.closed {
		// NB: a connection let through after the test's end would
		// forward between live nodes until they die, which happens only
		// after the cleanup that waits for it: the test would never end.
		p.mu.Unlock()
		_ = client.Close()
		return
	}
	server, err := net.DialTimeout("tcp", target, 5*time.Second)
	if err != nil {
		p.mu.Unlock()
		_ = client.Close()
		return
	}
	pc.server = server
	p.mu.conns[pc] = true
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.mu.conns, pc)
		p.mu.Unlock()
		pc.close()
	}()
	if _, err := server.Write(head); err != nil {
		return
	}
	done := make(chan struct{})
	go func() {
		// Owned by serve, which waits for it below.
		defer close(done)
		_, _ = io.Copy(client, server)
		_ = client.Close()
	}()
	_, _ = io.Copy(server, client)
	_ = server.Close()
	<-done
}

// identify reads the start of a connection until it names a node, for at
// most a second or 64 KiB, and returns what it read and the node.
func (p *partition) identify(c net.Conn) ([]byte, string) {
	var head []byte
	buf := make([]byte, 4096)
	_ = c.SetReadDeadline(time.Now().Add(time.Second))
	defer c.SetReadDeadline(time.Time{})
	for len(head) < 64<<10 {
		n, err := c.Read(buf)
		head = append(head, buf[:n]...)
		if len(head) > 0 && head[0] != 'R' {
			return head, "" // not Raft: an identify exchange, whose asker says nothing
		}
		for _, id := range p.ids {
			if bytes.Contains(head, []byte(id)) {
				return head, id
			}
		}
		if err != nil {
			return head, ""
		}
	}
	return head, ""
}

// cutOff reports whether c may not pass now. mu must be held.
func (p *partition) cutOff(c *proxiedConn) bool {
	iso := p.mu.isolated
	return iso != "" && (c.src == iso || c.dst == iso)
}

// cut isolates the node id: its connections to and from the others are
// closed, and new ones refused, until heal.
func (p *partition) cut(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mu.isolated = id
	for c := range p.mu.conns {
		if p.cutOff(c) {
			c.close()
		}
	}
}

// heal lets every node talk to every other again.
func (p *partition) heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mu.isolated = ""
}

// TestPartition_ConnAcceptedAsTheTestEnds_Closed checks the test's own
// partition: a connection it accepted just before the test ended, still
// being identified when the proxies close, is closed rather than
// forwarded, so that the cleanup waiting for every connection returns
// while the nodes still run. Before, such a connection was forwarded
// between two live ends, and the step-down test hung in its cleanup
// until the package's timeout.
func TestPartition_ConnAcceptedAsTheTestEnds_Closed(t *testing.T) {
	target, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var held []net.Conn
	var heldMu sync.Mutex
	accepted := make(chan struct{})
	go func() {
		defer close(accepted)
		for {
			c, err := target.Accept()
			if err != nil {
				return
			}
			heldMu.Lock()
			held = append(held, c) // a node that never closes its end
			heldMu.Unlock()
		}
	}()
	var client net.Conn
	t.Cleanup(func() {
		_ = target.Close()
		<-accepted
		heldMu.Lock()
		for _, c := range held {
			_ = c.Close()
		}
		heldMu.Unlock()
		if client != nil {
			_ = client.Close()
		}
	})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		t.Run("proxy", func(t *testing.T) {
			p := newPartition(t, []string{"nodea"})
			addr := p.proxy(t, "nodea", target.Addr().String())
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			client = c
			// NB: it sends nothing, so the proxy is still identifying it
			// (for up to a second) when the test ends now.
		})
	}()
	select {
	case <-ended:
	case <-time.After(30 * time.Second):
		t.Fatal("the partition's cleanup still waits for a connection accepted as the test ended")
	}
}
