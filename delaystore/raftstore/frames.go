package raftstore

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// Bounded frames.
//
// hashicorp/raft's transport decodes each RPC with msgpack as it arrives,
// and the decoder grows a field to whatever length its header claims, as
// fast as bytes come: a frame that claims a field of 2 GiB and streams it
// takes that much memory, and more in copies. So every Raft connection a
// node accepts is read through a guard that parses the RPC stream ahead of
// the transport, and drops the connection at the first header that claims
// more than the node itself would ever send:
//
//   - a string or binary field of more than maxFieldBytes: the largest
//     entry a Commit proposes (Config.MaxEntryBytes), plus room for the
//     rest of an entry;
//   - a request, snapshot data aside, of more than maxRequestBytes: as many
//     of those entries as one AppendEntries carries (maxAppendEntries);
//   - an array of more than maxContainer elements, a map of more than
//     maxContainer pairs, nesting deeper than maxDepth, an RPC type the
//     transport does not know, or a byte msgpack does not use.
//
// What requests within those bounds hold at once, across all of a
// node's connections, is bounded by the node's frame budget
// (framebudget.go).
//
// The snapshot data that follows an InstallSnapshot request is not
// decoded: the transport streams it to the snapshot store on disk, so it
// passes in copies of a bounded buffer, however large.
//
// The guard also puts deadlines on reads: a new connection must start its
// first request within firstRequestTimeout, and a request under way must
// keep arriving (each read within requestStallTimeout). A connection that
// says it speaks Raft and then sends nothing, or half a request, cannot
// hold a goroutine and a buffer for good. Between requests there is no
// deadline: hashicorp/raft keeps a pool of connections to each peer, idle
// for as long as no election needs them, and one closed under it would
// cost the next election a vote. What bounds idle connections is
// maxRaftConns, and, on a network, TLS: only members get that far.

const (
	// maxAppendEntries is Raft's MaxAppendEntries: the most entries one
	// AppendEntries carries.
	maxAppendEntries = 64
	// maxContainer bounds arrays and maps: an AppendEntries holds at most
	// maxAppendEntries entries, and the request structs have a handful of
	// fields.
	maxContainer = 1024
	maxDepth     = 16
	// entryOverhead is what an entry adds around the command: its index,
	// term, type, times and field names.
	entryOverhead = 4 << 10

	firstRequestTimeout = 5 * time.Second
	requestStallTimeout = 10 * time.Second
)

// RPC types, as hashicorp/raft's NetworkTransport numbers them.
const (
	rpcAppendEntries byte = iota
	rpcRequestVote
	rpcInstallSnapshot
	rpcTimeoutNow
	rpcRequestPreVote
)

// errFrame is why the guard dropped a connection.
var errFrame = errors.New("raftstore: refused a Raft frame")

// errGuardClosed ends a guard that waited for the budget when its
// connection closed.
var errGuardClosed = errors.New("raftstore: the Raft connection closed")

// holdChunk is the least a request's reservation in the budget grows by.
const holdChunk = 64 << 10

// frameLimits are the bounds of one node's guard.
type frameLimits struct {
	maxFieldBytes, maxRequestBytes uint64
	// firstRequest and stall bound the reads of a new connection and of a
	// request under way; idle, between requests, 0 for no bound.
	firstRequest, stall, idle time.Duration
	// budget bounds the bytes of requests held at once across the node's
	// connections (framebudget.go).
	budget *frameBudget
}

func newFrameLimits(maxEntryBytes int) frameLimits {
	field := uint64(maxEntryBytes) + entryOverhead
	return frameLimits{
		maxFieldBytes:   field,
		maxRequestBytes: maxAppendEntries*field + 1<<20,
		firstRequest:    firstRequestTimeout,
		stall:           requestStallTimeout,
		budget:          newFrameBudget(int64(2 * field)),
	}
}

// guardedConn is an accepted Raft connection whose reads pass the guard.
// Writes, deadlines and addresses are the connection's own.
type guardedConn struct {
	net.Conn
	pr   *io.PipeReader
	hold *connHold
	// closing is closed by Close, to end a wait for the budget.
	closing   chan struct{}
	closeOnce sync.Once
	done      chan struct{}
}

// guardFrames starts the guard of c; the returned connection owns it: its
// Close stops it.
func guardFrames(c net.Conn, lim frameLimits, refused func(error), released func()) net.Conn {
	pr, pw := io.Pipe()
	g := &guardedConn{Conn: c, pr: pr, hold: &connHold{budget: lim.budget}, closing: make(chan struct{}), done: make(chan struct{})}
	p := &frameParser{lim: lim, conn: c, out: pw, hold: g.hold, stop: g.closing}
	p.in = bufio.NewReaderSize(deadlineReader{p}, 64<<10)
	go func() {
		defer close(g.done)
		defer released()
		defer g.hold.releaseAll()
		err := p.run()
		if errors.Is(err, errFrame) {
			refused(err)
		}
		// The transport sees the guard's error on its next read, and
		// drops the connection; the peer sees it closed.
		pw.CloseWithError(err)
		c.Close()
	}()
	return g
}

func (g *guardedConn) Read(p []byte) (int, error) { return g.pr.Read(p) }

// Write writes the transport's answer to the oldest request it has not
// answered, whose bytes it no longer holds.
func (g *guardedConn) Write(p []byte) (int, error) {
	n, err := g.Conn.Write(p)
	g.hold.answered()
	return n, err
}

// Close closes the connection and waits for the guard to stop.
func (g *guardedConn) Close() error {
	g.closeOnce.Do(func() { close(g.closing) })
	err := g.Conn.Close()
	g.pr.Close()
	<-g.done
	return err
}

// frameParser reads RPCs from conn through in, checks them, and hands
// every byte it read, unchanged, to out.
type frameParser struct {
	lim  frameLimits
	conn net.Conn
	in   *bufio.Reader
	out  *io.PipeWriter
	// timeout is the deadline of the next read from conn.
	timeout time.Duration
	// held are bytes read and checked, not yet handed on; request counts
	// the bytes of the request under way.
	held    []byte
	request uint64
	// hold is what the connection holds of the node's budget; reserved
	// the bytes of the request under way it holds; stop ends a wait for
	// room.
	hold     *connHold
	reserved uint64
	stop     <-chan struct{}
}

// deadlineReader reads from the parser's connection with the deadline its
// phase gives.
type deadlineReader struct{ p *frameParser }

func (r deadlineReader) Read(b []byte) (int, error) {
	var deadline time.Time
	if r.p.timeout > 0 {
		deadline = time.Now().Add(r.p.timeout)
	}
	_ = r.p.conn.SetReadDeadline(deadline)
	return r.p.conn.Read(b)
}

func (p *frameParser) run() error {
	p.timeout = p.lim.firstRequest
	for {
		if err := p.request1(); err != nil {
			return err
		}
		p.timeout = p.lim.idle
	}
}

// request1 passes one RPC: its type, its request, and for InstallSnapshot
// the snapshot data.
func (p *frameParser) request1() error {
	typ, err := p.in.ReadByte()
	if err != nil {
		return err
	}
	p.timeout = p.lim.stall
	p.request, p.reserved = 0, 0
	if err := p.count(1); err != nil {
		return err
	}
	p.held = append(p.held[:0], typ)
	switch typ {
	case rpcAppendEntries, rpcRequestVote, rpcTimeoutNow, rpcRequestPreVote:
		if err := p.value(0); err != nil {
			return err
		}
		return p.passed()
	case rpcInstallSnapshot:
		size, err := p.snapshotRequest()
		if err != nil {
			return err
		}
		if err := p.passed(); err != nil {
			return err
		}
		_, err = io.CopyN(p.out, p.in, size)
		return err
	}
	return fmt.Errorf("%w: unknown RPC type %d", errFrame, typ)
}

// snapshotRequest passes an InstallSnapshotRequest, a map, and returns its
// Size: the bytes of snapshot data after it.
func (p *frameParser) snapshotRequest() (int64, error) {
	n, ok, err := p.mapHeader()
	if err != nil {
		return 0, err
	}
	if !ok {
		return 0, fmt.Errorf("%w: an InstallSnapshot request that is not a map", errFrame)
	}
	size := int64(-1)
	for range n {
		key, err := p.shortString()
		if err != nil {
			return 0, err
		}
		if key != "Size" {
			if err := p.value(1); err != nil {
				return 0, err
			}
			continue
		}
		if size, err = p.integer(); err != nil {
			return 0, err
		}
	}
	if size < 0 {
		return 0, fmt.Errorf("%w: an InstallSnapshot request without a Size", errFrame)
	}
	return size, nil
}

// value passes one msgpack value, checking its headers.
func (p *frameParser) value(depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("%w: nested deeper than %d", errFrame, maxDepth)
	}
	b, err := p.byte1()
	if err != nil {
		return err
	}
	switch {
	case b <= 0x7f, b >= 0xe0, b == 0xc0, b == 0xc2, b == 0xc3: // fixint, nil, bool
		return nil
	case b <= 0x8f:
		return p.elements(uint64(b&0x0f)*2, depth)
	case b <= 0x9f:
		return p.elements(uint64(b&0x0f), depth)
	case b <= 0xbf:
		return p.bytes(uint64(b & 0x1f))
	}
	switch b {
	case 0xc4, 0xd9: // bin8, str8
		return p.sized(1, func(n uint64) error { return p.bytes(n) })
	case 0xc5, 0xda:
		return p.sized(2, func(n uint64) error { return p.bytes(n) })
	case 0xc6, 0xdb:
		return p.sized(4, func(n uint64) error { return p.bytes(n) })
	case 0xc7: // ext8/16/32: a type byte, then the data
		return p.sized(1, func(n uint64) error { return p.bytes(n + 1) })
	case 0xc8:
		return p.sized(2, func(n uint64) error { return p.bytes(n + 1) })
	case 0xc9:
		return p.sized(4, func(n uint64) error { return p.bytes(n + 1) })
	case 0xca, 0xcb, 0xcc, 0xcd, 0xce, 0xcf, 0xd0, 0xd1, 0xd2, 0xd3: // numbers
		return p.skip(uint64(numberWidth(b)))
	case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8: // fixext: a type byte, then 1 to 16 bytes
		return p.skip(1 + 1<<(b-0xd4))
	case 0xdc:
		return p.sized(2, func(n uint64) error { return p.elements(n, depth) })
	case 0xdd:
		return p.sized(4, func(n uint64) error { return p.elements(n, depth) })
	case 0xde:
		return p.sized(2, func(n uint64) error { return p.elements(2*n, depth) })
	case 0xdf:
		return p.sized(4, func(n uint64) error { return p.elements(2*n, depth) })
	}
	return fmt.Errorf("%w: byte 0x%02x is not msgpack", errFrame, b)
}

// elements passes n values of an array or map (2 per pair).
func (p *frameParser) elements(n uint64, depth int) error {
	if n > 2*maxContainer {
		return fmt.Errorf("%w: a container of %d elements, at most %d", errFrame, n, 2*maxContainer)
	}
	for range n {
		if err := p.value(depth + 1); err != nil {
			return err
		}
	}
	return nil
}

// sized reads a big-endian length of width bytes and calls f with it.
func (p *frameParser) sized(width int, f func(uint64) error) error {
	var b [4]byte
	for i := range width {
		c, err := p.byte1()
		if err != nil {
			return err
		}
		b[4-width+i] = c
	}
	return f(uint64(binary.BigEndian.Uint32(b[:])))
}

// bytes passes a field of n bytes, within the field bound.
func (p *frameParser) bytes(n uint64) error {
	if n > p.lim.maxFieldBytes {
		return fmt.Errorf("%w: a field of %d bytes, at most %d", errFrame, n, p.lim.maxFieldBytes)
	}
	return p.skip(n)
}

// skip passes n bytes: small ones through held, large ones straight on.
func (p *frameParser) skip(n uint64) error {
	if err := p.count(n); err != nil {
		return err
	}
	if n <= 64 {
		for range n {
			c, err := p.in.ReadByte()
			if err != nil {
				return err
			}
			p.held = append(p.held, c)
		}
		return nil
	}
	if err := p.flush(); err != nil {
		return err
	}
	_, err := io.CopyN(p.out, p.in, int64(n))
	return err
}

// byte1 reads one byte of a header.
func (p *frameParser) byte1() (byte, error) {
	if err := p.count(1); err != nil {
		return 0, err
	}
	c, err := p.in.ReadByte()
	if err != nil {
		return 0, err
	}
	p.held = append(p.held, c)
	if len(p.held) >= 32<<10 {
		return c, p.flush()
	}
	return c, nil
}

// count adds n bytes to the request under way, within its bound, and
// reserves them in the node's budget before they are read.
func (p *frameParser) count(n uint64) error {
	p.request += n
	if p.request > p.lim.maxRequestBytes {
		return fmt.Errorf("%w: a request of more than %d bytes", errFrame, p.lim.maxRequestBytes)
	}
	if p.request <= p.reserved {
		return nil
	}
	grow := max(p.request-p.reserved, holdChunk)
	if err := p.hold.grow(int64(grow), p.lim.stall, p.stop); err != nil {
		return err
	}
	p.reserved += grow
	return nil
}

// passed hands on the rest of a request read whole; its bytes stay held
// until the transport answers it.
func (p *frameParser) passed() error {
	// NB: recorded before the last bytes go: the transport may answer as
	// soon as it has them.
	p.hold.passed()
	return p.flush()
}

// flush hands the held bytes on.
func (p *frameParser) flush() error {
	if len(p.held) == 0 {
		return nil
	}
	_, err := p.out.Write(p.held)
	p.held = p.held[:0]
	return err
}

// mapHeader reads a value's first byte(s) and, if it is a map, returns
// its number of pairs.
func (p *frameParser) mapHeader() (uint64, bool, error) {
	b, err := p.byte1()
	if err != nil {
		return 0, false, err
	}
	var n uint64
	switch {
	case b >= 0x80 && b <= 0x8f:
		n = uint64(b & 0x0f)
	case b == 0xde, b == 0xdf:
		width := 2
		if b == 0xdf {
			width = 4
		}
		err = p.sized(width, func(v uint64) error { n = v; return nil })
	default:
		return 0, false, nil
	}
	if err == nil && n > maxContainer {
		err = fmt.Errorf("%w: a map of %d pairs, at most %d", errFrame, n, maxContainer)
	}
	return n, true, err
}

// shortString reads a map key: a string of at most 64 bytes.
func (p *frameParser) shortString() (string, error) {
	b, err := p.byte1()
	if err != nil {
		return "", err
	}
	var n uint64
	switch {
	case b >= 0xa0 && b <= 0xbf:
		n = uint64(b & 0x1f)
	case b == 0xd9:
		err = p.sized(1, func(v uint64) error { n = v; return nil })
	default:
		return "", fmt.Errorf("%w: a request field named by 0x%02x, not a string", errFrame, b)
	}
	if err != nil {
		return "", err
	}
	if n > 64 {
		return "", fmt.Errorf("%w: a request field name of %d bytes", errFrame, n)
	}
	start := len(p.held)
	if err := p.skip(n); err != nil {
		return "", err
	}
	return string(p.held[start:]), nil
}

// integer reads an integer value that is not negative.
func (p *frameParser) integer() (int64, error) {
	b, err := p.byte1()
	if err != nil {
		return 0, err
	}
	if b <= 0x7f {
		return int64(b), nil
	}
	width := numberWidth(b)
	if width == 0 || b == 0xca || b == 0xcb {
		return 0, fmt.Errorf("%w: a snapshot Size of type 0x%02x", errFrame, b)
	}
	var v uint64
	for range width {
		c, err := p.byte1()
		if err != nil {
			return 0, err
		}
		v = v<<8 | uint64(c)
	}
	if b >= 0xd0 && v>>(uint(width)*8-1) == 1 || v > 1<<62 {
		return 0, fmt.Errorf("%w: a snapshot Size of %d", errFrame, v)
	}
	return int64(v), nil
}

// numberWidth is the size of the number that follows header byte b: a
// float (0xca, 0xcb), an unsigned (0xcc to 0xcf) or a signed integer (0xd0
// to 0xd3); 0 for any other byte.
func numberWidth(b byte) int {
	switch b {
	case 0xcc, 0xd0:
		return 1
	case 0xcd, 0xd1:
		return 2
	case 0xca, 0xce, 0xd2:
		return 4
	case 0xcb, 0xcf, 0xd3:
		return 8
	}
	return 0
}
