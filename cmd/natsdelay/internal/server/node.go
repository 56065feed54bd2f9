package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/natsdelay/natsdelay/bridge"
	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/delaystore/raftstore"
)

// transferTimeout bounds how long a stopping leader waits for another
// node to take its leadership over: the transfer takes a round trip and a
// vote; past a few election timeouts the others would have elected anyway.
func transferTimeout(electionTimeout time.Duration) time.Duration {
	return 3 * electionTimeout
}

// raftDir is where, under the data dir, a node keeps its Raft log,
// snapshots and cluster identity.
const raftDir = "raft"

// openNode starts this node of the cluster as rc says, over its local
// store, which it replicates into: it rejoins with the state in
// rc.Dir, or bootstraps a fresh cluster once every peer answers. ctx
// bounds that wait. A cluster that does not fit this node (two nodes with
// one id, a data dir of another cluster, a bad peer list, a data dir whose
// store holds messages but no Raft state) is an error of the settings: it
// needs another configuration, and starting anyway could split the
// cluster.
func openNode(ctx context.Context, local delaystore.Store, rc raftstore.Config, log *slog.Logger) (*raftstore.Node, error) {
	log.Info("cluster node starting", "node_id", rc.NodeID, "cluster_listen", rc.Listen, "peers", rc.Peers, "tls", rc.TLS != nil)
	n, err := raftstore.Open(ctx, local, rc)
	switch {
	case errors.Is(err, raftstore.ErrInvalidConfig), errors.Is(err, raftstore.ErrClusterMismatch), errors.Is(err, raftstore.ErrLocalNotEmpty):
		return nil, settingsError{fmt.Errorf("cluster node %s: %w", rc.NodeID, err)}
	case err != nil:
		return nil, fmt.Errorf("cluster node %s: %w", rc.NodeID, err)
	}
	return n, nil
}

// advertisingHTTP is a node's Cluster whose status names the node's HTTP
// listener, so that the console of a follower links to the leader's.
type advertisingHTTP struct {
	bridge.Cluster
	url string
}

func (c advertisingHTTP) Status() wire.NodeStatus {
	st := c.Cluster.Status()
	st.HTTP = c.url
	return st
}

// httpURL is the base URL others reach the HTTP listener at addr by,
// empty when it is off: on a listener of every address (0.0.0.0:7070,
// :7070), with the host of the node's cluster address clusterAddr.
func httpURL(addr, clusterAddr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return ""
	}
	if ip, err := netip.ParseAddr(host); host == "" || err == nil && ip.IsUnspecified() {
		if host, _, err = net.SplitHostPort(clusterAddr); err != nil {
			return ""
		}
	}
	return "http://" + net.JoinHostPort(host, port)
}
