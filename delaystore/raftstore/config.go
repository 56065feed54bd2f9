package raftstore

import (
	"cmp"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"time"

	"github.com/hashicorp/raft"
)

// Config configures one node. A zero duration or count means the default
// shown by DefaultConfig.
type Config struct {
	// NodeID names this node in the cluster; it must be unique among the
	// members and stays the node's for good (Dir records it).
	NodeID string

	// Listen is the TCP address the node binds for Raft, HOST:PORT. Unless
	// Advertise is set it is also the address the others reach it at, so
	// an unspecified host (0.0.0.0, ::, empty) needs Advertise.
	Listen string

	// Advertise is the address the other nodes reach this node at, if not
	// Listen.
	Advertise string

	// Peers lists the cluster address of every member, this node's own
	// included (its Advertise, or Listen), as the others reach them. A
	// fresh cluster bootstraps with exactly these members; later, Raft
	// keeps the membership itself and Peers serves only to check, at
	// start, that the peers that answer belong to this node's cluster.
	Peers []string

	// Join makes a fresh node (no state in Dir) join the cluster its peers
	// already form, instead of bootstrapping one: it waits until a peer
	// answers with its cluster, then waits to be added with AddVoter on the
	// leader. Without Join, a fresh node whose peers already belong to a
	// cluster it would not form itself is refused (ErrClusterMismatch).
	Join bool

	// Dir holds the Raft log (log/, see internal/raftlog), the stable
	// store (raft.db, on raft-boltdb), the snapshots, and the file naming
	// this node and its cluster. It is created, mode 0700, if it does not
	// exist.
	Dir string

	// Logger receives the node's logs and Raft's. Nil discards them.
	Logger *slog.Logger

	// MaxEntryBytes bounds one log entry, one Commit's batch encoded: a
	// larger batch is refused. The nodes drop a connection that sends a
	// field larger than this (see frames.go), so it must be the same on
	// every node. Default 128 MiB, twice the service's largest group
	// commit.
	MaxEntryBytes int

	// TLS, if set, makes the cluster port speak mutual TLS: every node
	// presents its certificate and accepts only peers whose certificate
	// the cluster's CA signed (see LoadTLS). Nil: plain TCP, for a
	// cluster on one host or a network nobody else reaches.
	TLS *tls.Config

	// HeartbeatTimeout is how long a follower goes without hearing from the
	// leader before it starts an election.
	HeartbeatTimeout time.Duration
	// ElectionTimeout is how long a candidate waits for an election to end
	// before it starts another.
	ElectionTimeout time.Duration
	// LeaderLeaseTimeout is how long a leader stays leader without hearing
	// from a quorum: an isolated leader steps down, and its Commits fail
	// with ErrNotLeader, within it. It must not exceed HeartbeatTimeout.
	LeaderLeaseTimeout time.Duration
	// CommitTimeout is how long the leader waits, with nothing to send,
	// before it sends a heartbeat carrying the commit index.
	CommitTimeout time.Duration

	// SnapshotInterval is how often Raft checks whether to snapshot;
	// SnapshotThreshold is how many entries since the last snapshot make it
	// do so; TrailingLogs is how many entries it keeps after a snapshot, so
	// that a follower a little behind catches up from the log rather than
	// from a snapshot. The log holds at most about
	// TrailingLogs+SnapshotThreshold entries plus what is written during
	// one SnapshotInterval.
	SnapshotInterval  time.Duration
	SnapshotThreshold uint64
	TrailingLogs      uint64

	// MaxLag bounds how far a node that does not lead may fall behind its
	// leader before Status.Lag says it is behind: an entry the leader
	// committed MaxLag ago still not applied here, or no contact from a
	// leader for MaxLag (see lag.go). The default is 10 s, or three times
	// HeartbeatTimeout plus ElectionTimeout if that is longer, so that an
	// election is never taken for it.
	MaxLag time.Duration

	// listener, when set, is used instead of binding Listen. Tests set it
	// to an ephemeral port bound before the peer list is known.
	listener net.Listener
}

// DefaultConfig returns the defaults: failover within about two seconds on
// a LAN, and a log bounded to some thousands of group commits.
func DefaultConfig() Config {
	return Config{
		HeartbeatTimeout:   1000 * time.Millisecond,
		ElectionTimeout:    1000 * time.Millisecond,
		LeaderLeaseTimeout: 500 * time.Millisecond,
		CommitTimeout:      50 * time.Millisecond,
		// A snapshot writes the whole store, so it is not taken often; the
		// threshold counts group commits, each up to some thousand messages.
		SnapshotInterval:  60 * time.Second,
		SnapshotThreshold: 8192,
		TrailingLogs:      2048,
		// Well above an election, and above the seconds a restarted node
		// takes to catch up from its log.
		MaxLag:        10 * time.Second,
		MaxEntryBytes: 128 << 20,
	}
}

// withDefaults fills the zero fields from DefaultConfig.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	setDur := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	setDur(&c.HeartbeatTimeout, d.HeartbeatTimeout)
	setDur(&c.ElectionTimeout, d.ElectionTimeout)
	setDur(&c.LeaderLeaseTimeout, d.LeaderLeaseTimeout)
	setDur(&c.CommitTimeout, d.CommitTimeout)
	setDur(&c.SnapshotInterval, d.SnapshotInterval)
	c.MaxEntryBytes = cmp.Or(c.MaxEntryBytes, d.MaxEntryBytes)
	if c.MaxLag == 0 {
		// NB: never within a few elections, however long they take.
		c.MaxLag = max(d.MaxLag, 3*(c.HeartbeatTimeout+c.ElectionTimeout))
	}
	c.SnapshotThreshold = cmp.Or(c.SnapshotThreshold, d.SnapshotThreshold)
	c.TrailingLogs = cmp.Or(c.TrailingLogs, d.TrailingLogs)
	c.Peers = slices.Clone(c.Peers)
	return c
}

// addr is the address the others reach this node at.
func (c Config) addr() string {
	if c.Advertise != "" {
		return c.Advertise
	}
	return c.Listen
}

// Validate reports every problem of c at once, in an error wrapping
// ErrInvalidConfig. Zero durations and counts are valid: they mean the
// defaults.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...))
	}
	if c.NodeID == "" {
		bad("NodeID is empty: every node needs a name unique in its cluster")
	} else if len(c.NodeID) > 256 {
		bad("NodeID of %d bytes: at most 256", len(c.NodeID))
	}
	if c.Listen == "" && c.listener == nil {
		bad("Listen is empty: want the HOST:PORT the node binds for Raft")
	} else if c.Listen != "" {
		if err := checkHostPort(c.Listen, false); err != nil {
			bad("Listen %q: %v", c.Listen, err)
		} else if host, _, _ := net.SplitHostPort(c.Listen); c.Advertise == "" && unspecified(host) {
			bad("Listen %q binds every interface: set Advertise to the address the others reach this node at", c.Listen)
		}
	}
	if c.Advertise != "" {
		if err := checkHostPort(c.Advertise, true); err != nil {
			bad("Advertise %q: %v", c.Advertise, err)
		}
	}
	seen := make(map[string]bool, len(c.Peers))
	for _, p := range c.Peers {
		if err := checkHostPort(p, true); err != nil {
			bad("Peers: %q: %v", p, err)
		}
		if seen[p] {
			bad("Peers: %q listed twice", p)
		}
		seen[p] = true
	}
	switch {
	case len(c.Peers) == 0:
		bad("Peers is empty: list every member's cluster address, this node's own included")
	case c.addr() != "" && !seen[c.addr()]:
		bad("Peers %q do not include this node's own address %q (its Advertise, or Listen)", c.Peers, c.addr())
	}
	if c.Dir == "" {
		bad("Dir is empty: want the directory of the Raft log and snapshots")
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"HeartbeatTimeout", c.HeartbeatTimeout},
		{"ElectionTimeout", c.ElectionTimeout},
		{"LeaderLeaseTimeout", c.LeaderLeaseTimeout},
		{"CommitTimeout", c.CommitTimeout},
		{"SnapshotInterval", c.SnapshotInterval},
		{"MaxLag", c.MaxLag},
	} {
		if d.v < 0 {
			bad("%s (%v) must be >= 0", d.name, d.v)
		}
	}
	w := c.withDefaults()
	if w.LeaderLeaseTimeout > w.HeartbeatTimeout {
		bad("LeaderLeaseTimeout (%v) must not exceed HeartbeatTimeout (%v)", w.LeaderLeaseTimeout, w.HeartbeatTimeout)
	}
	if w.ElectionTimeout < w.HeartbeatTimeout {
		bad("ElectionTimeout (%v) must be >= HeartbeatTimeout (%v)", w.ElectionTimeout, w.HeartbeatTimeout)
	}
	if len(errs) == 0 {
		// Raft's own limits, such as timeouts of at least 5ms.
		if err := raft.ValidateConfig(w.raftConfig()); err != nil {
			bad("%v", err)
		}
	}
	return errors.Join(errs...)
}

// checkHostPort checks a HOST:PORT address; advertised ones need a host
// that names one machine and a port.
func checkHostPort(addr string, advertised bool) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("want HOST:PORT: %v", err)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65535 {
		return fmt.Errorf("port %q: want 0 to 65535", port)
	}
	if advertised {
		if unspecified(host) {
			return fmt.Errorf("host %q does not name one machine", host)
		}
		if p == 0 {
			return errors.New("port 0 cannot be reached")
		}
	}
	return nil
}

func unspecified(host string) bool {
	if host == "" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsUnspecified()
}
