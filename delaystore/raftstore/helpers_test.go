package raftstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/delaystore/boltstore"
	"github.com/natsdelay/natsdelay/delaystore/pebblestore"
)

// testConfig has Raft timeouts short enough for quick tests and long
// enough that a loaded machine under -race rarely elects without cause.
// Rarely is not never: the tests write through a clusterWriter, which
// follows a leader change, and check nothing that depends on which node
// leads.
func testConfig() Config {
	return Config{
		HeartbeatTimeout:   time.Second,
		ElectionTimeout:    time.Second,
		LeaderLeaseTimeout: time.Second,
		CommitTimeout:      5 * time.Millisecond,
		SnapshotInterval:   time.Hour, // tests snapshot on demand
		SnapshotThreshold:  1 << 30,
		TrailingLogs:       1 << 30,
	}
}

// engine opens local stores of one kind.
type engine string

const (
	enginePebble engine = "pebble" // on disk, WAL off, as in cluster mode
	engineBolt   engine = "bolt"
	// engineCrashable is pebble with its WAL off on a memory file system
	// that can be cloned as a crash would leave it: only what was synced.
	engineCrashable engine = "pebble-crashable"
)

// testNode is one node of a test cluster and what it runs on.
type testNode struct {
	t      testing.TB
	id     string
	addr   string
	dir    string // Raft's Dir
	engine engine
	local  delaystore.Store
	// localDir and memFS hold the local store's files.
	localDir string
	memFS    *vfs.MemFS
	node     *Node
	log      *slog.Logger
	cfg      Config // the Config it was last opened with, listener aside
}

type testCluster struct {
	t     testing.TB
	nodes []*testNode
}

// listen binds an ephemeral port on 127.0.0.1.
func listen(tb testing.TB) net.Listener {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	return ln
}

// newTestNode prepares a node: its port, directories and local store.
func newTestNode(tb testing.TB, id string, eng engine) (*testNode, net.Listener) {
	tb.Helper()
	ln := listen(tb)
	base := tb.TempDir()
	n := &testNode{
		t: tb, id: id, addr: ln.Addr().String(), engine: eng,
		dir:      filepath.Join(base, "raft"),
		localDir: filepath.Join(base, "local"),
		log:      slog.New(slog.NewTextHandler(tb.Output(), &slog.HandlerOptions{Level: slog.LevelInfo})).With("test_node", id),
	}
	if _, ok := tb.(*testing.B); ok {
		// Benchmarks print their output even when they pass.
		n.log = slog.New(slog.DiscardHandler)
	}
	if eng == engineCrashable {
		n.memFS = vfs.NewCrashableMem()
		n.localDir = "/local"
	}
	n.openLocal()
	tb.Cleanup(func() {
		if n.node != nil {
			n.node.Close()
		}
		n.local.Close()
	})
	return n, ln
}

func (n *testNode) openLocal() {
	n.t.Helper()
	var err error
	switch n.engine {
	case enginePebble:
		n.local, err = pebblestore.Open(pebblestore.Config{Dir: n.localDir, DisableWAL: true, Logger: n.log})
	case engineCrashable:
		n.local, err = pebblestore.Open(pebblestore.Config{Dir: n.localDir, DisableWAL: true, FS: n.memFS, Logger: n.log})
	case engineBolt:
		if err := os.MkdirAll(n.localDir, 0o700); err != nil {
			n.t.Fatal(err)
		}
		n.local, err = boltstore.Open(boltstore.Config{Path: filepath.Join(n.localDir, "bolt.db"), Logger: n.log})
	}
	if err != nil {
		n.t.Fatal(err)
	}
}

// open opens the node over its local store with cfg (NodeID, Dir and
// Logger filled in).
func (n *testNode) open(ctx context.Context, cfg Config, ln net.Listener) error {
	cfg.NodeID = n.id
	cfg.Dir = n.dir
	cfg.Logger = n.log
	if cfg.Listen == "" {
		cfg.Listen = n.addr
	}
	n.cfg = cfg
	cfg.listener = ln
	node, err := Open(ctx, n.local, cfg)
	if err != nil {
		return err
	}
	n.node = node
	return nil
}

func (n *testNode) reopen(ctx context.Context) {
	n.t.Helper()
	ln, err := net.Listen("tcp", n.addr)
	if err != nil {
		n.t.Fatal(err)
	}
	if err := n.open(ctx, n.cfg, ln); err != nil {
		n.t.Fatal(err)
	}
}

// stop closes the node, keeping its local store open.
func (n *testNode) stop() {
	n.t.Helper()
	if err := n.node.Close(); err != nil {
		n.t.Errorf("close %s: %v", n.id, err)
	}
	n.node = nil
}

// crash stops the node as a crash would: the local store loses everything
// it did not sync (for the crashable engine: its memtable, since the WAL is
// off), and is opened again from what is left.
func (n *testNode) crash() {
	n.t.Helper()
	n.stop()
	if n.engine == engineCrashable {
		clone := n.memFS.CrashClone(vfs.CrashCloneCfg{})
		n.local.Close() // writes to the old file system only
		n.memFS = clone
	} else {
		n.local.Close()
	}
	n.openLocal()
}

// startCluster starts size nodes that bootstrap one cluster, and waits for
// a leader.
func startCluster(tb testing.TB, size int, eng engine, cfg Config) *testCluster {
	tb.Helper()
	return startNamedCluster(tb, "node", size, eng, cfg)
}

// startNamedCluster is startCluster with node ids prefix0, prefix1, ...
func startNamedCluster(tb testing.TB, prefix string, size int, eng engine, cfg Config) *testCluster {
	tb.Helper()
	c := &testCluster{t: tb}
	var lns []net.Listener
	var peers []string
	for i := range size {
		n, ln := newTestNode(tb, fmt.Sprintf("%s%d", prefix, i), eng)
		c.nodes = append(c.nodes, n)
		lns = append(lns, ln)
		peers = append(peers, n.addr)
	}
	cfg.Peers = peers
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	errs := make([]error, size)
	var wg sync.WaitGroup
	for i, n := range c.nodes {
		wg.Go(func() { errs[i] = n.open(ctx, cfg, lns[i]) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		tb.Fatal(err)
	}
	c.waitLeader()
	return c
}

// running returns the nodes that run.
func (c *testCluster) running() []*testNode {
	var out []*testNode
	for _, n := range c.nodes {
		if n.node != nil {
			out = append(out, n)
		}
	}
	return out
}

// waitLeader waits until one running node is a ready leader and the
// others agree on it.
func (c *testCluster) waitLeader() *testNode {
	c.t.Helper()
	var leader *testNode
	waitFor(c.t, 20*time.Second, "a leader", func() bool {
		leader = nil
		for _, n := range c.running() {
			if n.node.IsLeader() {
				leader = n
			}
		}
		if leader == nil {
			return false
		}
		for _, n := range c.running() {
			if n.node.Status().LeaderID != leader.id {
				return false
			}
		}
		return true
	})
	return leader
}

// waitApplied waits until every running node applied the command entry
// at index to its local store (the leader's fsm.applied after a Commit).
func (c *testCluster) waitApplied(index uint64) {
	c.t.Helper()
	for _, n := range c.running() {
		waitFor(c.t, 20*time.Second, fmt.Sprintf("%s to apply index %d", n.id, index), func() bool {
			return n.node.fsm.applied.Load() >= index
		})
	}
}

// waitFor polls cond until it holds, failing the test after timeout.
func waitFor(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// dump returns every pair of a store, in order.
func dump(tb testing.TB, s delaystore.Store) [][2][]byte {
	tb.Helper()
	var out [][2][]byte
	err := s.Scan(delaystore.IterOptions{}, func(k, v []byte) bool {
		out = append(out, [2][]byte{bytes.Clone(k), bytes.Clone(v)})
		return true
	})
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

// sameContent fails the test unless a and b hold the same pairs.
func sameContent(tb testing.TB, what string, a, b delaystore.Store) {
	tb.Helper()
	da, db := dump(tb, a), dump(tb, b)
	if len(da) != len(db) {
		tb.Fatalf("%s: %d keys against %d", what, len(da), len(db))
	}
	for i := range da {
		if !bytes.Equal(da[i][0], db[i][0]) || !bytes.Equal(da[i][1], db[i][1]) {
			tb.Fatalf("%s: pair %d differs: %q=%q against %q=%q", what, i, da[i][0], da[i][1], db[i][0], db[i][1])
		}
	}
}

// commitPairs commits one batch of key=value pairs through s.
func commitPairs(s delaystore.Store, pairs ...string) error {
	b := s.NewBatch()
	defer b.Close()
	for i := 0; i+1 < len(pairs); i += 2 {
		if err := b.Set([]byte(pairs[i]), []byte(pairs[i+1])); err != nil {
			return err
		}
	}
	return b.Commit(delaystore.Sync)
}

// clusterWriter schedules messages through a Repository on whichever node
// leads, as the service does: a batch refused with ErrNotLeader is
// resolved on the next leader. Once that leader is ready it has applied
// everything committed (a barrier), so the refused batch either shows in
// its store (it was committed after all) or never will be, and is then
// sent again. Only the writer writes, so the Repository's last event ID
// tells which.
type clusterWriter struct {
	c      *testCluster
	leader *testNode
	r      *delaystore.Repository
	ids    []uint64 // every event ID committed through the writer, in order
	// followed counts the leader changes schedule followed with its
	// Repository open: each leaves the old leader's ID lease taken, so the
	// new leader's IDs jump above it.
	followed int
}

func (c *testCluster) newWriter() *clusterWriter {
	c.t.Helper()
	w := &clusterWriter{c: c}
	w.follow()
	c.t.Cleanup(w.close)
	return w
}

// follow opens the Repository on the current leader.
func (w *clusterWriter) follow() {
	w.c.t.Helper()
	w.close()
	w.leader = w.c.waitLeader()
	w.r = openRepo(w.c.t, w.leader.node.Store())
}

func (w *clusterWriter) close() {
	if w.r != nil {
		w.r.Close()
		w.r = nil
	}
}

// repo is the Repository on the current leader.
func (w *clusterWriter) repo() *delaystore.Repository { return w.r }

// schedule schedules n messages on subject in batches of batchSize and
// returns their event IDs.
func (w *clusterWriter) schedule(subject string, n, batchSize int) []uint64 {
	tb := w.c.t
	tb.Helper()
	var ids []uint64
	for len(ids) < n {
		var msgs []*delaystore.StoredMessage
		for i := 0; i < batchSize && len(ids)+len(msgs) < n; i++ {
			msgs = append(msgs, &delaystore.StoredMessage{
				Subject:  subject,
				Payload:  fmt.Appendf(nil, "m%d", len(ids)+i),
				FireAtNs: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano() + int64(len(ids)+i),
			})
		}
		before := w.r.LastID()
		got, err := w.r.Schedule(msgs, delaystore.Sync)
		if errors.Is(err, ErrNotLeader) {
			prev := w.leader.id
			w.follow()
			w.followed++
			tb.Logf("schedule: %s lost leadership (%v); %s leads", prev, err, w.leader.id)
			switch last := w.r.LastID(); last {
			case before:
				continue // never committed: send it again
			case before + uint64(len(msgs)):
				for id := before + 1; id <= last; id++ {
					ids = append(ids, id)
				}
				w.ids = append(w.ids, ids[len(ids)-len(msgs):]...)
				continue
			default:
				tb.Fatalf("after a refused batch of %d from last id %d, the new leader's last id is %d", len(msgs), before, last)
			}
		}
		if err != nil {
			tb.Fatalf("schedule: %v", err)
		}
		for _, s := range got {
			ids = append(ids, s.Key.EventID())
		}
		w.ids = append(w.ids, ids[len(ids)-len(got):]...)
	}
	return ids
}

// commitOnLeader commits one batch of key=value pairs on whichever node
// leads, again on the next leader if it is refused with ErrNotLeader
// (the pairs are absolute, so committing them twice is harmless).
func (c *testCluster) commitOnLeader(pairs ...string) *testNode {
	c.t.Helper()
	for {
		leader := c.waitLeader()
		err := commitPairs(leader.node.Store(), pairs...)
		if err == nil {
			return leader
		}
		if !errors.Is(err, ErrNotLeader) {
			c.t.Fatalf("commit on %s: %v", leader.id, err)
		}
		c.t.Logf("commit: %s lost leadership (%v); retrying", leader.id, err)
	}
}

// appliedEverywhere waits until every running node applied every command
// entry the current leader has applied, and returns that leader.
func (c *testCluster) appliedEverywhere() *testNode {
	c.t.Helper()
	leader := c.waitLeader()
	c.waitApplied(leader.node.fsm.applied.Load())
	return leader
}
