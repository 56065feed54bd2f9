package raftstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// Files in Config.Dir.
const (
	// nodeFile names the node and the cluster whose state Dir holds. It is
	// written, synced, before anything else of the cluster.
	nodeFile = "node.json"
	// logFile is the stable store (Raft's current term and vote), on
	// raft-boltdb. Versions before logDir kept the Raft log in it too.
	logFile = "raft.db"
	// logDir is the Raft log (see internal/raftlog).
	logDir = "log"
	// restoreMarkerFile exists while a snapshot is being restored into the
	// local store (see fsm.Restore).
	restoreMarkerFile = "restore-in-progress"
	// snapshotsRetained is how many snapshots Dir keeps.
	snapshotsRetained = 2
)

const (
	// identifyTimeout bounds one identify exchange.
	identifyTimeout = 2 * time.Second
	// peerRetry is how long a fresh node waits between rounds of asking its
	// peers who they are.
	peerRetry = 250 * time.Millisecond
	// rejoinCheckTimeout bounds how long a restarting node asks its peers
	// who they are before it starts: it checks those that answer, and does
	// not wait for the others (they may be down).
	rejoinCheckTimeout = 2 * time.Second
)

// nodeRecord names the node and its cluster.
type nodeRecord struct {
	ID      string `json:"id"`
	Cluster string `json:"cluster"`
}

// nodeFileContent is the content of nodeFile: the node record under
// "node", after a note. Versions before logDir wrote the record at the
// top level, read only that, and refuse a file without it, quoting the
// file: the note is what they show (see TestUpgrade and docs/cluster.md).
type nodeFileContent struct {
	Note string      `json:"note"`
	Node *nodeRecord `json:"node"`
	// ID and Cluster are a record of a version before logDir.
	ID      string `json:"id,omitempty"`
	Cluster string `json:"cluster,omitempty"`
}

// nodeFileNote says why an earlier version refuses the node directory.
const nodeFileNote = "written by a newer natsdelay, whose Raft log is in log/: run that version or a later one"

// dirState is what Open finds in Dir.
type dirState struct {
	node     *nodeRecord // nil if none
	hasLog   bool
	restored bool // a snapshot restore was cut short
}

func readDirState(dir string) (dirState, error) {
	var st dirState
	b, err := os.ReadFile(filepath.Join(dir, nodeFile))
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return st, fmt.Errorf("raftstore: read %s: %w", nodeFile, err)
	default:
		var c nodeFileContent
		err := json.Unmarshal(b, &c)
		st.node = c.Node
		if st.node == nil {
			st.node = &nodeRecord{ID: c.ID, Cluster: c.Cluster}
		}
		if err != nil || st.node.ID == "" || st.node.Cluster == "" {
			return st, fmt.Errorf("raftstore: %s in %s is not a node record: %q", nodeFile, dir, b)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, logFile)); err == nil {
		st.hasLog = true
	} else if !errors.Is(err, os.ErrNotExist) {
		return st, fmt.Errorf("raftstore: %w", err)
	}
	if _, err := os.Stat(filepath.Join(dir, restoreMarkerFile)); err == nil {
		st.restored = true
	}
	if st.hasLog && st.node == nil {
		return st, fmt.Errorf("%w: %s holds a Raft log but no %s: not a natsdelay cluster directory, or damaged", ErrClusterMismatch, dir, nodeFile)
	}
	return st, nil
}

// writeFileSync writes path whole and syncs it and its directory, so that
// the file is there after a crash.
func writeFileSync(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return syncDir(filepath.Dir(path))
}

// syncDir syncs dir, making the creation, removal or renaming of a file in
// it durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// clusterID names the cluster a bootstrap configuration forms: a hash of
// its members, so that every node bootstrapping with the same members
// computes the same name, and a node of another cluster is told apart.
func clusterID(servers []raft.Server) string {
	h := sha256.New()
	for _, s := range servers {
		fmt.Fprintf(h, "%s\x00%s\n", s.ID, s.Address)
	}
	return hex.EncodeToString(h.Sum(nil)[:12])
}

// discovery asks the peers who they are.
type discovery struct {
	cfg Config
	log *slog.Logger
}

// answers identifies every peer but this node once, in parallel, and
// returns those that answered, by address, and the errors of the others.
func (d discovery) answers(timeout time.Duration, skip map[string]identity) (map[string]identity, map[string]error) {
	var mu sync.Mutex
	got := make(map[string]identity)
	failed := make(map[string]error)
	var wg sync.WaitGroup
	for _, addr := range d.cfg.Peers {
		if addr == d.cfg.addr() {
			continue
		}
		if _, ok := skip[addr]; ok {
			continue
		}
		wg.Go(func() {
			id, err := identify(addr, timeout, d.cfg.TLS)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed[addr] = err
			} else {
				got[addr] = id
			}
		})
	}
	wg.Wait()
	return got, failed
}

// checkIDs refuses two peers with one id, and a peer with this node's id.
func (d discovery) checkIDs(peers map[string]identity) error {
	byID := map[string]string{d.cfg.NodeID: d.cfg.addr()}
	for _, addr := range sortedKeys(peers) {
		id := peers[addr].ID
		if other, ok := byID[id]; ok {
			return fmt.Errorf("%w: node id %q is used by both %s and %s; every node needs its own node id (--node-id)", ErrClusterMismatch, id, other, addr)
		}
		byID[id] = addr
	}
	return nil
}

// bootstrap waits until every peer has answered, checks that they all
// mean to form the same cluster, and returns its configuration and name.
func (d discovery) bootstrap(ctx context.Context) (raft.Configuration, string, error) {
	peers := make(map[string]identity)
	for {
		got, failed := d.answers(identifyTimeout, peers)
		for addr, id := range got {
			peers[addr] = id
		}
		if err := d.checkIDs(peers); err != nil {
			return raft.Configuration{}, "", err
		}
		if len(failed) == 0 {
			break
		}
		d.log.Info("waiting for every peer to answer before bootstrapping the cluster", "waiting_for", sortedKeys(failed), "answered", len(peers))
		if err := sleepCtx(ctx, peerRetry); err != nil {
			return raft.Configuration{}, "", fmt.Errorf("raftstore: bootstrap: peers %s did not answer (last error: %v): %w",
				strings.Join(sortedKeys(failed), ", "), firstErr(failed), err)
		}
	}

	var conf raft.Configuration
	conf.Servers = append(conf.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(d.cfg.NodeID), Address: raft.ServerAddress(d.cfg.addr())})
	for addr, id := range peers {
		conf.Servers = append(conf.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(id.ID), Address: raft.ServerAddress(addr)})
	}
	slices.SortFunc(conf.Servers, func(a, b raft.Server) int { return strings.Compare(string(a.Address), string(b.Address)) })
	cluster := clusterID(conf.Servers)

	ours := sortedPeers(d.cfg.Peers)
	for _, addr := range sortedKeys(peers) {
		id := peers[addr]
		switch {
		case id.Cluster != "" && id.Cluster != cluster:
			return conf, "", fmt.Errorf("%w: peer %s (%s) belongs to cluster %s, not to the cluster %s these peers form; to add this node to it, start it with Join and add it on the leader",
				ErrClusterMismatch, addr, id.ID, id.Cluster, cluster)
		case id.Cluster == "" && !id.Bootstrap:
			return conf, "", fmt.Errorf("%w: peer %s (%s) is waiting to join an existing cluster, not to bootstrap one", ErrClusterMismatch, addr, id.ID)
		case id.Cluster == "" && !slices.Equal(id.Peers, ours):
			return conf, "", fmt.Errorf("%w: peer %s (%s) was started with peers %q, this node with %q; a fresh cluster needs one list on every node",
				ErrClusterMismatch, addr, id.ID, id.Peers, ours)
		}
	}
	return conf, cluster, nil
}

// join waits until a peer answers with the cluster it belongs to, and
// returns that cluster's name.
func (d discovery) join(ctx context.Context) (string, error) {
	for {
		got, failed := d.answers(identifyTimeout, nil)
		if err := d.checkIDs(got); err != nil {
			return "", err
		}
		clusters := make(map[string][]string)
		for addr, id := range got {
			if id.Cluster != "" {
				clusters[id.Cluster] = append(clusters[id.Cluster], addr)
			}
		}
		switch len(clusters) {
		case 1:
			for c := range clusters {
				return c, nil
			}
		case 0:
		default:
			return "", fmt.Errorf("%w: the peers belong to different clusters: %v", ErrClusterMismatch, clusters)
		}
		d.log.Info("waiting for a peer of the cluster to join to answer", "not_answering", sortedKeys(failed), "answered_without_cluster", sortedKeys(got))
		if err := sleepCtx(ctx, peerRetry); err != nil {
			return "", fmt.Errorf("raftstore: join: no peer answered with its cluster: %w", err)
		}
	}
}

// checkRejoin asks the peers who they are, for a short while, and refuses
// to start if one that answers belongs to another cluster or claims this
// node's id. Peers that do not answer are not waited for: a restart must
// not need the others up.
func (d discovery) checkRejoin(ctx context.Context, cluster string) error {
	timeout := rejoinCheckTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(dl))
	}
	got, _ := d.answers(max(timeout, time.Millisecond), nil)
	if err := d.checkIDs(got); err != nil {
		return err
	}
	for _, addr := range sortedKeys(got) {
		if id := got[addr]; id.Cluster != "" && id.Cluster != cluster {
			return fmt.Errorf("%w: Dir %s holds the state of cluster %s, but peer %s (%s) belongs to cluster %s",
				ErrClusterMismatch, d.cfg.Dir, cluster, addr, id.ID, id.Cluster)
		}
	}
	return nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func sortedPeers(peers []string) []string {
	s := slices.Clone(peers)
	slices.Sort(s)
	return s
}

func firstErr(m map[string]error) error {
	for _, k := range sortedKeys(m) {
		return m[k]
	}
	return nil
}
