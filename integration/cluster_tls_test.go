package integration_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/natsdelay/natsdelay/bridge/wire"
)

// TestClusterProcess_TLS_CertsFromTheCommand makes a CA and a certificate
// per node with natsdelay cluster certs, runs three serve processes with
// mutual TLS on their cluster ports, and checks that they form one cluster
// that schedules and delivers. It checks too that a node whose cluster
// port binds every interface refuses to start without TLS (exit code 2,
// saying why), and starts with --cluster-insecure.
func TestClusterProcess_TLS_CertsFromTheCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := natsdelayBinary(t)
	srv := startServer(t)
	c := newProcessCluster(t, bin, srv.ClientURL(), 3, nil)
	certs := t.TempDir()
	args := []string{"cluster", "certs", "--dir", certs, "--hosts", "127.0.0.1"}
	for _, n := range c.nodes {
		args = append(args, n.id)
	}
	if code, out := runCLI(t, bin, args...); code != 0 {
		t.Fatalf("cluster certs: exit %d:\n%s", code, out)
	}
	for _, n := range c.nodes {
		n.flags = []string{"--cluster-tls-cert", filepath.Join(certs, n.id+".pem"),
			"--cluster-tls-key", filepath.Join(certs, n.id+"-key.pem"), "--cluster-tls-ca", filepath.Join(certs, "ca.pem")}
	}
	c.startAll()
	for _, n := range c.nodes {
		if !strings.Contains(n.proc.output(), "tls=true") {
			t.Fatalf("%s did not start with TLS:\n%s", n.id, n.proc.output())
		}
	}
	nc := connect(t, srv)
	leader := c.waitLeader(nc, "")
	deliveries := subscribe(t, nc, "tls.cluster")
	s := schedule(t, nc, newMsg("tls.cluster", "over TLS", "Delay", "100ms"))
	d := next(t, deliveries, "the delivery")
	if d.Header.Get(wire.HeaderTag) != s.Tag {
		t.Fatalf("delivered %s, want %s", d.Header.Get(wire.HeaderTag), s.Tag)
	}
	// A new leader opens its store as a matter of course: that is no
	// recovery from a fault, and its log says so.
	if out := c.node(leader).proc.output(); strings.Contains(out, "storage recovered") || !strings.Contains(out, "resumed on the store") {
		t.Fatalf("the leader's log calls its start a recovery, or does not say it resumed:\n%s", out)
	}
	sts := gatherStatus(nc, time.Second, 3)
	for _, n := range c.nodes {
		if st, ok := sts[n.id]; !ok || st.LeaderID != leader {
			t.Fatalf("%s: answered %v, leader %q, want %s", n.id, ok, st.LeaderID, leader)
		}
	}

	// Bound to every interface, without TLS: refused before it starts.
	addr := freeAddrs(t, 1)[0]
	port := addr[strings.LastIndex(addr, ":")+1:]
	open := []string{"serve", "--nats", srv.ClientURL(), "--data-dir", t.TempDir(), "--node-id", "open",
		"--cluster-listen", "0.0.0.0:" + port, "--cluster-advertise", addr, "--cluster-peers", addr}
	code, out := runToExit(t, bin, open...)
	if code != 2 || !strings.Contains(out, "cluster address 0.0.0.0:"+port+" is not a loopback address") {
		t.Fatalf("without TLS on every interface: exit %d, want 2 saying why:\n%s", code, lastLine(out))
	}
	p := launch(t, bin, []string{"NATSDELAY_HTTP="}, append(open, "--cluster-insecure")...)
	p.stop(t)
	t.Logf("three TLS nodes, leader %s; a node on every interface refused without TLS: %s", leader, lastLine(out))
}
