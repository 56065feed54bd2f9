package main

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/test"
	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge/wire"
)

// TestClusterStatus_DeadMemberShown checks natsdelay cluster status with a
// member down: it does not wait out --timeout once a quorum answered, and
// the member that did not answer is a row of its own, "no answer", as
// info shows it, rather than left out, and once.
func TestClusterStatus_DeadMemberShown(t *testing.T) {
	opts := natsserver.DefaultTestOptions
	opts.Port = -1
	srv := natsserver.RunServer(&opts)
	defer srv.Shutdown()
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	peers := []wire.ClusterPeer{{ID: "a", Addr: "10.0.0.1:7000", Voter: true}, {ID: "b", Addr: "10.0.0.2:7000", Voter: true}, {ID: "c", Addr: "10.0.0.3:7000", Voter: true}}
	for _, id := range []string{"a", "b"} {
		body, _ := json.Marshal(wire.NodeStatus{ID: id, Role: wire.RoleFollower, LeaderID: "a", Peers: peers})
		sub, err := nc.Subscribe(wire.DefaultAPIPrefix+"."+wire.VerbClusterStatus, func(m *nats.Msg) { _ = m.Respond(body) })
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	cl, err := newAPIClient(nc, wire.DefaultAPIPrefix, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	nodes, missing, err := cl.gatherStatus()
	if took := time.Since(start); err != nil || len(nodes) != 2 || len(missing) != 1 || missing[0].ID != "c" || took > 30*time.Second {
		t.Fatalf("gathered %v, missing %v, %v in %v; want a and b, c missing, well before the minute's timeout", nodes, missing, err, took)
	}
	var b strings.Builder
	if err := writeClusterStatus(&b, nodes, missing); err != nil {
		t.Fatal(err)
	}
	rows := regexp.MustCompile(`(?m)^c\s+10\.0\.0\.3:7000\s+no answer\s`).FindAllString(b.String(), -1)
	if len(rows) != 1 {
		t.Fatalf("cluster status printed\n%s\nwant one row for c, no answer; got %d", b.String(), len(rows))
	}
}
