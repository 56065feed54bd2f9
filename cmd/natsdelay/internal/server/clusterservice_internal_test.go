package server

import (
	"testing"

	"github.com/natsdelay/natsdelay/bridge"
	"github.com/natsdelay/natsdelay/delaystore/raftstore"
)

// On a node of a cluster the service's group commit, one Raft log entry,
// holds at most raftstore.MaxGroupCommitBytes of messages, whatever the
// single node's bound; a smaller bound stays.
func TestClusterService_GroupCommitWithinTheLogEntry(t *testing.T) {
	for _, tc := range []struct{ set, want int }{
		{0, raftstore.MaxGroupCommitBytes},
		{bridge.DefaultConfig().MaxBatchBytes, raftstore.MaxGroupCommitBytes},
		{1 << 20, 1 << 20},
	} {
		cfg := bridge.DefaultConfig()
		cfg.MaxBatchBytes = tc.set
		if got := clusterService(cfg).MaxBatchBytes; got != tc.want {
			t.Errorf("MaxBatchBytes %d on a cluster node: %d, want %d", tc.set, got, tc.want)
		}
	}
}
