package integration_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge"
	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/delaystore/pebblestore"
	"github.com/natsdelay/natsdelay/delaystore/raftstore"
)

// inProcessNode is one node of a cluster run inside the test: its local
// pebble store (WAL off, as serve runs it), its Raft node on real TCP, its
// own NATS connection, and the service on top.
type inProcessNode struct {
	id    string
	local delaystore.Store
	node  *raftstore.Node
	nc    *nats.Conn
	svc   *bridge.Service
	dead  bool
}

// kill stops the node abruptly, as a crash would for everyone else: its
// NATS connection goes first, so it answers nothing more, then Raft stops,
// then what is left of the service and the store are closed.
func (n *inProcessNode) kill(t *testing.T) {
	t.Helper()
	n.nc.Close()
	if err := n.node.Close(); err != nil {
		t.Logf("%s: closing the node: %v", n.id, err)
	}
	_ = n.svc.Close() // its connection is gone: draining fails, which is the point
	if err := n.local.Close(); err != nil {
		t.Logf("%s: closing the local store: %v", n.id, err)
	}
	n.dead = true
}

// startInProcessCluster starts n nodes over srv, each bootstrapping once
// all answer, with short Raft timeouts; every node is stopped when t ends.
// Each of opts may change node i's Raft configuration, and wrap its local
// store, before it opens.
func startInProcessCluster(t *testing.T, srv *server.Server, n int, opts ...func(i int, rc *raftstore.Config, local *delaystore.Store)) []*inProcessNode {
	t.Helper()
	return startInProcessClusterWith(t, srv, n, nil, opts...)
}

// startInProcessClusterWith is startInProcessCluster with svcOpts given
// to every node's service.
func startInProcessClusterWith(t *testing.T, srv *server.Server, n int, svcOpts []bridge.Option, opts ...func(i int, rc *raftstore.Config, local *delaystore.Store)) []*inProcessNode {
	t.Helper()
	addrs := freeAddrs(t, n)
	nodes := make([]*inProcessNode, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		node := &inProcessNode{id: fmt.Sprintf("node%c", 'a'+i)}
		nodes[i] = node
		dir := t.TempDir()
		node.local = openPebble(t, pebblestore.Config{Dir: filepath.Join(dir, "pebble"), DisableWAL: true})
		rc := raftstore.DefaultConfig()
		rc.NodeID, rc.Listen, rc.Peers, rc.Dir = node.id, addrs[i], addrs, filepath.Join(dir, "raft")
		var local delaystore.Store = node.local
		rc.Logger = testLogger(t).With("node_id", node.id)
		// Short enough for a quick failover, long enough that a loaded
		// machine under -race rarely elects without cause (the tests
		// follow such an election wherever it happens).
		rc.HeartbeatTimeout, rc.ElectionTimeout, rc.LeaderLeaseTimeout = time.Second, time.Second, 500*time.Millisecond
		for _, opt := range opts {
			opt(i, &rc, &local)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			node.node, errs[i] = raftstore.Open(ctx, local, rc)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("%s: %v", nodes[i].id, err)
		}
	}
	for _, node := range nodes {
		node.nc = bridgetestConnect(t, srv)
		cfg := bridge.Config{Engine: "pebble"}
		rn := node.node
		reopen := func() (delaystore.Store, error) { return rn.Store(), nil }
		cfg.Delivery.AckWait = time.Second
		cfg.Logger = testLogger(t).With("node_id", node.id)
		svc, err := bridge.New(node.nc, rn.Store(), cfg, append([]bridge.Option{bridge.WithCluster(bridge.RaftCluster(node.node)), bridge.WithReopen(reopen)}, svcOpts...)...)
		if err != nil {
			t.Fatalf("%s: bridge.New: %v", node.id, err)
		}
		node.svc = svc
	}
	t.Cleanup(func() {
		for _, node := range nodes {
			if node.dead {
				continue
			}
			if err := node.svc.Close(); err != nil {
				t.Errorf("%s: Close: %v", node.id, err)
			}
			node.nc.Close()
			if err := node.node.Close(); err != nil {
				t.Errorf("%s: closing the node: %v", node.id, err)
			}
			if err := node.local.Close(); err != nil {
				t.Errorf("%s: closing the local store: %v", node.id, err)
			}
		}
	})
	return nodes
}

// bridgetestConnect is a service connection: it reconnects, as serve's does.
func bridgetestConnect(t *testing.T, srv *server.Server) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	return nc
}

// serving waits until exactly one live node serves, and returns it.
func serving(t *testing.T, nodes []*inProcessNode) *inProcessNode {
	t.Helper()
	var leader *inProcessNode
	checkFor(t, time.Minute, 10*time.Millisecond, func() error {
		leader = nil
		n := 0
		for _, node := range nodes {
			if !node.dead && node.svc.Leader() {
				leader = node
				n++
			}
		}
		if n != 1 {
			return fmt.Errorf("%d nodes serve", n)
		}
		return nil
	})
	return leader
}

// TestCluster_InProcess_LeaderServesAndReplicates checks the life of a
// message in a cluster of three nodes in one process (real TCP between
// the Raft nodes, one real NATS server): only the leader serves, so an
// ingest request reaches it and is answered once a quorum committed it;
// every node applies it; it is delivered and ACKed through the leader;
// followers answer CLUSTER.STATUS and are ready, and INFO's cluster
// object lists every member with its applied index.
func TestCluster_InProcess_LeaderServesAndReplicates(t *testing.T) {
	srv := startServer(t)
	nodes := startInProcessCluster(t, srv, 3)
	serving(t, nodes)
	nc := connect(t, srv)

	deliveries := subscribe(t, nc, "orders.cluster")
	s := scheduleInCluster(t, nc, newMsg("orders.cluster", "hello", "Delay", "100ms"))
	r := next(t, deliveries, "the delivery")
	notEarly(t, r, s.FireAt)
	if got := r.Header.Get(wire.HeaderTag); got != s.Tag {
		t.Fatalf("delivered %s, want %s", got, s.Tag)
	}
	ackSync(t, nc, r.Msg, "+ACK")

	// Every node applies what the leader committed. (A follower learns the
	// commit index from the leader, so the highest any node knows is the
	// leader's.)
	checkFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		var want uint64
		for _, node := range nodes {
			want = max(want, node.node.Status().CommitIndex)
		}
		for _, node := range nodes {
			if st := node.node.Status(); st.AppliedIndex < want {
				return fmt.Errorf("%s applied %d of %d", node.id, st.AppliedIndex, want)
			}
		}
		return nil
	})
	for _, node := range nodes {
		if err := node.svc.Ready(); err != nil {
			t.Errorf("%s (%s) not ready: %v", node.id, node.svc.Role(), err)
		}
	}
	// One node serves, whichever it is, and every node says so.
	checkFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		leader := serving(t, nodes)
		sts := gatherStatus(nc, 5*time.Second, 3)
		if len(sts) != 3 {
			return fmt.Errorf("CLUSTER.STATUS answered by %d nodes, want 3: %v", len(sts), sts)
		}
		for id, st := range sts {
			if st.LeaderID != leader.id || (id == leader.id) != (st.Role == wire.RoleLeader) {
				return fmt.Errorf("%s: role %s, leader %s; want leader %s", id, st.Role, st.LeaderID, leader.id)
			}
		}
		return nil
	})
	checkFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		rep, err := nc.Request(wire.DefaultAPIPrefix+"."+wire.VerbInfo, nil, 5*time.Second)
		if err != nil {
			return err
		}
		var info wire.InfoReply
		if err := json.Unmarshal(rep.Data, &info); err != nil {
			return fmt.Errorf("INFO %q: %v", rep.Data, err)
		}
		ci := info.Cluster
		if ci == nil || ci.Role != wire.RoleLeader || ci.LeaderID != ci.ID || len(ci.Peers) != 3 {
			return fmt.Errorf("INFO cluster = %+v, want a leader with 3 peers", ci)
		}
		for _, p := range ci.Peers {
			if !p.Answered || p.Lag == nil || p.AppliedIndex == 0 {
				return fmt.Errorf("INFO peer %+v: want an answer with its applied index and lag", p)
			}
		}
		return nil
	})
	waitPending(t, nc, 0)

	// Bad membership changes are refused and change nothing (a 503 means
	// the leader changed meanwhile: asked again).
	for _, tc := range []struct{ verb, body, code, text string }{
		{wire.VerbClusterAdd, `{"id":"","addr":"127.0.0.1:1"}`, "400", `"id" is empty`},
		{wire.VerbClusterAdd, `{"id":"x","addr":"nowhere"}`, "400", `"addr" "nowhere"`},
		{wire.VerbClusterAdd, `{"id":"x","addr":"127.0.0.1:1","voter":true}`, "400", "unknown field"},
		{wire.VerbClusterRemove, `{"id":"nodez"}`, "404", `no member with id "nodez"`},
	} {
		checkFor(t, 30*time.Second, 20*time.Millisecond, func() error {
			rep, err := nc.Request(wire.DefaultAPIPrefix+"."+tc.verb, []byte(tc.body), 5*time.Second)
			if err != nil {
				return err
			}
			code, text := rep.Header.Get(wire.HeaderServiceErrorCode), rep.Header.Get(wire.HeaderServiceError)
			if code == "503" {
				return fmt.Errorf("%s: 503 %s", tc.verb, text)
			}
			if code != tc.code || !strings.Contains(text, tc.text) {
				t.Errorf("%s %s: %s %q, want %s with %q", tc.verb, tc.body, code, text, tc.code, tc.text)
			}
			return nil
		})
	}
	for _, node := range nodes {
		if peers := node.node.Status().Peers; len(peers) != 3 {
			t.Errorf("%s: after refused changes, peers %v", node.id, peers)
		}
	}
}

// TestCluster_InProcess_KillLeader_NothingAcknowledgedLost kills the
// leader's node abruptly (its NATS connection, Raft and service gone at
// once) while publishers schedule and a consumer ACKs, NAKs or ignores
// deliveries: once in a cluster of three, and twice in a cluster of five,
// so that three still make a quorum. It checks that every acknowledged
// message is delivered, none before its fire time, no event ID is used
// twice, and that nothing is pending at the end.
func TestCluster_InProcess_KillLeader_NothingAcknowledgedLost(t *testing.T) {
	for _, tc := range []struct{ nodes, kills int }{{3, 1}, {5, 2}} {
		t.Run(fmt.Sprintf("%d nodes", tc.nodes), func(t *testing.T) { killLeaderInProcess(t, tc.nodes, tc.kills) })
	}
}

func killLeaderInProcess(t *testing.T, size, kills int) {
	srv := startServer(t)
	nodes := startInProcessCluster(t, srv, size)
	serving(t, nodes) // traffic starts once a leader serves

	const subject, perRound = "clusterinproc", 60
	l := newCrashLoop()
	traffic := startCrashTraffic(t, srv, l, subject, 11, perRound)
	l.setUp()
	for round := range kills {
		traffic.feed(ingestToken{}, perRound)
		waitGrowth(t, "ingest replies", &l.replies, perRound/4)
		leader := serving(t, nodes) // whichever leads now, after an election of its own too
		l.setDown()
		killed := leader.id
		leader.kill(t)
		leader = serving(t, nodes)
		l.setUp()
		t.Logf("round %d: killed leader %s after %d acknowledged; %s leads", round+1, killed, l.replies.Load(), leader.id)
	}
	traffic.feed(ingestToken{}, perRound)
	waitGrowth(t, "ingest replies", &l.replies, perRound/4)
	traffic.stopPublishers()
	l.settle(t, traffic.consumer)
	lost, deliveries, redeliveries := l.verify(t)
	t.Logf("acknowledged: %d, lost: %d, deliveries: %d, redeliveries: %d", l.replies.Load(), lost, deliveries, redeliveries)
}

// scheduleInCluster schedules m as a publisher of a cluster should: with a
// Delay-Id (one of its own unless m has one), so that a retry replaces
// rather than adds, and again after no responders, a timeout or a 503,
// which a leader change (a failover, or an election under load) may give
// at any moment. Any other error fails the test.
func scheduleInCluster(tb testing.TB, nc *nats.Conn, m *nats.Msg) scheduled {
	tb.Helper()
	if m.Header.Get(wire.HeaderID) == "" {
		m.Header.Set(wire.HeaderID, nats.NewInbox()[len(nats.InboxPrefix):])
	}
	var s scheduled
	checkFor(tb, time.Minute, 20*time.Millisecond, func() error {
		rep, err := nc.RequestMsg(m, wait)
		if err != nil {
			if errors.Is(err, nats.ErrNoResponders) || errors.Is(err, nats.ErrTimeout) {
				return err
			}
			tb.Fatalf("schedule %s: %v", m.Subject, err)
		}
		if code := rep.Header.Get(wire.HeaderServiceErrorCode); code != "" {
			if code == "503" {
				return fmt.Errorf("schedule %s: 503 %s", m.Subject, rep.Header.Get(wire.HeaderServiceError))
			}
			tb.Fatalf("schedule %s: error %s: %s", m.Subject, code, rep.Header.Get(wire.HeaderServiceError))
		}
		s = parseScheduled(tb, rep.Data)
		return nil
	})
	return s
}
