package bridge

import (
	"encoding/json"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/test"
	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge/wire"
)

// TestGatherStatus_QuorumAndGrace checks that INFO does not wait its
// whole ClusterStatusWait for a member that is down: once a quorum of the
// members answered, it waits only clusterStatusGrace for the others.
func TestGatherStatus_QuorumAndGrace(t *testing.T) {
	opts := natsserver.DefaultTestOptions
	opts.Port = -1
	srv := natsserver.RunServer(&opts)
	defer srv.Shutdown()
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	const prefix = "$DELAY.API"
	for _, id := range []string{"a", "b"} {
		body, _ := json.Marshal(wire.NodeStatus{ID: id})
		sub, err := nc.Subscribe(prefix+"."+wire.VerbClusterStatus, func(m *nats.Msg) { _ = m.Respond(body) })
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	s := &Service{nc: nc, cfg: Config{APIPrefix: prefix}}
	peers := []wire.ClusterPeer{{ID: "a"}, {ID: "b"}, {ID: "c"}} // c is down
	start := time.Now()
	got := s.gatherStatus(peers, time.Minute)
	if took := time.Since(start); took > 30*time.Second || len(got) != 2 {
		t.Fatalf("gathered %v in %v, want a and b well before the minute's wait", got, took)
	}
}
