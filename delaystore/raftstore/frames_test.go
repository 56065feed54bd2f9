package raftstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"
)

// rawRaft opens a plain connection to addr that says it speaks Raft, as
// anyone who reaches an insecure cluster port can.
func rawRaft(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.Write([]byte{protoRaft}); err != nil {
		t.Fatal(err)
	}
	return c
}

// streamUntilClosed writes chunks of junk to c until a write fails, up to
// limit bytes, and returns how many it wrote.
func streamUntilClosed(c net.Conn, limit int) int {
	chunk := make([]byte, 64<<10)
	sent := 0
	c.SetWriteDeadline(time.Now().Add(30 * time.Second))
	for sent < limit {
		n, err := c.Write(chunk)
		sent += n
		if err != nil {
			break
		}
	}
	return sent
}

func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// A forged AppendEntries whose Entries field claims 2 GiB, followed by a
// stream of junk, is dropped at the claim: the node reads no more than its
// socket buffers hold, its heap does not grow by the stream, and the
// cluster goes on.
func TestTransport_OversizedFrame_DroppedAtTheClaim(t *testing.T) {
	c := startCluster(t, 3, enginePebble, testConfig())
	leader := c.waitLeader()
	before := heapInUse()

	conn := rawRaft(t, leader.addr)
	// rpcAppendEntries, a map of one pair: "Entries" -> a bin32 of 2 GiB.
	frame := []byte{rpcAppendEntries, 0x81, 0xa7}
	frame = append(frame, "Entries"...)
	frame = append(frame, 0xc6)
	frame = binary.BigEndian.AppendUint32(frame, 2<<30-1)
	if _, err := conn.Write(frame); err != nil {
		t.Fatal(err)
	}
	const stream = 128 << 20
	sent := streamUntilClosed(conn, stream)
	if sent >= stream {
		t.Fatalf("the node took all %d bytes of a field claiming 2 GiB", sent)
	}
	if grew := int64(heapInUse()) - int64(before); grew > 32<<20 {
		t.Fatalf("the heap grew by %d MiB", grew>>20)
	}
	c.commitOnLeader("after", "the attack")
	t.Logf("dropped after %d KiB of a %d MiB stream", sent>>10, stream>>20)
}

// guardedMux is a mux on a real listener, with the given frame limits,
// whose Raft connections a goroutine reads as hashicorp/raft's transport
// would; ended receives the error each such read ended with.
func guardedMux(t *testing.T, ln net.Listener, lim frameLimits) (*mux, <-chan error) {
	t.Helper()
	m := newMux(ln, ln.Addr(), slog.New(slog.DiscardHandler), nil, lim, func() identity {
		return identity{Version: identifyVersion, ID: "guarded", Addr: ln.Addr().String()}
	})
	ended := make(chan error, 16)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := m.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				_, err := io.Copy(io.Discard, c)
				c.Close()
				ended <- err
			})
		}
	})
	t.Cleanup(func() {
		m.Close()
		wg.Wait()
	})
	return m, ended
}

func shortLimits() frameLimits {
	lim := newFrameLimits(1 << 20)
	lim.firstRequest, lim.stall, lim.idle = 200*time.Millisecond, 200*time.Millisecond, time.Minute
	return lim
}

// wantClosed waits until the node closes c: a read returns an error.
func wantClosed(t *testing.T, c net.Conn, within time.Duration, what string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(within))
	var b [1]byte
	_, err := c.Read(b[:])
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("%s: still open after %v", what, within)
	}
}

// A connection that says it speaks Raft and then sends nothing, or half a
// request, is closed by the deadlines; so is one that sends an array
// claiming a billion elements, or an RPC type that does not exist.
func TestTransport_HeldAndMalformedConnections_Closed(t *testing.T) {
	ln := listen(t)
	_, ended := guardedMux(t, ln, shortLimits())
	cases := map[string][]byte{
		"nothing after R":   nil,
		"half a request":    {rpcRequestVote, 0x82, 0xa4, 'T', 'e'},
		"a billion entries": append([]byte{rpcAppendEntries, 0x81, 0xa7, 'E', 'n', 't', 'r', 'i', 'e', 's', 0xdd}, binary.BigEndian.AppendUint32(nil, 1<<30)...),
		"an unknown RPC":    {9},
		"not msgpack":       {rpcRequestVote, 0xc1},
	}
	for name, b := range cases {
		conn := rawRaft(t, ln.Addr().String())
		if len(b) > 0 {
			if _, err := conn.Write(b); err != nil {
				t.Fatal(err)
			}
		}
		wantClosed(t, conn, 10*time.Second, name)
		select {
		case err := <-ended:
			if err == nil {
				t.Fatalf("%s: the transport's read ended without an error", name)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the transport's read did not end", name)
		}
	}
}

// flakyListener fails its first accepts with EMFILE, as a process out of
// file descriptors does, then accepts.
type flakyListener struct {
	net.Listener
	mu    sync.Mutex
	fails int
}

func (l *flakyListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	if l.fails > 0 {
		l.fails--
		l.mu.Unlock()
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: syscall.EMFILE}
	}
	l.mu.Unlock()
	return l.Listener.Accept()
}

// The accept loop outlives failed accepts: after EMFILE, several times,
// the node answers the next connection.
func TestMux_AcceptLoop_SurvivesEMFILE(t *testing.T) {
	ln := &flakyListener{Listener: listen(t), fails: 5}
	guardedMux(t, ln, shortLimits())
	who, err := identify(ln.Addr().String(), 10*time.Second, nil)
	if err != nil || who.ID != "guarded" {
		t.Fatalf("identify after EMFILE: %+v, %v", who, err)
	}
	ln.mu.Lock()
	defer ln.mu.Unlock()
	if ln.fails != 0 {
		t.Fatalf("%d failures left: the loop did not retry", ln.fails)
	}
}

// Every request of a real cluster passes the guard: snapshots installed on
// a node that missed the log included (the cluster tests cover them);
// here, a batch larger than MaxEntryBytes is refused before it is
// proposed, so that no node ever sends what the others would drop.
func TestCommit_EntryOverMaxEntryBytes_Refused(t *testing.T) {
	cfg := testConfig()
	cfg.MaxEntryBytes = 64 << 10
	c := startCluster(t, 3, enginePebble, cfg)
	leader := c.waitLeader()
	big := make([]byte, 100<<10)
	err := commitPairs(leader.node.Store(), "big", string(big))
	if !errors.Is(err, ErrEntryTooLarge) {
		t.Fatalf("commit of %d bytes: %v, want ErrEntryTooLarge", len(big), err)
	}
	c.commitOnLeader("small", fmt.Sprint(len(big)))
}

// Requests that each stay within the bounds, sent at once on many
// connections of the plain port by a peer that never lets them be
// answered, never hold more than the node's budget of request bytes: the
// requests that find no room are refused and their connections dropped,
// and what they held is given back once the connections close, so a
// request after them passes.
func TestTransport_ManyBigFrames_HeldBytesBounded(t *testing.T) {
	ln := listen(t)
	lim := shortLimits()
	const budget = 3 << 20
	lim.budget = newFrameBudget(budget)
	_, ended := guardedMux(t, ln, lim)

	// AppendEntries, a map of one pair: "Entries" -> a bin32 just under
	// the field bound.
	field := int(lim.maxFieldBytes) - 16
	frame := []byte{rpcAppendEntries, 0x81, 0xa7}
	frame = append(frame, "Entries"...)
	frame = append(frame, 0xc6)
	frame = binary.BigEndian.AppendUint32(frame, uint32(field))
	frame = append(frame, make([]byte, field)...)
	const conns = 8
	var wg sync.WaitGroup
	var open []net.Conn
	for range conns {
		c := rawRaft(t, ln.Addr().String())
		open = append(open, c)
		wg.Go(func() {
			c.SetWriteDeadline(time.Now().Add(30 * time.Second))
			_, _ = c.Write(frame)
		})
	}
	// The connections past the budget are refused.
	for range conns - 2 {
		select {
		case <-ended:
		case <-time.After(30 * time.Second):
			held, peak := lim.budget.usage()
			t.Fatalf("the connections past the budget were not refused: %d bytes held, %d at most", held, peak)
		}
	}
	held, peak := lim.budget.usage()
	t.Logf("%d connections sent %d bytes each: %d bytes held at most, %d now", conns, len(frame), peak, held)
	if peak > budget+conns*holdChunk {
		t.Fatalf("the node held %d bytes of requests at once, over its budget of %d and a first chunk of each connection", peak, budget)
	}
	for _, c := range open {
		c.Close()
	}
	wg.Wait()
	for range 2 {
		<-ended
	}
	if held, _ := lim.budget.usage(); held != 0 {
		t.Fatalf("%d bytes still held after every connection closed", held)
	}
	c := rawRaft(t, ln.Addr().String())
	if _, err := c.Write(frame); err != nil {
		t.Fatalf("a request after the others closed: %v", err)
	}
	// Written whole, so the guard has read it all: it is held until an
	// answer, or the connection's end.
	deadline := time.Now().Add(30 * time.Second)
	for held, _ := lim.budget.usage(); held < int64(len(frame)); held, _ = lim.budget.usage() {
		if time.Now().After(deadline) {
			t.Fatalf("a request after the others closed: %d bytes held, want its %d", held, len(frame))
		}
		runtime.Gosched()
	}
}

// The bytes a node reserves for the requests it is sent are given back as
// Raft answers them: after a cluster commits batches of 512 KiB each,
// every node holds less than one of them, though its followers held a
// batch at a time.
func TestCluster_FrameBudget_GivenBackWithAnswers(t *testing.T) {
	c := startCluster(t, 3, enginePebble, testConfig())
	const size = 512 << 10
	value := string(make([]byte, size))
	const batches = 4
	for i := range batches {
		c.commitOnLeader(fmt.Sprintf("big/%d", i), value)
	}
	leader := c.appliedEverywhere()
	for _, n := range c.running() {
		b := n.node.mux.frames.budget
		waitFor(t, 20*time.Second, n.id+" to give back what it held", func() bool {
			held, _ := b.usage()
			return held < size
		})
		held, peak := b.usage()
		t.Logf("%s: %d bytes held, %d at most", n.id, held, peak)
		if n != leader && peak < size {
			t.Errorf("follower %s held %d bytes at most: its requests of %d bytes were not reserved", n.id, peak, size)
		}
	}
}
