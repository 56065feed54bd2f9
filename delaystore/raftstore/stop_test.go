package raftstore

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"

	"github.com/natsdelay/natsdelay/delaystore"
)

// lyingPeer is a cluster member in name only, on a real port: it answers
// identify as id, heartbeats with success, votes with a refusal, and, on
// each Raft connection, the first AppendEntries that carries the log with
// success, so that the leader pipelines to it. Every later AppendEntries on
// that connection it answers with a failure, as a follower whose log does
// not match does; the first of them only once the next request on the
// connection has arrived and the leader has appended to its log since
// (lastIndex), so that when it reads the failure it has a send under way
// and another due. lies counts the connections it answered so that the
// leader then closed.
type lyingPeer struct {
	t         *testing.T
	id        string
	ln        net.Listener
	lastIndex func() uint64
	lies      atomic.Int64
	quit      chan struct{}
	wg        sync.WaitGroup
	mu        sync.Mutex
	open      map[net.Conn]struct{}
}

// startLyingPeer starts a lyingPeer; it stops when t ends.
func startLyingPeer(t *testing.T, id string, lastIndex func() uint64) *lyingPeer {
	p := &lyingPeer{t: t, id: id, ln: listen(t), lastIndex: lastIndex, quit: make(chan struct{}), open: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		close(p.quit)
		p.ln.Close()
		p.mu.Lock()
		for c := range p.open {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *lyingPeer) addr() string { return p.ln.Addr().String() }

func (p *lyingPeer) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		p.open[c] = struct{}{}
		p.mu.Unlock()
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.serve(c)
			p.mu.Lock()
			delete(p.open, c)
			p.mu.Unlock()
			c.Close()
		}()
	}
}

func (p *lyingPeer) serve(c net.Conn) {
	r := bufio.NewReader(c)
	first, err := r.ReadByte()
	if err != nil {
		return
	}
	if first == protoIdentify {
		_ = json.NewEncoder(c).Encode(identity{Version: identifyVersion, ID: p.id, Addr: p.addr(), Peers: []string{}})
		return
	}
	if p.serveRaft(r, c) {
		p.lies.Add(1)
	}
}

// serveRaft answers the Raft RPCs of one connection until it ends, and
// reports whether it answered a failure on it.
func (p *lyingPeer) serveRaft(r *bufio.Reader, c net.Conn) (lied bool) {
	dec := codec.NewDecoder(r, &codec.MsgpackHandle{})
	w := bufio.NewWriter(c)
	enc := codec.NewEncoder(w, &codec.MsgpackHandle{})
	answer := func(resp any) bool {
		return enc.Encode("") == nil && enc.Encode(resp) == nil && w.Flush() == nil
	}
	fail := func(req *raft.AppendEntriesRequest) bool {
		return answer(&raft.AppendEntriesResponse{Term: req.Term, LastLog: req.PrevLogEntry})
	}
	succeeded := false
	var held *raft.AppendEntriesRequest
	for {
		typ, err := r.ReadByte()
		if err != nil {
			return lied
		}
		var ok bool
		switch typ {
		case rpcAppendEntries:
			var req raft.AppendEntriesRequest
			if dec.Decode(&req) != nil {
				return lied
			}
			switch {
			case req.PrevLogEntry == 0 && len(req.Entries) == 0: // a heartbeat
				ok = answer(&raft.AppendEntriesResponse{Term: req.Term, Success: true})
			case !succeeded:
				succeeded = true
				ok = answer(&raft.AppendEntriesResponse{Term: req.Term, LastLog: req.PrevLogEntry + uint64(len(req.Entries)), Success: true})
			case !lied && held == nil:
				held, ok = &req, true
			default:
				if held != nil {
					p.awaitAppend(req.PrevLogEntry + uint64(len(req.Entries)))
				}
				ok = (held == nil || fail(held)) && fail(&req)
				held, lied = nil, true
			}
		case rpcRequestVote:
			var req raft.RequestVoteRequest
			ok = dec.Decode(&req) == nil && answer(&raft.RequestVoteResponse{Term: req.Term})
		case rpcRequestPreVote:
			var req raft.RequestPreVoteRequest
			ok = dec.Decode(&req) == nil && answer(&raft.RequestPreVoteResponse{Term: req.Term})
		case rpcTimeoutNow:
			var req raft.TimeoutNowRequest
			ok = dec.Decode(&req) == nil && answer(&raft.TimeoutNowResponse{})
		}
		if !ok {
			return lied
		}
	}
}

// awaitAppend waits until the leader's log goes beyond index, or for a
// few seconds, or until the peer stops.
func (p *lyingPeer) awaitAppend(index uint64) {
	deadline := time.Now().Add(5 * time.Second)
	for p.lastIndex() <= index && time.Now().Before(deadline) {
		select {
		case <-p.quit:
			return
		case <-time.After(100 * time.Microsecond):
		}
	}
}

// startClose closes n's node on a goroutine of its own.
func startClose(n *testNode) <-chan error {
	closed := make(chan error, 1)
	node := n.node
	go func() { closed <- node.Close() }()
	return closed
}

// awaitClosed waits for the Close that closed answers and fails the test,
// with every goroutine's stack, if it has not returned within limit: only
// a hang takes that long.
func awaitClosed(t *testing.T, n *testNode, closed <-chan error, limit time.Duration) {
	t.Helper()
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("close %s: %v", n.id, err)
		}
		n.node = nil
	case <-time.After(limit):
		n.node = nil // its cleanup would wait for good too
		buf := make([]byte, 1<<20)
		fmt.Fprintf(os.Stderr, "%s", buf[:runtime.Stack(buf, true)])
		t.Fatalf("Close of %s has not returned after %v (goroutines above)", n.id, limit)
	}
}

// TestNode_PipelineAnsweredWithFailures_LeaderGoesOnAndCloses checks that a
// leader whose follower answers its pipelined AppendEntries with failures,
// while the leader commits, keeps replicating to it (it closes each such
// pipeline and opens another) and then closes in bounded time: Raft's
// pipeline sender had a send under way when its decoder returned at the
// failure, and both waited for each other for good, which stopped the
// replication to that follower and made Close (Raft's Shutdown) hang.
// 20 pipelines in make test, 1,000 under NATSDELAY_SOAK=1.
func TestNode_PipelineAnsweredWithFailures_LeaderGoesOnAndCloses(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, enginePebble, testConfig())
	leader := c.waitLeader()
	liar := startLyingPeer(t, "liar", leader.node.raft.LastIndex)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := leader.node.AddVoter(ctx, liar.id, liar.addr()); err != nil {
		t.Fatal(err)
	}

	// Commits from several writers keep the sender busy: a send is due
	// whenever the decoder stops.
	stop := make(chan struct{})
	var load sync.WaitGroup
	for w := range 8 {
		load.Go(func() {
			s := leader.node.Store()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				_ = commitPairs(s, fmt.Sprintf("w%d.k%d", w, i), "v")
			}
		})
	}
	// NB: no waitFor: a test that failed here would hang in its cleanup,
	// in the Close below.
	want := int64(20)
	if os.Getenv("NATSDELAY_SOAK") != "" {
		want = 1000
	}
	limit := time.Duration(want) * time.Second
	for deadline := time.Now().Add(limit); liar.lies.Load() < want && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	close(stop)
	load.Wait()
	if got := liar.lies.Load(); got < want {
		t.Errorf("%d pipelines failed by %s and closed by the leader in %v, want %d: the leader stopped replicating to it", got, liar.id, limit, want)
	}
	awaitClosed(t, leader, startClose(leader), 30*time.Second)
}

// TestNode_CloseWithMembershipChangeUnanswered_Returns checks that Close
// returns while a RemoveServer waits for a change that Raft committed but,
// shut down, never answers: its FSM loop ends at Shutdown without
// answering the batches queued for it, as it does for barriers (see
// await). Here the leader's local store holds its FSM while commits and
// then the change queue behind it; Raft shuts down, and its FSM loop,
// let go, takes the shutdown before the change (it picks at random between
// the two, once per batch queued).
func TestNode_CloseWithMembershipChangeUnanswered_Returns(t *testing.T) {
	t.Parallel()
	c, stores := startHoldingCluster(t, testConfig())
	leader := c.waitLeader()
	var follower *testNode
	for _, n := range c.nodes {
		if n != leader {
			follower = n
		}
	}
	committed := func(what string, start func()) {
		before := leader.node.raft.CommitIndex()
		start()
		waitFor(t, 10*time.Second, what+" to commit", func() bool { return leader.node.raft.CommitIndex() > before })
	}
	stores[leader].hold()
	var pending sync.WaitGroup
	for i := range 16 {
		committed(fmt.Sprintf("batch %d", i), func() {
			pending.Go(func() { _ = commitPairs(leader.node.Store(), fmt.Sprintf("k%d", i), "v") })
		})
	}
	removed := make(chan error, 1)
	committed("the removal of "+follower.id, func() {
		pending.Go(func() { removed <- leader.node.RemoveServer(context.Background(), follower.id) })
	})

	node := leader.node
	closed := startClose(leader)
	waitFor(t, 10*time.Second, "Raft to shut down", func() bool { return node.raft.State() == raft.Shutdown })
	stores[leader].let()
	awaitClosed(t, leader, closed, 30*time.Second)
	if err := <-removed; err == nil {
		t.Logf("the removal was answered before the shutdown")
	} else if !errors.Is(err, raft.ErrRaftShutdown) && !errors.Is(err, delaystore.ErrClosed) && !errors.Is(err, delaystore.ErrNotLeader) {
		// NB: on a loaded machine the leader may lose its leadership
		// before the shutdown: the removal is then refused as not the
		// leader's, which is an answer too.
		t.Errorf("RemoveServer during Close: %v, want closed, shut down or not the leader", err)
	}
	pending.Wait()
}
