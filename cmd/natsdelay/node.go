package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"natsdelay/delaystore"
	"natsdelay/delaystore/raftstore"
)

// transferTimeout bounds how long a stopping leader waits for another
// node to take its leadership over: the transfer takes a round trip and a
// vote; past a few election timeouts the others would have elected anyway.
func transferTimeout(clusterTimeout time.Duration) time.Duration {
	return 3 * clusterTimeout
}

// raftDir is where, under the data dir, a node keeps its Raft log,
// snapshots and cluster identity.
const raftDir = "raft"

// openNode starts this node of the cluster over its local store local,
// which it replicates into: it rejoins with the state in
// <data dir>/raft, or bootstraps a fresh cluster once every peer answers.
// ctx bounds that wait (serve's signals end it). A cluster that does not
// fit this node (two nodes with one id, a data dir of another cluster, a
// bad peer list, a data dir whose store holds messages but no Raft state)
// is a usage error: it needs another configuration, and
// starting anyway could split the cluster.
func (c *serveCmd) openNode(ctx context.Context, dataDir string, local delaystore.Store, log *slog.Logger) (*raftstore.Node, error) {
	rc := raftstore.DefaultConfig()
	rc.NodeID, rc.Listen, rc.Advertise, rc.Peers = c.NodeID, c.ClusterListen, c.ClusterAdvertise, c.ClusterPeers
	rc.Join = c.ClusterJoin
	rc.HeartbeatTimeout, rc.ElectionTimeout, rc.LeaderLeaseTimeout = c.ClusterTimeout, c.ClusterTimeout, c.ClusterTimeout/2
	rc.Dir = filepath.Join(dataDir, raftDir)
	rc.Local, rc.Logger = local, log.With("component", "raft")
	if c.tlsSet() {
		tlsConf, err := raftstore.LoadTLS(c.ClusterTLSCert, c.ClusterTLSKey, c.ClusterTLSCA)
		if err != nil {
			return nil, usageError{fmt.Errorf("cluster node %s: %w", c.NodeID, err)}
		}
		rc.TLS = tlsConf
	}
	log.Info("cluster node starting", "node_id", c.NodeID, "cluster_listen", c.ClusterListen, "peers", c.ClusterPeers, "tls", rc.TLS != nil)
	n, err := raftstore.Open(ctx, rc)
	switch {
	case errors.Is(err, raftstore.ErrInvalidConfig), errors.Is(err, raftstore.ErrClusterMismatch), errors.Is(err, raftstore.ErrLocalNotEmpty):
		return nil, usageError{fmt.Errorf("cluster node %s: %w", c.NodeID, err)}
	case err != nil:
		return nil, fmt.Errorf("cluster node %s: %w", c.NodeID, err)
	}
	return n, nil
}
