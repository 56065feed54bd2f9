package client_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// A program that only schedules and consumes links none of the service:
// of the project, the client imports only the wire types it speaks, and
// none of the storage engines, the Raft library, protobuf or the cron
// parser that the server's packages bring.
func TestClient_LinksNoPackageOfTheServer(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	own := []string{"github.com/natsdelay/natsdelay/bridge/client", "github.com/natsdelay/natsdelay/bridge/wire"}
	server := []string{
		"google.golang.org/protobuf", "github.com/robfig/cron", "github.com/cockroachdb/pebble",
		"go.etcd.io/bbolt", "github.com/hashicorp/raft", "github.com/nats-io/nats-server",
	}
	deps := strings.Fields(string(out))
	for _, dep := range deps {
		if (dep == "github.com/natsdelay/natsdelay" || strings.HasPrefix(dep, "github.com/natsdelay/natsdelay/")) && !slices.Contains(own, dep) {
			t.Errorf("bridge/client depends on the project's %s", dep)
		}
		for _, s := range server {
			if dep == s || strings.HasPrefix(dep, s+"/") {
				t.Errorf("bridge/client depends on %s", dep)
			}
		}
	}
	if t.Failed() {
		t.Logf("%d packages in all", len(deps))
	}
}
