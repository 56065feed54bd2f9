package raftstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	bolt "go.etcd.io/bbolt"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/delaystore/internal/gate"
	"github.com/natsdelay/natsdelay/delaystore/raftstore/internal/raftlog"
)

// Node is one member of a cluster. It is safe for concurrent use.
type Node struct {
	cfg   Config
	log   *slog.Logger
	local delaystore.Store

	mux       *mux
	transport *raft.NetworkTransport
	logs      *raftlog.Log
	stable    *raftboltdb.BoltStore
	snaps     raft.SnapshotStore
	fsm       *fsm
	raft      *raft.Raft
	// lease is what the node checks before effects others observe; see
	// lease.go. answers are the followers' answers that extend it too
	// (heartbeat.go).
	lease   *lease
	answers followerAnswers
	// pipes are the pipelines of replication open to the followers
	// (pipeline.go).
	pipes pipelines

	// cluster is the name of the cluster, empty while a fresh node waits
	// for its peers.
	cluster atomic.Pointer[string]
	// bootstrapping is true while a fresh node (not joining) waits for its
	// peers: it says so to identify.
	bootstrapping atomic.Bool

	// lag follows how far the local store is behind the leader (see
	// lag.go); started is when Raft started, the start of the wait for a
	// first contact.
	lag     lagMark
	started time.Time

	// notifyCh receives Raft's leadership changes, in order.
	notifyCh chan bool
	// failCh receives, once, the error that makes the FSM stop.
	failCh chan error

	done      chan struct{}
	closeOnce sync.Once
	closeErr  error
	// wg counts the goroutines the node owns (see goFunc).
	wg sync.WaitGroup

	// leaderEpoch is mu.epoch, for reads without mu (LeaseCheck).
	leaderEpoch atomic.Uint64

	mu struct {
		sync.Mutex
		// leader is Raft's view; ready is true once a barrier in this
		// term of leadership has been applied. epoch counts leadership
		// changes, so that a watcher tells a lost-and-regained leadership
		// from an unbroken one. term is Raft's term of the leadership
		// epoch counts, while this node leads.
		leader, ready bool
		epoch, term   uint64
		watchers      map[*watcher]struct{}
		closed        bool
	}
}

// Open validates cfg, binds the cluster port, and starts the node over
// local, this node's own store: the node applies the replicated log to it
// and serves reads from it. The caller opens local before Open and closes
// it after Close; Pebble should run with its WAL off
// (pebblestore.Config.DisableWAL), as the Raft log is the WAL. On a
// fresh Dir it first waits until every peer has answered, then bootstraps
// the cluster they form (with Join, it waits for a peer of the cluster to
// answer and then to be added). With state in Dir it rejoins its cluster
// at once. It returns once the node runs; it does not wait for a leader.
// ctx bounds the wait for peers.
//
// It returns an error wrapping ErrInvalidConfig for a bad Config, and
// ErrClusterMismatch when the peers or Dir do not make one cluster with
// this node; in both cases before writing anything.
func Open(ctx context.Context, local delaystore.Store, cfg Config) (*Node, error) {
	n, err := open(ctx, local, cfg)
	if err != nil && cfg.listener != nil {
		// Open owns a listener it was given, on failure too. Closing
		// it twice is harmless.
		cfg.listener.Close()
	}
	return n, err
}

func open(ctx context.Context, local delaystore.Store, cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if local == nil {
		return nil, fmt.Errorf("%w: no local store: want this node's own store", ErrInvalidConfig)
	}
	cfg = cfg.withDefaults()
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("component", "raftstore", "node_id", cfg.NodeID)

	st, err := readDirState(cfg.Dir)
	if err != nil {
		return nil, err
	}
	if st.node != nil && st.node.ID != cfg.NodeID {
		return nil, fmt.Errorf("%w: Dir %s belongs to node %q, not %q", ErrClusterMismatch, cfg.Dir, st.node.ID, cfg.NodeID)
	}

	if !st.hasLog {
		if err := checkLocalEmpty(local, cfg.Dir); err != nil {
			return nil, err
		}
	}

	n := &Node{
		cfg:      cfg,
		log:      log,
		local:    local,
		notifyCh: make(chan bool, 1),
		failCh:   make(chan error, 1),
		done:     make(chan struct{}),
		lease:    newLease(cfg.LeaderLeaseTimeout),
	}
	n.mu.watchers = make(map[*watcher]struct{})
	if st.node != nil && st.hasLog {
		n.cluster.Store(&st.node.Cluster)
	}
	n.bootstrapping.Store(!st.hasLog && !cfg.Join)

	ln := cfg.listener
	if ln == nil {
		if ln, err = net.Listen("tcp", cfg.Listen); err != nil {
			return nil, fmt.Errorf("raftstore: listen on %s: %w", cfg.Listen, err)
		}
	}
	n.mux = newMux(ln, advertisedAddr(cfg.addr()), log, cfg.TLS, newFrameLimits(cfg.MaxEntryBytes), n.whoami)

	if err := n.start(ctx, st); err != nil {
		return nil, errors.Join(err, n.Close())
	}
	return n, nil
}

// start finds or forms the cluster and starts Raft.
func (n *Node) start(ctx context.Context, st dirState) error {
	bootstrap, err := n.findCluster(ctx, st)
	if err != nil {
		return err
	}
	rlog := newRaftLogger(n.log)
	if err := n.openRaftStores(rlog); err != nil {
		return err
	}
	if err := n.startRaft(st, rlog); err != nil {
		return err
	}
	if bootstrap != nil {
		if err := n.raft.BootstrapCluster(*bootstrap).Error(); err != nil {
			return fmt.Errorf("raftstore: bootstrap: %w", err)
		}
		n.log.Info("bootstrapped the cluster", "cluster", n.clusterName(), "servers", len(bootstrap.Servers))
	}
	n.bootstrapping.Store(false)
	n.log.Info("started", "addr", n.cfg.addr(), "cluster", n.clusterName())
	return nil
}

// findCluster checks that a node with Raft state rejoins its cluster, or
// has a fresh node join one or form one with its peers; for a cluster it
// forms, it returns the configuration to bootstrap.
func (n *Node) findCluster(ctx context.Context, st dirState) (*raft.Configuration, error) {
	disc := discovery{cfg: n.cfg, log: n.log}
	switch {
	case st.hasLog:
		return nil, disc.checkRejoin(ctx, st.node.Cluster)
	case n.cfg.Join:
		cluster, err := disc.join(ctx)
		if err != nil {
			return nil, err
		}
		return nil, n.recordCluster(st, cluster)
	}
	conf, cluster, err := disc.bootstrap(ctx)
	if err != nil {
		return nil, err
	}
	if err := n.recordCluster(st, cluster); err != nil {
		return nil, err
	}
	return &conf, nil
}

// openRaftStores opens Raft's log and snapshot stores and its transport.
func (n *Node) openRaftStores(rlog hclog.Logger) error {
	var err error
	n.stable, err = raftboltdb.New(raftboltdb.Options{
		Path: filepath.Join(n.cfg.Dir, logFile),
		// bbolt waits forever for the file lock without a timeout.
		BoltOptions: &bolt.Options{Timeout: time.Second},
	})
	if err != nil {
		return fmt.Errorf("raftstore: open raft stable store: %w", err)
	}
	if err := upgradeLog(n.cfg.Dir, n.stable, n.cfg.NodeID, n.log); err != nil {
		return err
	}
	n.logs, err = raftlog.Open(filepath.Join(n.cfg.Dir, logDir), raftlog.Options{Logger: n.log})
	if err != nil {
		return fmt.Errorf("raftstore: open raft log: %w", err)
	}
	n.snaps, err = raft.NewFileSnapshotStoreWithLogger(n.cfg.Dir, snapshotsRetained, rlog.Named("snapshots"))
	if err != nil {
		return fmt.Errorf("raftstore: open snapshot store: %w", err)
	}
	n.transport = raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  n.mux,
		MaxPool: 3,
		Timeout: 10 * time.Second,
		Logger:  rlog.Named("transport"),
	})
	return nil
}

// startRaft starts Raft on the stores and the transport, with the FSM
// over the local store, and the node's goroutines that follow it.
func (n *Node) startRaft(st dirState, rlog hclog.Logger) error {
	logs, err := raft.NewLogCache(512, n.logs)
	if err != nil {
		return fmt.Errorf("raftstore: %w", err)
	}
	n.fsm = &fsm{
		local:         n.local,
		log:           n.log,
		restoreMarker: filepath.Join(n.cfg.Dir, restoreMarkerFile),
		onFail: func(err error) {
			select {
			case n.failCh <- err:
			default:
			}
		},
	}
	rc := n.cfg.raftConfig()
	rc.NotifyCh = n.notifyCh
	rc.Logger = rlog
	// The local store already holds everything up to the latest snapshot
	// (see the package doc), unless a restore was cut short.
	rc.NoSnapshotRestoreOnStart = !st.restored
	if st.restored {
		n.log.Warn("a snapshot restore was cut short; restoring the latest snapshot again")
	}
	commits := newCommitWatch(n.transport, n.noteCommit)
	n.started = time.Now()
	n.raft, err = raft.NewRaft(rc, n.fsm, logs, n.stable, n.snaps, &leaseTransport{commitWatch: commits, n: n})
	if err != nil {
		return fmt.Errorf("raftstore: start raft: %w", err)
	}
	n.goFunc(func() { commits.watch(n.done) })
	n.goFunc(n.watchRaft)
	return nil
}

// raftConfig is Raft's configuration for c, without the channels and
// logger a running node adds.
func (c Config) raftConfig() *raft.Config {
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(c.NodeID)
	rc.HeartbeatTimeout = c.HeartbeatTimeout
	rc.ElectionTimeout = c.ElectionTimeout
	rc.LeaderLeaseTimeout = c.LeaderLeaseTimeout
	rc.CommitTimeout = c.CommitTimeout
	rc.SnapshotInterval = c.SnapshotInterval
	rc.SnapshotThreshold = c.SnapshotThreshold
	rc.TrailingLogs = c.TrailingLogs
	// The frame guard of the receiving nodes bounds an AppendEntries
	// by this many entries of at most MaxEntryBytes.
	rc.MaxAppendEntries = maxAppendEntries
	return rc
}

// recordCluster writes nodeFile for a fresh node, before its Raft log
// exists, and refuses a Dir that names another cluster.
func (n *Node) recordCluster(st dirState, cluster string) error {
	if st.node != nil && st.node.Cluster != cluster {
		return fmt.Errorf("%w: Dir %s names cluster %s, but the peers form cluster %s", ErrClusterMismatch, n.cfg.Dir, st.node.Cluster, cluster)
	}
	if err := os.MkdirAll(n.cfg.Dir, 0o700); err != nil {
		return fmt.Errorf("raftstore: %w", err)
	}
	if err := writeNodeFile(n.cfg.Dir, nodeRecord{ID: n.cfg.NodeID, Cluster: cluster}); err != nil {
		return err
	}
	n.cluster.Store(&cluster)
	return nil
}

func (n *Node) clusterName() string {
	if c := n.cluster.Load(); c != nil {
		return *c
	}
	return ""
}

// whoami is this node's answer to identify.
func (n *Node) whoami() identity {
	return identity{
		Version:   identifyVersion,
		ID:        n.cfg.NodeID,
		Addr:      n.cfg.addr(),
		Cluster:   n.clusterName(),
		Peers:     sortedPeers(n.cfg.Peers),
		Bootstrap: n.bootstrapping.Load(),
	}
}

// goFunc runs f in a goroutine that Close waits for.
func (n *Node) goFunc(f func()) {
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		f()
	}()
}

// watchRaft follows Raft's leadership changes and the FSM's failure.
func (n *Node) watchRaft() {
	for {
		select {
		case <-n.done:
			return
		case leader := <-n.notifyCh:
			n.setLeader(leader)
		case err := <-n.failCh:
			n.setLeader(false)
			n.log.Error("shutting Raft down: this node cannot apply the log", "err", err)
			if err := n.raft.Shutdown().Error(); err != nil {
				n.log.Error("raft shutdown", "err", err)
			}
		}
	}
}

// setLeader records a leadership change. On gaining it, it starts a
// barrier: the node is ready to serve once everything committed before has
// been applied to the local store.
func (n *Node) setLeader(leader bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.mu.closed || leader == n.mu.leader {
		return
	}
	n.mu.leader = leader
	n.mu.ready = false
	n.mu.epoch++
	epoch := n.mu.epoch
	n.leaderEpoch.Store(epoch)
	n.wakeWatchers()
	if !leader {
		n.lease.revoke()
		n.log.Info("lost leadership")
		return
	}
	// NB: read after Raft told of the leadership, so it is the term this
	// node leads in, or a later one if it lost it again meanwhile; then
	// the false on its way ends the epoch before it is ready.
	n.mu.term = n.raft.CurrentTerm()
	n.log.Info("became leader; applying what was committed before")
	term := n.lease.grant()
	n.goFunc(func() {
		// The barrier both applies what was committed before and proves
		// the leadership: ready implies the lease is held.
		if err := n.proveLeadership(); err != nil {
			n.log.Info("barrier as new leader failed", "err", err)
			return
		}
		if err := n.fsm.err(); err != nil {
			return
		}
		n.mu.Lock()
		defer n.mu.Unlock()
		if n.mu.epoch == epoch && n.mu.leader && !n.mu.closed {
			n.mu.ready = true
			n.wakeWatchers()
			n.log.Info("leader ready", "applied_index", n.raft.AppliedIndex())
			n.goFunc(func() { n.renewLease(term) })
		}
	})
}

// IsLeader reports whether this node is the leader and has applied every
// entry committed before it became leader: the moment WatchLeadership
// reports true.
func (n *Node) IsLeader() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.mu.ready
}

// leadership returns the state watchers follow.
func (n *Node) leadership() (ready bool, epoch uint64, closed bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.mu.ready, n.mu.epoch, n.mu.closed
}

// Store returns the replicated store: reads go to the local store, and a
// batch's Commit replicates it (see batch.Commit). Each call returns a new
// handle; closing it does not stop the node. It is safe for concurrent use.
//
// A handle belongs to the leadership under way when it is opened (see
// IsLeader); Commit through it fails with ErrNotLeader outside that
// leadership: on a handle opened while this node did not lead, and once
// that leadership ends, even while this node leads again. Its holder
// computed what it writes (absolute counts, deletes of what it read as
// pending) from what it read then, and another leader may have changed
// it since. Open a new handle, and read again, in each leadership.
func (n *Node) Store() delaystore.Store {
	s := &store{n: n, gate: gate.New[*iterator](nil)}
	n.mu.Lock()
	if n.mu.ready {
		s.epoch, s.term = n.mu.epoch, n.mu.term
	}
	n.mu.Unlock()
	return s
}

// Status is a node's own view of the cluster.
type Status struct {
	// ID and Addr are this node's.
	ID, Addr string
	// Role is "leader", "follower", "candidate" or "shutdown".
	Role string
	// Cluster names the cluster (a hash of its bootstrap configuration).
	Cluster string
	// LeaderID and LeaderAddr name the leader this node knows of, if any.
	LeaderID, LeaderAddr string
	// Term is the current term. LastLogIndex is the last entry in the
	// log, CommitIndex the last known committed (a follower learns it
	// from the leader's replication, not its heartbeats: 0 after a
	// restart until then, see the package doc), AppliedIndex the last
	// handed, in order, to the local store (Raft's applied index: the FSM
	// may still be applying the last ones), LastSnapshotIndex the last in
	// a snapshot.
	Term, LastLogIndex, CommitIndex, AppliedIndex, LastSnapshotIndex uint64
	// Peers is the current configuration.
	Peers []Peer
	// Err says why the node stopped, if it could not apply the log
	// (ErrApplyFailed); empty otherwise.
	Err string
	// Lag is how far a node that does not lead is behind its leader
	// (see lag.go); zero on the leader.
	Lag Lag
}

// Peer is one member of the configuration.
type Peer struct {
	ID, Addr string
	Voter    bool
}

// Status returns this node's view. It does not block on the network.
func (n *Node) Status() Status {
	s := Status{ID: n.cfg.NodeID, Addr: n.cfg.addr(), Cluster: n.clusterName(), Role: "shutdown"}
	if err := n.fsm.err(); err != nil {
		s.Err = err.Error()
	}
	if n.raft == nil {
		return s
	}
	s.Role = strings.ToLower(n.raft.State().String())
	addr, id := n.raft.LeaderWithID()
	s.LeaderID, s.LeaderAddr = string(id), string(addr)
	s.Term = n.raft.CurrentTerm()
	s.LastLogIndex = n.raft.LastIndex()
	s.CommitIndex = n.raft.CommitIndex()
	s.AppliedIndex = n.raft.AppliedIndex()
	if s.Role != "leader" && s.Role != "shutdown" {
		s.Lag = n.followerLag(s.AppliedIndex, time.Now())
	}
	if metas, err := n.snaps.List(); err == nil && len(metas) > 0 {
		s.LastSnapshotIndex = metas[0].Index
	}
	if f := n.raft.GetConfiguration(); f.Error() == nil {
		for _, srv := range f.Configuration().Servers {
			s.Peers = append(s.Peers, Peer{ID: string(srv.ID), Addr: string(srv.Address), Voter: srv.Suffrage == raft.Voter})
		}
	}
	return s
}

// AddVoter adds the node id at addr to the cluster, as a voter, once it
// has answered with that id and no other cluster. It runs on the leader
// (ErrNotLeader elsewhere) and returns when the change is committed; the
// new node then catches up, from a snapshot if the log no longer reaches
// back to its start. ctx bounds the wait.
func (n *Node) AddVoter(ctx context.Context, id, addr string) error {
	if id == "" || checkHostPort(addr, true) != nil {
		return fmt.Errorf("%w: add voter %q at %q: want a node id and a HOST:PORT", ErrInvalidConfig, id, addr)
	}
	if n.raft.State() != raft.Leader {
		return fmt.Errorf("raftstore: add voter %s: %w", id, n.notLeader(nil))
	}
	timeout := identifyTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(dl))
	}
	who, err := identify(addr, max(timeout, time.Millisecond), n.cfg.TLS)
	if err != nil {
		return fmt.Errorf("raftstore: add voter %s: %s does not answer: %w", id, addr, err)
	}
	if who.ID != id {
		return fmt.Errorf("%w: add voter %s: %s answers with id %q", ErrClusterMismatch, id, addr, who.ID)
	}
	if who.Cluster != "" && who.Cluster != n.clusterName() {
		return fmt.Errorf("%w: add voter %s: %s belongs to cluster %s, this one is %s", ErrClusterMismatch, id, addr, who.Cluster, n.clusterName())
	}
	return n.wait(ctx, "add voter "+id, n.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(addr), 0, 0))
}

// RemoveServer removes the node id from the cluster. It runs on the leader
// (ErrNotLeader elsewhere) and returns when the change is committed. ctx
// bounds the wait.
func (n *Node) RemoveServer(ctx context.Context, id string) error {
	if n.raft.State() != raft.Leader {
		return fmt.Errorf("raftstore: remove server %s: %w", id, n.notLeader(nil))
	}
	return n.wait(ctx, "remove server "+id, n.raft.RemoveServer(raft.ServerID(id), 0, 0))
}

// wait waits for f, ctx or Close. NB: not on a goroutine that Close waits
// for: Raft hands a committed membership change to its FSM loop to
// answer, as it does a barrier, and at Shutdown that loop may end without
// answering it (see await).
func (n *Node) wait(ctx context.Context, op string, f raft.Future) error {
	err := n.awaitCtx(ctx, f)
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		return fmt.Errorf("raftstore: %s: %w", op, err)
	}
	return n.raftError(op, err)
}

// TransferLeadership hands this node's leadership to the most up-to-date
// other voter, before a planned stop, so that the cluster has a leader
// again within a round trip instead of an election timeout. It returns
// the id of the node that leads after it: the new leader (empty if it was
// not heard of before ctx ended), or, when this node did not lead, whoever
// it knows leads (empty if none). A node that
// leads alone (no other voter) keeps its leadership and returns an error.
// ctx bounds the wait. HandOver tells the cases apart.
func (n *Node) TransferLeadership(ctx context.Context) (string, error) {
	h, err := n.HandOver(ctx)
	return h.Leader, err
}

// A Handover is what HandOver did.
type Handover struct {
	// Led is whether this node led when HandOver was called: only then
	// did it hand anything over.
	Led bool
	// Leader is the id of the node that leads after it, as this node
	// knows it: empty when none was heard of (before ctx ended, if it
	// led).
	Leader string
}

// HandOver is TransferLeadership, telling whether this node led: a node
// that lost its leadership before the call hands nothing over, and one
// that gave it up without hearing of a new leader before ctx ended has
// Led set and Leader empty.
func (n *Node) HandOver(ctx context.Context) (Handover, error) {
	if n.raft.State() != raft.Leader {
		_, id := n.raft.LeaderWithID()
		return Handover{Leader: string(id)}, nil
	}
	// The transfer resolves once the target has been told to stand; this
	// node learns who won from the new leader's first message. Observe
	// from before the transfer, so that no change is missed.
	changes := make(chan raft.Observation, 4)
	obs := raft.NewObserver(changes, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.LeaderObservation)
		return ok
	})
	n.raft.RegisterObserver(obs)
	defer n.raft.DeregisterObserver(obs)
	// A transfer lets the target be elected at once, without waiting for
	// this node's lease to run out: end it first.
	n.lease.revoke()
	if err := n.wait(ctx, "transfer leadership", n.raft.LeadershipTransfer()); err != nil {
		n.regainLease()
		return Handover{Led: true}, err
	}
	for {
		if _, id := n.raft.LeaderWithID(); id != "" && string(id) != n.cfg.NodeID {
			return Handover{Led: true, Leader: string(id)}, nil
		}
		select {
		case <-changes:
		case <-ctx.Done():
			// Given up (Raft also answers a transfer during which this
			// node lost its leadership as done), but no winner heard of.
			return Handover{Led: true}, nil
		}
	}
}

// regainLease grants the lease again after a transfer that failed, if
// this node still leads and serves.
func (n *Node) regainLease() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.mu.ready || n.mu.closed {
		return
	}
	term := n.lease.grant()
	n.goFunc(func() { n.renewLease(term) })
}

// snapshotNow takes a snapshot at once; tests use it.
func (n *Node) snapshotNow() error { return n.raft.Snapshot().Error() }

// Close stops Raft, the transport and the log store, in that order, and
// waits for the node's goroutines. It returns in bounded time whatever
// the peers do: it closes the node's connections as Raft stops. Watchers
// that were told true are told false. It does not close the local store. A second
// Close returns the first's error.
func (n *Node) Close() error {
	n.closeOnce.Do(func() {
		var errs []error
		if n.raft != nil {
			shutdown := n.raft.Shutdown()
			// NB: Shutdown waits for Raft's goroutines, and those that
			// talk to a peer wait for its answers, up to the transport's
			// timeout (longer for a snapshot), or for good in a pipeline
			// (see pipeline.go). With the node's connections and
			// pipelines closed, none waits on a peer: a stop ends in
			// bounded time whatever the peers do.
			n.pipes.closeAll()
			n.mux.isolate(true)
			if err := shutdown.Error(); err != nil {
				errs = append(errs, fmt.Errorf("raftstore: shut raft down: %w", err))
			}
		}
		n.lease.revoke()
		n.mu.Lock()
		n.mu.closed = true
		n.mu.leader, n.mu.ready = false, false
		n.mu.epoch++
		watchers := n.mu.watchers
		n.mu.watchers = nil
		n.mu.Unlock()
		// NB: done closes before the watchers stop. A watcher told false
		// stops its service, which waits for the commits under way; a
		// commit waits for its Raft future or done (see await), and Raft,
		// shut down, may never answer the future.
		close(n.done)
		for w := range watchers {
			w.stop()
		}
		n.wg.Wait()
		if n.transport != nil {
			if err := n.transport.Close(); err != nil {
				errs = append(errs, fmt.Errorf("raftstore: close transport: %w", err))
			}
		}
		if err := n.mux.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			errs = append(errs, fmt.Errorf("raftstore: close listener: %w", err))
		}
		if n.logs != nil {
			if err := n.logs.Close(); err != nil {
				errs = append(errs, fmt.Errorf("raftstore: close raft log: %w", err))
			}
		}
		if n.stable != nil {
			if err := n.stable.Close(); err != nil {
				errs = append(errs, fmt.Errorf("raftstore: close raft stable store: %w", err))
			}
		}
		n.closeErr = errors.Join(errs...)
		n.log.Info("closed")
	})
	return n.closeErr
}

// checkLocalEmpty refuses a fresh node whose local store holds data: a
// cluster's stores are built from its Raft log, which would not hold it.
func checkLocalEmpty(local delaystore.Store, dir string) error {
	var first []byte
	err := local.Scan(delaystore.IterOptions{}, func(k, _ []byte) bool {
		first = append([]byte(nil), k...)
		return false
	})
	if err != nil {
		return fmt.Errorf("raftstore: read the local store: %w", err)
	}
	if first == nil {
		return nil
	}
	return fmt.Errorf("%w: Dir %s holds no Raft state, but the local store already holds data (first key %q): "+
		"the other members build their stores from the Raft log and would never have it. "+
		"Start a cluster member on an empty data dir; to keep these messages, run this data dir as a single node",
		ErrLocalNotEmpty, dir, first)
}
