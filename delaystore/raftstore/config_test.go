package raftstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/delaystore/pebblestore"
)

// A bad Config is refused with every problem named, before anything runs.
func TestConfig_Validate_NamesEveryProblem(t *testing.T) {
	t.Parallel()
	local, err := pebblestore.Open(pebblestore.Config{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	good := Config{NodeID: "a", Listen: "127.0.0.1:7000", Peers: []string{"127.0.0.1:7000", "127.0.0.1:7001"}, Dir: t.TempDir()}
	if err := good.Validate(); err != nil {
		t.Fatalf("good config: %v", err)
	}
	cases := []struct {
		name   string
		change func(*Config)
		want   []string
	}{
		{"EmptyNodeID", func(c *Config) { c.NodeID = "" }, []string{"NodeID is empty"}},
		{"PeersWithoutSelf", func(c *Config) { c.Peers = []string{"127.0.0.1:7001", "127.0.0.1:7002"} }, []string{`do not include this node's own address "127.0.0.1:7000"`}},
		{"EmptyPeers", func(c *Config) { c.Peers = nil }, []string{"Peers is empty"}},
		{"PeerTwice", func(c *Config) { c.Peers = append(c.Peers, "127.0.0.1:7001") }, []string{`"127.0.0.1:7001" listed twice`}},
		{"PeerNotHostPort", func(c *Config) { c.Peers = append(c.Peers, "nohost") }, []string{`"nohost": want HOST:PORT`}},
		{"WildcardWithoutAdvertise", func(c *Config) { c.Listen = "0.0.0.0:7000" }, []string{"binds every interface: set Advertise"}},
		{"AdvertiseWildcard", func(c *Config) { c.Listen = "0.0.0.0:7000"; c.Advertise = "0.0.0.0:7000" }, []string{`Advertise "0.0.0.0:7000": host "0.0.0.0" does not name one machine`}},
		{"NoDir", func(c *Config) { c.Dir = "" }, []string{"Dir is empty"}},
		{"LeaseAboveHeartbeat", func(c *Config) { c.LeaderLeaseTimeout = 2 * time.Second }, []string{"LeaderLeaseTimeout (2s) must not exceed HeartbeatTimeout (1s)"}},
		{"NegativeTimeout", func(c *Config) { c.CommitTimeout = -time.Second }, []string{"CommitTimeout (-1s) must be >= 0"}},
		{"RaftLimit", func(c *Config) { c.HeartbeatTimeout = time.Millisecond; c.LeaderLeaseTimeout = time.Millisecond }, []string{"HeartbeatTimeout is too low"}},
		{"Several", func(c *Config) { c.NodeID = ""; c.Dir = "" }, []string{"NodeID is empty", "Dir is empty"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := good
			cfg.Peers = append([]string(nil), good.Peers...)
			tc.change(&cfg)
			err := cfg.Validate()
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("Validate: %v, want ErrInvalidConfig", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate: %v\nwant it to say %q", err, w)
				}
			}
			if _, err := Open(context.Background(), local, cfg); !errors.Is(err, ErrInvalidConfig) {
				t.Errorf("Open: %v, want ErrInvalidConfig", err)
			}
		})
	}
}

// Open without a local store is refused as a bad config, before anything
// runs.
func TestOpen_NoLocalStore_Refused(t *testing.T) {
	t.Parallel()
	cfg := Config{NodeID: "a", Listen: "127.0.0.1:7000", Peers: []string{"127.0.0.1:7000", "127.0.0.1:7001"}, Dir: t.TempDir()}
	_, err := Open(context.Background(), nil, cfg)
	if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "no local store") {
		t.Fatalf("Open without a local store: %v, want ErrInvalidConfig saying so", err)
	}
}

// openAll opens the nodes at once with their own peer lists and returns
// each one's error; ctx bounds their wait for peers.
func openAll(ctx context.Context, nodes []*testNode, lns []net.Listener, peers [][]string, join []bool) []error {
	return openAllUntilRefused(ctx, nodes, lns, peers, join, false)
}

// openAllUntilRefused is openAll; with untilRefused, the first refusal
// (ErrClusterMismatch) cancels the others' wait for their peers, so that
// a test need not bound that wait with a deadline short enough to be
// quick, and so too short for a loaded machine.
func openAllUntilRefused(ctx context.Context, nodes []*testNode, lns []net.Listener, peers [][]string, join []bool, untilRefused bool) []error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		cfg := testConfig()
		cfg.Peers = peers[i]
		cfg.Join = join != nil && join[i]
		wg.Go(func() {
			errs[i] = n.open(ctx, cfg, lns[i])
			if untilRefused && errors.Is(errs[i], ErrClusterMismatch) {
				cancel()
			}
		})
	}
	wg.Wait()
	return errs
}

// wantUntouched fails unless a refused node wrote nothing in its Dir.
func wantUntouched(t *testing.T, n *testNode) {
	t.Helper()
	if _, err := os.Stat(n.dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s: Dir written after a refused start: %v", n.id, err)
	}
}

// Two nodes with one id never form a cluster: a node that sees them
// refuses to start, the others (whose peers left) wait and give up, and
// none writes anything.
func TestOpen_DuplicateID_Refused(t *testing.T) {
	t.Parallel()
	var nodes []*testNode
	var lns []net.Listener
	var addrs []string
	for _, id := range []string{"a", "dup", "dup"} {
		n, ln := newTestNode(t, id, enginePebble)
		nodes, lns, addrs = append(nodes, n), append(lns, ln), append(addrs, n.addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := openAllUntilRefused(ctx, nodes, lns, [][]string{addrs, addrs, addrs}, nil, true)
	refused := 0
	for i, err := range errs {
		switch {
		case errors.Is(err, ErrClusterMismatch) && strings.Contains(err.Error(), `node id "dup" is used by both`) &&
			strings.Contains(err.Error(), "every node needs its own node id (--node-id)"):
			refused++
		case errors.Is(err, context.Canceled):
		default:
			t.Errorf("%s: %v, want ErrClusterMismatch naming the duplicate, or a wait that timed out", nodes[i].id, err)
		}
		wantUntouched(t, nodes[i])
	}
	if refused == 0 {
		t.Fatal("no node named the duplicate id")
	}
}

// Fresh nodes started with different peer lists do not bootstrap.
func TestOpen_DifferentPeerLists_Refused(t *testing.T) {
	t.Parallel()
	a, lnA := newTestNode(t, "a", enginePebble)
	b, lnB := newTestNode(t, "b", enginePebble)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// b lists a third peer that never answers, so b waits, and a, which
	// lists only a and b, sees that b was given another list.
	absent := listen(t)
	absentAddr := absent.Addr().String()
	absent.Close()
	var errA error
	var wg sync.WaitGroup
	bctx, bcancel := context.WithCancel(ctx)
	wg.Go(func() {
		cfg := testConfig()
		cfg.Peers = []string{a.addr, b.addr, absentAddr}
		b.open(bctx, cfg, lnB)
	})
	cfg := testConfig()
	cfg.Peers = []string{a.addr, b.addr}
	errA = a.open(ctx, cfg, lnA)
	bcancel()
	wg.Wait()
	if !errors.Is(errA, ErrClusterMismatch) || !strings.Contains(errA.Error(), "was started with peers") {
		t.Fatalf("a: %v, want ErrClusterMismatch about the peer lists", errA)
	}
	wantUntouched(t, a)
	wantUntouched(t, b)
}

// A fresh node whose peer belongs to a running cluster does not bootstrap a
// second cluster beside it: without Join it is refused (or, if its other
// peer was refused first and left, waits and gives up), and writes nothing.
func TestOpen_PeerOfAnotherCluster_Refused(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, enginePebble, testConfig())
	n, ln := newTestNode(t, "x", enginePebble)
	other, lnOther := newTestNode(t, "y", enginePebble)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	peers := []string{n.addr, other.addr, c.nodes[0].addr}
	errs := openAllUntilRefused(ctx, []*testNode{n, other}, []net.Listener{ln, lnOther}, [][]string{peers, peers}, nil, true)
	refused := 0
	for i, err := range errs {
		switch {
		case errors.Is(err, ErrClusterMismatch) && strings.Contains(err.Error(), "belongs to cluster"):
			refused++
		case errors.Is(err, context.Canceled):
		default:
			t.Errorf("node %d: %v, want ErrClusterMismatch naming the other cluster", i, err)
		}
	}
	if refused == 0 {
		t.Fatal("no node named the other cluster")
	}
	wantUntouched(t, n)
	wantUntouched(t, other)
}

// A node whose Dir holds one cluster's state is refused when its peers form
// another, and a Dir is refused to a node of another id.
func TestOpen_DirOfAnotherCluster_Refused(t *testing.T) {
	t.Parallel()
	a := startCluster(t, 3, enginePebble, testConfig())
	b := startNamedCluster(t, "other", 3, enginePebble, testConfig())
	n := a.nodes[0]
	n.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	ln, err := net.Listen("tcp", n.addr)
	if err != nil {
		t.Fatal(err)
	}
	own := n.cfg
	cfg := own
	cfg.Peers = append(b.peers(), n.addr)
	err = n.open(ctx, cfg, ln)
	if !errors.Is(err, ErrClusterMismatch) || !strings.Contains(err.Error(), "holds the state of cluster") {
		t.Fatalf("open on B's peers: %v, want ErrClusterMismatch", err)
	}

	ln, err = net.Listen("tcp", n.addr)
	if err != nil {
		t.Fatal(err)
	}
	n.id = "renamed"
	err = n.open(ctx, own, ln)
	if !errors.Is(err, ErrClusterMismatch) || !strings.Contains(err.Error(), `belongs to node "node0"`) {
		t.Fatalf("open as another node: %v, want ErrClusterMismatch", err)
	}
	// With its own id and peers it rejoins.
	n.id = "node0"
	n.cfg = own
	n.reopen(ctx)
	a.waitLeader()
}

// A fresh node over a local store that already holds data (a single
// node's data dir turned into a cluster member) is refused, bootstrapping
// or joining, before anything is written: the others would never have
// those messages, and a joining node's snapshot would delete them. The
// data stays as it was.
func TestOpen_LocalNotEmpty_Refused(t *testing.T) {
	t.Parallel()
	for _, join := range []bool{false, true} {
		t.Run(fmt.Sprintf("join=%v", join), func(t *testing.T) {
			t.Parallel()
			n, ln := newTestNode(t, "a", enginePebble)
			r := openRepo(t, n.local)
			if _, err := r.Schedule([]*delaystore.StoredMessage{{Subject: "kept", Payload: []byte("x"), FireAtNs: 1}}, delaystore.Sync); err != nil {
				t.Fatal(err)
			}
			r.Close()
			before := dump(t, n.local)
			cfg := testConfig()
			cfg.Peers = []string{n.addr}
			cfg.Join = join
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err := n.open(ctx, cfg, ln)
			if !errors.Is(err, ErrLocalNotEmpty) || !strings.Contains(err.Error(), "run this data dir as a single node") {
				t.Fatalf("open over a store with messages: %v, want ErrLocalNotEmpty", err)
			}
			wantUntouched(t, n)
			if after := dump(t, n.local); len(after) != len(before) {
				t.Fatalf("refused open changed the store: %d keys, had %d", len(after), len(before))
			}
		})
	}
}
