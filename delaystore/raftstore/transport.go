package raftstore

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// The Raft port carries two protocols. The first byte of each connection
// says which: Raft's own RPCs, or one identify exchange, by which a node
// learns a peer's id and cluster before there is any Raft configuration to
// hold them.
const (
	protoRaft     byte = 'R'
	protoIdentify byte = 'I'

	// identifyVersion is the version of the identify answer.
	identifyVersion = 1
	// firstByteTimeout bounds how long an accepted connection may take to
	// say which protocol it speaks.
	firstByteTimeout = 5 * time.Second
	// maxIdentifyBytes bounds an identify answer.
	maxIdentifyBytes = 64 << 10
)

// identity is what a node answers to identify.
type identity struct {
	Version int    `json:"version"`
	ID      string `json:"id"`
	Addr    string `json:"addr"`
	// Cluster is the cluster this node belongs to, empty while it has none
	// (a fresh node waiting for its peers).
	Cluster string `json:"cluster,omitempty"`
	// Peers are the addresses the node was started with, sorted.
	Peers []string `json:"peers"`
	// Bootstrap is true on a fresh node that will bootstrap with Peers,
	// false on one that waits to be added (Config.Join).
	Bootstrap bool `json:"bootstrap,omitempty"`
}

// mux is the raft.StreamLayer of a node: one listener, whose connections
// are handed to Raft or answered with the node's identity, by their first
// byte. It owns the goroutines that accept and sort connections.
type mux struct {
	ln        net.Listener
	advertise net.Addr
	log       *slog.Logger
	// tls, if set, is the cluster's mutual TLS: every connection, either
	// way, is a TLS connection between members (see tls.go).
	tls *tls.Config
	// refusals limits the warnings about connections refused in the
	// handshake: a port scan must not flood the log. badFrames and
	// acceptErrs do the same for connections the frame guard dropped and
	// for failed accepts.
	refusals, badFrames, acceptErrs, tooMany warnLimit
	// frames bounds what an accepted Raft connection may send (frames.go).
	frames frameLimits
	// raftIn counts the accepted Raft connections open now, at most
	// maxRaftConns.
	raftIn atomic.Int64
	// whoami returns the node's identity as it stands now.
	whoami func() identity

	raftConns chan net.Conn
	done      chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup

	// isolated makes the node unreachable and unable to reach anyone: every
	// connection is closed, and new ones are refused. Tests use it to
	// partition a node from the others.
	isolated atomic.Bool
	mu       struct {
		sync.Mutex
		conns map[net.Conn]struct{}
	}
}

var _ raft.StreamLayer = (*mux)(nil)

// maxRaftConns bounds the Raft connections a node accepts at once: each
// member opens a few (a pool, a pipeline, heartbeats), and each holds a
// goroutine and a read buffer.
const maxRaftConns = 128

func newMux(ln net.Listener, advertise net.Addr, log *slog.Logger, tlsConf *tls.Config, frames frameLimits, whoami func() identity) *mux {
	m := &mux{
		ln:        ln,
		advertise: advertise,
		log:       log,
		tls:       tlsConf,
		frames:    frames,
		whoami:    whoami,
		// Unbuffered: a Raft connection waits, in its sorting goroutine,
		// until Raft accepts it or the mux closes.
		raftConns: make(chan net.Conn),
		done:      make(chan struct{}),
	}
	m.mu.conns = make(map[net.Conn]struct{})
	m.wg.Add(1)
	go m.acceptLoop()
	return m
}

// acceptLoop accepts until the mux closes. A failed Accept (out of file
// descriptors, a connection reset before it was accepted) is waited out,
// 5 ms doubling to a second, not taken for the end: the node must go on
// taking its peers' connections once the condition passes.
func (m *mux) acceptLoop() {
	defer m.wg.Done()
	var backoff time.Duration
	for {
		c, err := m.ln.Accept()
		if err != nil {
			select {
			case <-m.done:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				m.log.Error("cluster listener closed", "err", err)
				return
			}
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			if ok, n := m.acceptErrs.allow(); ok {
				m.log.Warn("accepting on the cluster port failed; trying again", "err", err, "wait", backoff, "suppressed", n)
			}
			select {
			case <-m.done:
				return
			case <-time.After(backoff):
			}
			continue
		}
		backoff = 0
		if m.isolated.Load() {
			c.Close()
			continue
		}
		m.wg.Add(1)
		go m.sort(c)
	}
}

// sort reads the first byte of c and hands it on. With TLS, the
// handshake comes first: a peer that is not a member is refused before
// anything is read.
func (m *mux) sort(c net.Conn) {
	defer m.wg.Done()
	if m.tls != nil {
		tc, err := serverTLS(c, m.tls)
		if err != nil {
			if ok, n := m.refusals.allow(); ok {
				m.log.Warn("connection to the cluster port refused in the TLS handshake", "remote", c.RemoteAddr().String(), "err", err, "suppressed", n)
			}
			c.Close()
			return
		}
		c = tc
	}
	var first [1]byte
	c.SetReadDeadline(time.Now().Add(firstByteTimeout))
	if _, err := c.Read(first[:]); err != nil {
		c.Close()
		return
	}
	c.SetReadDeadline(time.Time{})
	switch first[0] {
	case protoRaft:
		if m.raftIn.Add(1) > maxRaftConns {
			m.raftIn.Add(-1)
			if ok, n := m.tooMany.allow(); ok {
				m.log.Warn("too many Raft connections: refused one", "remote", c.RemoteAddr().String(), "limit", maxRaftConns, "suppressed", n)
			}
			c.Close()
			return
		}
		remote := c.RemoteAddr().String()
		guarded := guardFrames(c, m.frames, func(err error) {
			if ok, n := m.badFrames.allow(); ok {
				m.log.Warn("dropped a Raft connection that sent a frame beyond the bounds", "remote", remote, "err", err, "suppressed", n)
			}
		}, func() { m.raftIn.Add(-1) })
		tc := m.track(guarded)
		select {
		case m.raftConns <- tc:
		case <-m.done:
			tc.Close()
		}
	case protoIdentify:
		c.SetWriteDeadline(time.Now().Add(firstByteTimeout))
		if err := json.NewEncoder(c).Encode(m.whoami()); err != nil {
			m.log.Debug("identify answer not sent", "remote", c.RemoteAddr().String(), "err", err)
		}
		c.Close()
	default:
		m.log.Warn("connection to the cluster port with an unknown protocol", "remote", c.RemoteAddr().String(), "first_byte", first[0])
		c.Close()
	}
}

// Accept returns the next Raft connection.
func (m *mux) Accept() (net.Conn, error) {
	select {
	case c := <-m.raftConns:
		return c, nil
	case <-m.done:
		return nil, net.ErrClosed
	}
}

// Close stops accepting, closes every connection, and waits for the
// goroutines of the mux.
func (m *mux) Close() error {
	var err error
	m.closeOnce.Do(func() {
		close(m.done)
		err = m.ln.Close()
		m.closeAll()
		m.wg.Wait()
	})
	return err
}

// Addr is the address the others reach this node at.
func (m *mux) Addr() net.Addr { return m.advertise }

// Dial opens a Raft connection to address.
func (m *mux) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	if m.isolated.Load() {
		return nil, fmt.Errorf("raftstore: dial %s: node isolated", address)
	}
	c, err := dialPeer(string(address), timeout, m.tls)
	if err != nil {
		return nil, err
	}
	if _, err := c.Write([]byte{protoRaft}); err != nil {
		c.Close()
		return nil, err
	}
	return m.track(c), nil
}

// isolate cuts the node off (on) or lets it talk again (off).
func (m *mux) isolate(on bool) {
	m.isolated.Store(on)
	if on {
		m.closeAll()
	}
}

func (m *mux) closeAll() {
	m.mu.Lock()
	conns := make([]net.Conn, 0, len(m.mu.conns))
	for c := range m.mu.conns {
		conns = append(conns, c)
	}
	m.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

// track registers c, so that isolate and Close can close it.
func (m *mux) track(c net.Conn) net.Conn {
	tc := &trackedConn{Conn: c, m: m}
	m.mu.Lock()
	m.mu.conns[tc] = struct{}{}
	m.mu.Unlock()
	if m.isolated.Load() {
		// Isolated while this one was being dialed or sorted: closeAll
		// may have run before it was tracked.
		tc.Close()
	}
	return tc
}

type trackedConn struct {
	net.Conn
	m    *mux
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.m.mu.Lock()
		delete(c.m.mu.conns, c)
		c.m.mu.Unlock()
	})
	return c.Conn.Close()
}

// advertisedAddr is the address the others reach a node at, exactly as
// configured: Raft compares addresses as strings, so a host name must not
// turn into an IP address here.
type advertisedAddr string

func (a advertisedAddr) Network() string { return "tcp" }
func (a advertisedAddr) String() string  { return string(a) }

// identify asks the node at addr who it is.
func identify(addr string, timeout time.Duration, tlsConf *tls.Config) (identity, error) {
	var id identity
	c, err := dialPeer(addr, timeout, tlsConf)
	if err != nil {
		return id, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write([]byte{protoIdentify}); err != nil {
		return id, err
	}
	line, err := bufio.NewReader(&limitedReader{c, maxIdentifyBytes}).ReadBytes('\n')
	if err != nil {
		return id, fmt.Errorf("read identify answer: %w", err)
	}
	if err := json.Unmarshal(line, &id); err != nil {
		return id, fmt.Errorf("identify answer: %w", err)
	}
	if id.Version != identifyVersion || id.ID == "" {
		return id, fmt.Errorf("identify answer of version %d with id %q: not a natsdelay cluster node of this version", id.Version, id.ID)
	}
	return id, nil
}

type limitedReader struct {
	c net.Conn
	n int
}

func (r *limitedReader) Read(p []byte) (int, error) {
	if r.n <= 0 {
		return 0, errors.New("identify answer too long")
	}
	if len(p) > r.n {
		p = p[:r.n]
	}
	n, err := r.c.Read(p)
	r.n -= n
	return n, err
}

// warnLimit lets one warning through per warnEvery and counts the others.
type warnLimit struct {
	mu         sync.Mutex
	last       time.Time
	suppressed int
}

const warnEvery = 10 * time.Second

// allow reports whether to warn now, and how many warnings it suppressed
// since the last.
func (w *warnLimit) allow() (bool, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if now := time.Now(); now.Sub(w.last) >= warnEvery {
		n := w.suppressed
		w.last, w.suppressed = now, 0
		return true, n
	}
	w.suppressed++
	return false, 0
}
