package bridge

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/delaystore/raftstore"
)

// RaftCluster adapts a raftstore node to Cluster: its status in wire's
// terms, and its ErrNotLeader as a 503.
func RaftCluster(n *raftstore.Node) Cluster { return raftCluster{n} }

type raftCluster struct{ n *raftstore.Node }

func (c raftCluster) WatchLeadership(f func(bool)) func() { return c.n.WatchLeadership(f) }

func (c raftCluster) LeaseCheck() func() bool { return c.n.LeaseCheck() }

func (c raftCluster) AwaitLease(timeout time.Duration) bool { return c.n.AwaitLease(timeout) }

func (c raftCluster) Status() wire.NodeStatus {
	st := c.n.Status()
	ns := wire.NodeStatus{
		ID: st.ID, Addr: st.Addr, Role: st.Role, LeaderID: st.LeaderID, LeaderAddr: st.LeaderAddr,
		Term: st.Term, LastLogIndex: st.LastLogIndex, CommitIndex: st.CommitIndex,
		AppliedIndex: st.AppliedIndex, LastSnapshotIndex: st.LastSnapshotIndex, Err: st.Err,
		LagEntries: st.Lag.Entries, LagSeconds: st.Lag.Age.Seconds(), Behind: st.Lag.Behind,
		Peers: make([]wire.ClusterPeer, len(st.Peers)),
	}
	for i, p := range st.Peers {
		ns.Peers[i] = wire.ClusterPeer{ID: p.ID, Addr: p.Addr, Voter: p.Voter}
	}
	return ns
}

func (c raftCluster) AddVoter(ctx context.Context, id, addr string) error {
	return raftError(c.n.AddVoter(ctx, id, addr))
}

func (c raftCluster) RemoveServer(ctx context.Context, id string) error {
	return raftError(c.n.RemoveServer(ctx, id))
}

func (c raftCluster) StepDown(ctx context.Context) error {
	_, err := c.n.TransferLeadership(ctx)
	return err
}

// raftError makes a membership change refused for want of leadership a
// 503: the client asks again, and reaches the new leader.
func raftError(err error) error {
	if errors.Is(err, raftstore.ErrNotLeader) {
		return fmt.Errorf("%w: %v", wire.ErrUnavailable, err)
	}
	return err
}
