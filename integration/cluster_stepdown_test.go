package integration_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/natsdelay/natsdelay/bridge/wire"
)

// TestCluster_InProcess_LeaderThatCannotServe_StepsDown checks that a node
// that wins the leadership but cannot serve hands it over: here the two
// followers' NATS connections are closed, so that subscribing fails when
// they start to serve, and the leader hands its leadership to one of them.
// Each in turn gives it up (it suspends its core: nothing delivered while
// nothing is answered) until the node that can serve leads again and
// answers. A leader that kept it left the cluster with no one serving.
func TestCluster_InProcess_LeaderThatCannotServe_StepsDown(t *testing.T) {
	srv := startServer(t)
	nodes := startInProcessCluster(t, srv, 3)
	leader := serving(t, nodes)
	broken := map[string]*inProcessNode{}
	for _, n := range nodes {
		if n != leader {
			n.nc.Close()
			broken[n.id] = n
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	to, err := leader.node.TransferLeadership(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if broken[to] == nil {
		t.Fatalf("handed over to %q, want one of the nodes that cannot serve", to)
	}
	checkFor(t, 30*time.Second, 10*time.Millisecond, func() error {
		if !leader.svc.Leader() {
			return fmt.Errorf("%s does not serve; raft leader: %q", leader.id, leader.node.Status().LeaderID)
		}
		return nil
	})
	nc := connect(t, srv)
	if _, err := nc.Request(wire.DefaultAPIPrefix+".INFO", nil, 5*time.Second); err != nil {
		t.Fatalf("INFO once %s serves again: %v", leader.id, err)
	}
	for _, n := range broken {
		if n.svc.Leader() || n.node.Status().Role == "leader" {
			t.Errorf("%s, which cannot serve, still leads", n.id)
		}
		n.kill(t) // its connection is closed: a clean Close cannot drain it
	}
}
