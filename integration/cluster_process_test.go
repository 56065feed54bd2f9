package integration_test

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge/wire"
)

// clusterTimeout is the --cluster-timeout of the test clusters: short, so
// that a failover takes about a second, yet long enough that busy race
// builds on two cores do not keep electing.
const clusterTimeout = "500ms"

// clusterChild is one node of a cluster of child processes.
type clusterChild struct {
	id     string
	dir    string
	listen string // --cluster-listen
	addr   string // the address the others reach it at: listen, or a proxy
	proc   *serviceProcess
	// natsArgs replace --nats URL, for a node that embeds its server.
	natsArgs []string
	// flags are more serve flags for this node alone.
	flags []string
	// env is more environment for this node alone.
	env []string
}

// processCluster is a cluster of natsdelay serve child processes over one
// NATS server.
type processCluster struct {
	t     *testing.T
	bin   string
	url   string
	nodes []*clusterChild
	extra []string // more serve flags for every node
	// killed are the nodes killKeepingLog killed, whose logs a failed
	// test prints with the others'.
	killed []*clusterChild
}

// handedOut holds the ports freeAddrs gave out in this test run: a port
// closed after the check is free for the kernel to give out again, and two
// nodes (or a node's Raft port and a nats-server's route port) must not
// get the same one.
var handedOut struct {
	sync.Mutex
	ports map[int]bool
}

// freeAddrs returns n loopback addresses with ports free now, none of them
// handed out before in this run.
func freeAddrs(t *testing.T, n int) []string {
	t.Helper()
	handedOut.Lock()
	defer handedOut.Unlock()
	if handedOut.ports == nil {
		handedOut.ports = map[int]bool{}
	}
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			_ = ln.Close()
		}
	}()
	var out []string
	for len(out) < n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		// NB: kept open until the end, so this call cannot get it twice.
		lns = append(lns, ln)
		port := ln.Addr().(*net.TCPAddr).Port
		if handedOut.ports[port] {
			continue
		}
		handedOut.ports[port] = true
		out = append(out, ln.Addr().String())
	}
	return out
}

// newProcessCluster lays out n nodes; addrs, if not nil, are the
// addresses the nodes reach each other at (proxies), else their listen
// addresses. Nothing runs until start.
func newProcessCluster(t *testing.T, bin, url string, n int, addrs []string) *processCluster {
	t.Helper()
	c := &processCluster{t: t, bin: bin, url: url}
	listens := freeAddrs(t, n)
	for i := range n {
		node := &clusterChild{id: fmt.Sprintf("node%c", 'a'+i), dir: t.TempDir(), listen: listens[i], addr: listens[i]}
		if addrs != nil {
			node.addr = addrs[i]
		}
		c.nodes = append(c.nodes, node)
	}
	t.Cleanup(func() {
		for _, node := range c.nodes {
			if node.proc != nil {
				node.proc.kill(t)
				if t.Failed() {
					t.Logf("the log of %s, to its end:\n%s", node.id, lastLines(node.proc.output(), 60))
				}
			}
		}
		if t.Failed() {
			for _, node := range c.killed {
				t.Logf("the log of %s, killed, to its end:\n%s", node.id, lastLines(node.proc.output(), 60))
			}
		}
	})
	return c
}

// killKeepingLog kills n with SIGKILL and keeps its log, which a failed
// test prints. n.proc is nil after, as for a node not running.
func (c *processCluster) killKeepingLog(n *clusterChild) {
	n.proc.kill(c.t)
	c.killed = append(c.killed, &clusterChild{id: n.id, proc: n.proc})
	n.proc = nil
}

// natsdelayConns counts the connections srv holds open for natsdelay
// serve processes: each has one, named "natsdelay" (a console's, with
// the HTTP server on, is named otherwise).
func natsdelayConns(t *testing.T, srv *server.Server) int {
	t.Helper()
	cz, err := srv.Connz(&server.ConnzOptions{Limit: 1 << 16})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, c := range cz.Conns {
		if c.Name == "natsdelay" {
			n++
		}
	}
	return n
}

// waitKilledClosed waits until srv holds open at most want connections of
// natsdelay's, one for each process still running, and returns how
// many it held at its first look. The kernel closes the connections of a
// process killed with SIGKILL, but the server notices in its own time:
// until it reads the end of a connection, it still hands that
// connection's queue subscriptions their share of the requests (a fleet's
// ingest is one queue group over every node of every cell), and a
// request handed to a process that is gone is answered by nobody. That
// is NATS's at-most-once delivery, not a silence of the service: a
// publisher times out and sends again, as after any crash.
func waitKilledClosed(t *testing.T, srv *server.Server, want int) int {
	t.Helper()
	first := -1
	checkFor(t, 30*time.Second, 2*time.Millisecond, func() error {
		n := natsdelayConns(t, srv)
		if first < 0 {
			first = n
		}
		if n > want {
			return fmt.Errorf("%d connections of natsdelay open after the kill, want %d", n, want)
		}
		return nil
	})
	return first
}

func (c *processCluster) peers() string {
	var ps []string
	for _, n := range c.nodes {
		ps = append(ps, n.addr)
	}
	return strings.Join(ps, ",")
}

func (c *processCluster) args(n *clusterChild) []string {
	natsFlags := []string{"--nats", c.url}
	if n.natsArgs != nil {
		natsFlags = n.natsArgs
	}
	args := append([]string{"serve"}, natsFlags...)
	args = append(args, "--data-dir", n.dir, "--engine", "pebble", "--ack-wait", "1s",
		"--cluster-listen", n.listen, "--cluster-peers", c.peers(), "--node-id", n.id, "--cluster-timeout", clusterTimeout)
	if n.addr != n.listen {
		args = append(args, "--cluster-advertise", n.addr)
	}
	args = append(args, n.flags...)
	return append(args, c.extra...)
}

// startAll starts every node at once (a fresh cluster bootstraps only once
// every peer answers) and waits until each is ready.
func (c *processCluster) startAll() {
	for _, n := range c.nodes {
		n.proc = spawn(c.t, c.bin, append([]string{"NATSDELAY_HTTP="}, n.env...), c.args(n)...)
	}
	for _, n := range c.nodes {
		n.proc.waitReady(c.t)
	}
}

// restart starts n again on its data dir and waits until it is ready.
func (c *processCluster) restart(n *clusterChild) {
	n.proc = launch(c.t, c.bin, append([]string{"NATSDELAY_HTTP="}, n.env...), c.args(n)...)
}

func (c *processCluster) node(id string) *clusterChild {
	for _, n := range c.nodes {
		if n.id == id {
			return n
		}
	}
	return nil
}

// gatherStatus asks every node for its status over NATS, as natsdelay
// cluster status does, and returns the answers that came within wait.
func gatherStatus(nc *nats.Conn, wait time.Duration, want int) map[string]wire.NodeStatus {
	return gatherStatusAt(nc, wire.DefaultAPIPrefix, wait, want)
}

// gatherStatusAt is gatherStatus on the API prefix api: a cell's own, for
// a cell of a fleet.
func gatherStatusAt(nc *nats.Conn, api string, wait time.Duration, want int) map[string]wire.NodeStatus {
	got := map[string]wire.NodeStatus{}
	inbox := nc.NewInbox()
	ch := make(chan *nats.Msg, 16)
	sub, err := nc.ChanSubscribe(inbox, ch)
	if err != nil {
		return got
	}
	defer sub.Unsubscribe()
	if err := nc.PublishRequest(api+"."+wire.VerbClusterStatus, inbox, nil); err != nil {
		return got
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for len(got) < want {
		select {
		case m := <-ch:
			var st wire.NodeStatus
			if json.Unmarshal(m.Data, &st) == nil && st.ID != "" {
				got[st.ID] = st
			}
		case <-timer.C:
			return got
		}
	}
	return got
}

// waitLeader waits until the nodes that answer agree on one leader other
// than not (if set), among at least quorum answers, and that leader
// answers INFO; it returns the leader's id.
func (c *processCluster) waitLeader(nc *nats.Conn, not string) string {
	c.t.Helper()
	var leader string
	checkFor(c.t, 60*time.Second, 20*time.Millisecond, func() error {
		sts := gatherStatus(nc, 300*time.Millisecond, len(c.nodes))
		leaders := map[string]bool{}
		for _, st := range sts {
			if st.Role == wire.RoleLeader {
				leaders[st.ID] = true
			}
		}
		if len(leaders) != 1 || len(sts) < len(c.nodes)/2+1 {
			return fmt.Errorf("%d nodes answered, leaders %v", len(sts), leaders)
		}
		for id := range leaders {
			leader = id
		}
		if leader == not {
			return fmt.Errorf("%s still leads", not)
		}
		if _, err := pendingCount(nc); err != nil {
			return fmt.Errorf("leader %s does not answer INFO yet: %v", leader, err)
		}
		return nil
	})
	return leader
}

// clusterKills is how many times the process cluster test kills the
// leader: 6 in make test, 100 in make soak.
func clusterKills() int {
	if os.Getenv("NATSDELAY_SOAK") != "" {
		return 100
	}
	return 6
}

// TestClusterProcess_KillLeader_NothingAcknowledgedLost runs three real
// natsdelay serve processes as a cluster over one NATS server and
// SIGKILLs the leader again and again while publishers schedule and a
// consumer ACKs, NAKs or ignores deliveries; the killed node is restarted
// on its data dir each time and rejoins. It checks the guarantees of a
// cluster: every message whose ingest was acknowledged is delivered (a
// quorum had it, and the new leader delivers it), none before its fire
// time, no event ID is ever given to two messages (the new leader's IDs
// come after every ID committed), and nothing stays pending once all is
// ACKed.
func TestClusterProcess_KillLeader_NothingAcknowledgedLost(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := natsdelayBinary(t)
	start := time.Now()
	srv := startServer(t)
	c := newProcessCluster(t, bin, srv.ClientURL(), 3, nil)
	c.startAll()

	const subject, perRound = "clusterkill", 40
	l := newCrashLoop()
	traffic := startCrashTraffic(t, srv, l, subject, 7, perRound)
	consumer := traffic.consumer
	leader := c.waitLeader(consumer, "")
	l.setUp()

	r := rand.New(rand.NewPCG(7, 99))
	kills := clusterKills()
	var failovers []time.Duration
	for round := range kills {
		traffic.feed(ingestToken{}, perRound)
		// Kill while requests wait for their quorum and deliveries go out.
		waitGrowth(t, "ingest replies", &l.replies, perRound/4)
		time.Sleep(time.Duration(r.IntN(30)) * time.Millisecond)
		// Whichever leads now: an election of its own under load may have
		// moved the leadership since.
		if st := gatherStatus(consumer, 300*time.Millisecond, len(c.nodes))[leader]; st.Role != wire.RoleLeader {
			leader = c.waitLeader(consumer, "")
		}
		victim := c.node(leader)
		l.setDown()
		killed := time.Now()
		victim.proc.kill(t)
		victim.proc = nil
		leader = c.waitLeader(consumer, victim.id)
		failovers = append(failovers, time.Since(killed))
		l.setUp()
		c.restart(victim)
		t.Logf("round %d: killed leader %s after %d acknowledged (%d requests failed), %d delivered; %s leads",
			round+1, victim.id, l.replies.Load(), l.failed.Load(), l.recv.Load(), leader)
	}
	traffic.feed(ingestToken{}, perRound)
	waitGrowth(t, "ingest replies after the last kill", &l.replies, perRound/4)
	traffic.stopPublishers()
	l.settle(t, consumer)
	for _, n := range c.nodes {
		n.proc.stop(t)
		n.proc = nil
	}
	lost, deliveries, redeliveries := l.verify(t)
	l.mu.Lock()
	defer l.mu.Unlock()
	t.Logf("ingest requests that failed, by error: %v", l.reqErrs)
	t.Logf("leader kills survived: %d, acknowledged messages checked: %d, messages delivered: %d, deliveries: %d, "+
		"redeliveries: %d, NAKs: %d, unanswered: %d, ACKs: %d, lost: %d, failovers (kill to a serving leader seen) %v, in %v",
		kills, len(l.acked), len(l.deliveries), deliveries, redeliveries, l.naks.Load(), l.ignores.Load(), l.acks.Load(), lost,
		failovers, time.Since(start).Round(time.Millisecond))
}

// TestClusterProcess_BadCluster_RefusedAtStart checks that a node whose
// configuration cannot make one cluster with its peers stops at start
// with a usage error (exit code 2) that says why, rather than start a
// second cluster beside the first: a node whose id another node has, a
// node started on the data dir of another cluster, and a node started on
// a single node's data dir, whose messages the others would never have
// (that data dir stays a single node's, its message kept).
func TestClusterProcess_BadCluster_RefusedAtStart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := natsdelayBinary(t)
	srv := startServer(t)
	c := newProcessCluster(t, bin, srv.ClientURL(), 3, nil)
	c.startAll()
	nc := connect(t, srv)
	c.waitLeader(nc, "")

	t.Run("duplicate id", func(t *testing.T) {
		// A fourth node that calls itself nodea, listing the cluster's
		// members: nodea answers with the same id.
		dup := &clusterChild{id: "nodea", dir: t.TempDir(), listen: freeAddrs(t, 1)[0]}
		dup.addr = dup.listen
		peers := c.peers() + "," + dup.addr
		args := []string{"serve", "--nats", c.url, "--data-dir", dup.dir, "--engine", "pebble",
			"--cluster-listen", dup.listen, "--cluster-peers", peers, "--node-id", dup.id, "--cluster-timeout", clusterTimeout}
		code, out := runToExit(t, bin, args...)
		if code != 2 || !strings.Contains(out, `"nodea"`) {
			t.Fatalf("exit %d, want 2 naming the duplicate id:\n%s", code, out)
		}
		t.Logf("refused: %s", lastLine(out))
	})
	t.Run("data dir of another cluster", func(t *testing.T) {
		// A one-node cluster of its own, stopped; its data dir then given
		// to a node that lists the first cluster's members as its peers.
		self, dir := freeAddrs(t, 1)[0], t.TempDir()
		base := []string{"serve", "--nats", c.url, "--data-dir", dir, "--engine", "pebble",
			"--cluster-listen", self, "--node-id", "noded", "--cluster-timeout", clusterTimeout}
		other := launch(t, bin, []string{"NATSDELAY_HTTP="}, append(base, "--cluster-peers", self)...)
		other.stop(t)
		code, out := runToExit(t, bin, append(base, "--cluster-peers", c.peers()+","+self)...)
		if code != 2 || !strings.Contains(out, "belongs to cluster") {
			t.Fatalf("exit %d, want 2 saying the peers belong to another cluster:\n%s", code, out)
		}
	})
	t.Run("single node's data dir", func(t *testing.T) {
		// A single node, on its own embedded server, takes a message and
		// stops; its data dir is then given to a cluster member. The
		// others would never have that message: refused, and the data dir
		// keeps it for a single node.
		natsAddr, self, dir := freeAddrs(t, 1)[0], freeAddrs(t, 1)[0], t.TempDir()
		single := launch(t, bin, []string{"NATSDELAY_HTTP="}, "serve", "--nats-listen", natsAddr, "--data-dir", dir, "--engine", "pebble")
		if code, out := runCLI(t, bin, "pub", "--nats", "nats://"+natsAddr, "single.kept", "x", "--delay", "1h"); code != 0 {
			t.Fatalf("pub to the single node: exit %d:\n%s", code, out)
		}
		single.stop(t)
		args := []string{"serve", "--nats", c.url, "--data-dir", dir, "--engine", "pebble",
			"--cluster-listen", self, "--cluster-peers", c.peers() + "," + self, "--node-id", "noded", "--cluster-timeout", clusterTimeout}
		code, out := runToExit(t, bin, args...)
		if code != 2 || !strings.Contains(out, "already holds data") {
			t.Fatalf("exit %d, want 2 saying the store already holds data:\n%s", code, out)
		}
		t.Logf("refused: %s", lastLine(out))
		// Still a single node's data dir, with its message.
		single = launch(t, bin, []string{"NATSDELAY_HTTP="}, "serve", "--nats-listen", natsAddr, "--data-dir", dir, "--engine", "pebble")
		snc, err := nats.Connect("nats://" + natsAddr)
		if err != nil {
			t.Fatal(err)
		}
		defer snc.Close()
		if p, err := pendingCount(snc); err != nil || p != 1 {
			t.Fatalf("single node after the refusal: pending %d, %v; want 1", p, err)
		}
		single.stop(t)
	})
	// The cluster is still one: one leader that every member follows.
	c.waitLeader(nc, "")
	for _, n := range c.nodes {
		n.proc.stop(t)
		n.proc = nil
	}
}

// runToExit runs the binary to its end and returns its exit code and
// output; a minute at most.
func runToExit(t *testing.T, bin string, args ...string) (int, string) {
	t.Helper()
	p := spawn(t, bin, []string{"NATSDELAY_HTTP="}, args...)
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		p.kill(t)
		t.Fatalf("natsdelay %s did not exit:\n%s", strings.Join(args, " "), p.output())
	}
	err := p.cmd.Wait()
	code := 0
	if err != nil {
		if ee, ok := err.(interface{ ExitCode() int }); ok {
			code = ee.ExitCode()
		} else {
			t.Fatal(err)
		}
	}
	return code, p.output()
}

// lastLine is the last non-empty line of out: the error a failed run
// printed.
func lastLine(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return lines[len(lines)-1]
}

// TestClusterProcess_PartitionLeader_StepsDownAndRejoins runs three serve
// processes whose Raft traffic goes through proxies, and cuts the leader
// off from the other two while publishers schedule and a consumer ACKs;
// the leader's NATS connection stays up. It checks that the old leader
// stops serving (it reports itself no longer leader: its lease ran out
// without a quorum), that a new leader takes over and takes ingest, that
// nothing acknowledged is lost, none is delivered early, no event ID is
// used twice, and that once the partition heals the old leader rejoins as
// a follower of the new one and applies everything committed meanwhile.
// Its nodes are serve processes, not the in-process nodes of cluster_test.go,
// so that the partition cuts the Raft transport and leadership lease as
// serve assembles them (cmd/natsdelay's server package, which this package
// cannot import).
func TestClusterProcess_PartitionLeader_StepsDownAndRejoins(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := natsdelayBinary(t)
	srv := startServer(t)
	c := newProcessCluster(t, bin, srv.ClientURL(), 3, nil)
	part := newPartition(t, []string{"nodea", "nodeb", "nodec"})
	for _, n := range c.nodes {
		n.addr = part.proxy(t, n.id, n.listen)
	}
	c.startAll()

	const subject, perRound = "partition", 60
	l := newCrashLoop()
	traffic := startCrashTraffic(t, srv, l, subject, 13, perRound)
	consumer := traffic.consumer
	old := c.waitLeader(consumer, "")
	l.setUp()

	traffic.feed(ingestToken{}, perRound)
	waitGrowth(t, "ingest replies", &l.replies, perRound/4)
	cutAt := time.Now()
	part.cut(old)
	// The old leader, cut off from any quorum, steps down by itself: its
	// lease runs out. It still answers its status over NATS.
	checkFor(t, time.Minute, 10*time.Millisecond, func() error {
		st, ok := gatherStatus(consumer, 300*time.Millisecond, 3)[old]
		if !ok || st.Role == wire.RoleLeader {
			return fmt.Errorf("%s answered %v, role %q", old, ok, st.Role)
		}
		return nil
	})
	steppedDown := time.Since(cutAt)
	leader := c.waitLeader(consumer, old)
	tookOver := time.Since(cutAt)
	traffic.feed(ingestToken{}, perRound)
	waitGrowth(t, "ingest replies", &l.replies, perRound/4)

	part.heal()
	// The old leader rejoins: it follows whichever node leads now (or,
	// after an election of its own, leads) and has applied everything
	// committed.
	checkFor(t, time.Minute, 20*time.Millisecond, func() error {
		sts := gatherStatus(consumer, 300*time.Millisecond, 3)
		cur := ""
		for id, st := range sts {
			if st.Role == wire.RoleLeader {
				cur = id
			}
		}
		st, lst := sts[old], sts[cur]
		if cur == "" || st.LeaderID != cur {
			return fmt.Errorf("%s: role %q, leader %q; leader seen %q", old, st.Role, st.LeaderID, cur)
		}
		if st.AppliedIndex < lst.CommitIndex {
			return fmt.Errorf("%s applied %d of the %d committed", old, st.AppliedIndex, lst.CommitIndex)
		}
		return nil
	})
	traffic.feed(ingestToken{}, perRound)
	waitGrowth(t, "ingest replies", &l.replies, perRound/4)
	traffic.stopPublishers()
	l.settle(t, consumer)
	for _, n := range c.nodes {
		n.proc.stop(t)
		n.proc = nil
	}
	lost, deliveries, redeliveries := l.verify(t)
	t.Logf("cut %s off: it stepped down after %v, %s led after %v; acknowledged: %d, lost: %d, deliveries: %d, redeliveries: %d",
		old, steppedDown.Round(time.Millisecond), leader, tookOver.Round(time.Millisecond), l.replies.Load(), lost, deliveries, redeliveries)
}

// httpAddrOf is the address of a node's HTTP listener, from its ready log
// line.
func httpAddrOf(t *testing.T, p *serviceProcess) string {
	t.Helper()
	m := regexp.MustCompile(`msg="natsdelay ready".* http=(\S+)`).FindStringSubmatch(p.output())
	if m == nil {
		t.Fatalf("no http address in the ready line:\n%s", p.output())
	}
	return m[1]
}

// httpGet returns the status and body of GET http://addr/path.
func httpGet(t *testing.T, addr, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// runCLI runs a client command of the binary and returns its exit code
// and output.
func runCLI(t *testing.T, bin string, args ...string) (int, string) {
	t.Helper()
	out, err := exec.Command(bin, args...).CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, string(out)
}

// TestClusterProcess_AddRemove_ByCommand checks membership changes at run
// time with the client commands, without restarting anyone: a new node on
// another engine (bolt), started with --cluster-join, is added with
// natsdelay cluster add and catches up with what was committed before it
// came (it applies up to the leader's commit index); cluster status and
// info show it; its /readyz is 200 saying it follows and its /leader 503,
// while the leader's /leader is 200; cluster remove takes it out, and
// removing an unknown id is an error that names it.
func TestClusterProcess_AddRemove_ByCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := natsdelayBinary(t)
	srv := startServer(t)
	url := srv.ClientURL()
	c := newProcessCluster(t, bin, url, 3, nil)
	c.extra = []string{"--http", "127.0.0.1:0"}
	c.startAll()
	nc := connect(t, srv)
	c.waitLeader(nc, "")
	for i := range 50 {
		scheduleInCluster(t, nc, newMsg(fmt.Sprintf("members.m%d", i%5), "before the new node", "Delay", "1h"))
	}

	listen, dir := freeAddrs(t, 1)[0], t.TempDir()
	d := launch(t, bin, []string{"NATSDELAY_HTTP="}, "serve", "--nats", url, "--data-dir", dir, "--engine", "bolt",
		"--cluster-listen", listen, "--cluster-peers", c.peers()+","+listen, "--node-id", "noded", "--cluster-join",
		"--cluster-timeout", clusterTimeout, "--http", "127.0.0.1:0")
	defer func() {
		if d != nil {
			d.kill(t)
		}
	}()
	// Adding a member again changes nothing, so a failed add (a leader
	// change meanwhile) is asked again.
	checkFor(t, time.Minute, 100*time.Millisecond, func() error {
		if code, out := runCLI(t, bin, "cluster", "add", "--nats", url, "noded", listen); code != 0 || !strings.Contains(out, "noded") {
			return fmt.Errorf("cluster add: exit %d:\n%s", code, out)
		}
		return nil
	})
	var leader string
	checkFor(t, time.Minute, 20*time.Millisecond, func() error {
		leader = c.waitLeader(nc, "")
		sts := gatherStatus(nc, 300*time.Millisecond, 4)
		st, lst := sts["noded"], sts[leader]
		if st.Role != wire.RoleFollower || len(lst.Peers) != 4 || st.AppliedIndex < lst.CommitIndex {
			return fmt.Errorf("noded: role %q, applied %d; leader's commit index %d, peers %v", st.Role, st.AppliedIndex, lst.CommitIndex, lst.Peers)
		}
		return nil
	})
	checkFor(t, time.Minute, 20*time.Millisecond, func() error {
		if code, out := runCLI(t, bin, "cluster", "status", "--nats", url); code != 0 || strings.Count(out, "follower") != 3 || strings.Count(out, " leader ") != 1 {
			return fmt.Errorf("cluster status: exit %d, want 3 followers and a leader:\n%s", code, out)
		}
		return nil
	})
	checkFor(t, time.Minute, 20*time.Millisecond, func() error {
		leader = c.waitLeader(nc, "")
		if code, out := runCLI(t, bin, "info", "--nats", url); code != 0 || !strings.Contains(out, "peer noded") || !strings.Contains(out, leader+" (leader)") {
			return fmt.Errorf("info: exit %d, want the cluster with noded led by %s:\n%s", code, leader, out)
		}
		return nil
	})
	dAddr := httpAddrOf(t, d)
	if code, body := httpGet(t, dAddr, "/readyz"); code != 200 || body != "ok: follower" {
		t.Errorf("noded /readyz = %d %q, want 200 ok: follower", code, body)
	}
	if code, _ := httpGet(t, dAddr, "/leader"); code != 503 {
		t.Errorf("noded /leader = %d, want 503", code)
	}
	checkFor(t, time.Minute, 20*time.Millisecond, func() error {
		leader = c.waitLeader(nc, "")
		if code, body := httpGet(t, httpAddrOf(t, c.node(leader).proc), "/leader"); code != 200 {
			return fmt.Errorf("leader %s /leader = %d %q, want 200", leader, code, body)
		}
		return nil
	})
	if code, body := httpGet(t, dAddr, "/metrics"); code != 200 || !strings.Contains(body, `natsdelay_cluster_role{role="follower"} 1`) {
		t.Errorf("noded /metrics = %d, want its role:\n%s", code, body)
	}

	if code, out := runCLI(t, bin, "cluster", "remove", "--nats", url, "nodez"); code != 1 || !strings.Contains(out, `no member with id "nodez"`) {
		t.Errorf("cluster remove nodez: exit %d, want 1 naming it:\n%s", code, out)
	}
	if code, out := runCLI(t, bin, "cluster", "remove", "--nats", url, "noded"); code != 0 || strings.Contains(out, "noded") {
		t.Fatalf("cluster remove noded: exit %d:\n%s", code, out)
	}
	checkFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		leader = c.waitLeader(nc, "")
		if lst := gatherStatus(nc, 300*time.Millisecond, 4)[leader]; len(lst.Peers) != 3 {
			return fmt.Errorf("leader's peers: %v", lst.Peers)
		}
		return nil
	})
	d.stop(t)
	d = nil
	for _, n := range c.nodes {
		n.proc.stop(t)
		n.proc = nil
	}
}

// TestClusterProcess_EmbeddedRoutes_FailoverAcrossServers runs three
// serve processes that each embed a nats-server, routed together with
// --nats-cluster-listen and --nats-routes. A publisher connected only to
// one follower's server and a consumer connected only to the other's
// reach the leader through the routes; then the leader is SIGKILLed, its
// server with it. It checks that every message acknowledged before the
// kill is delivered by the new leader to the consumer, none before its
// fire time, and that nothing stays pending once they are ACKed.
func TestClusterProcess_EmbeddedRoutes_FailoverAcrossServers(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := natsdelayBinary(t)
	c := newProcessCluster(t, bin, "", 3, nil)
	clients, routes := freeAddrs(t, 3), freeAddrs(t, 3)
	var routeURLs []string
	for _, r := range routes {
		routeURLs = append(routeURLs, "nats://"+r)
	}
	for i, n := range c.nodes {
		n.natsArgs = []string{"--nats-listen", clients[i], "--nats-cluster-listen", routes[i], "--nats-routes", strings.Join(routeURLs, ",")}
	}
	c.startAll()
	url := func(n *clusterChild) string { return "nats://" + clients[slices.Index(c.nodes, n)] }
	dial := func(urls ...string) *nats.Conn {
		nc, err := nats.Connect(strings.Join(urls, ","), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	var all []string
	for _, n := range c.nodes {
		all = append(all, url(n))
	}
	watcher := dial(all...)
	leader := c.node(c.waitLeader(watcher, ""))
	var followers []*clusterChild
	for _, n := range c.nodes {
		if n != leader {
			followers = append(followers, n)
		}
	}
	pub, con := dial(url(followers[0])), dial(url(followers[1]))
	deliveries := make(chan received, 64)
	sub, err := con.Subscribe("routes.>", func(m *nats.Msg) { deliveries <- received{Msg: m, at: time.Now()} })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := con.Flush(); err != nil {
		t.Fatal(err)
	}
	// The subscription must be known to the leader's server before the
	// first delivery; the status round trip through it is enough.
	checkFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		if len(gatherStatus(pub, 300*time.Millisecond, 3)) != 3 {
			return fmt.Errorf("not every node answers through %s's server", followers[0].id)
		}
		return nil
	})

	const n = 20
	want := map[string]time.Time{}
	for i := range n {
		s := scheduleInCluster(t, pub, newMsg(fmt.Sprintf("routes.s%d", i%3), "across the routes", "Delay", "1500ms"))
		want[s.Tag] = s.FireAt
	}
	leader.proc.kill(t)
	leader.proc = nil
	newLeader := c.waitLeader(pub, leader.id)
	got := map[string]bool{}
	for len(got) < n {
		r := next(t, deliveries, "a delivery after the failover")
		tag := r.Header.Get(wire.HeaderTag)
		fire, ok := want[tag]
		if !ok {
			t.Fatalf("delivered %s, which was never scheduled", tag)
		}
		notEarly(t, r, fire)
		got[tag] = true
		if err := r.Respond(nil); err != nil {
			t.Fatal(err)
		}
	}
	waitPendingWithin(t, pub, 0, 30*time.Second)
	t.Logf("leader %s killed; %s delivered all %d messages through the routes", leader.id, newLeader, n)
	for _, f := range followers {
		f.proc.stop(t)
		f.proc = nil
	}
}

// TestClusterProcess_SIGTERMLeader_HandsLeadershipOver stops the leader of
// three real serve processes with SIGTERM while publishers schedule and a
// consumer ACKs. It checks that the leader hands its leadership over
// before it exits (exit 0, and it logs which node took over, so the
// others did not wait for an election timeout), that the node it named
// leads and acknowledges ingest again, and that nothing acknowledged is
// lost or delivered early, and no event ID is used twice.
func TestClusterProcess_SIGTERMLeader_HandsLeadershipOver(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := natsdelayBinary(t)
	srv := startServer(t)
	c := newProcessCluster(t, bin, srv.ClientURL(), 3, nil)
	c.startAll()

	const subject, perRound = "clusterterm", 60
	l := newCrashLoop()
	traffic := startCrashTraffic(t, srv, l, subject, 17, perRound)
	consumer := traffic.consumer
	c.waitLeader(consumer, "")
	l.setUp()

	traffic.feed(ingestToken{}, perRound)
	waitGrowth(t, "ingest replies", &l.replies, perRound/4)
	victim := c.node(c.waitLeader(consumer, ""))
	l.setDown()
	victim.proc.stop(t) // SIGTERM; a clean exit
	out := victim.proc.output()
	victim.proc = nil
	m := regexp.MustCompile(`msg="cluster leadership handed over".* leader=(\S+)`).FindStringSubmatch(out)
	if m == nil || m[1] == victim.id || c.node(m[1]) == nil {
		t.Fatalf("%s stopped without handing its leadership to another node:\n%s", victim.id, out)
	}
	leader := c.waitLeader(consumer, victim.id)
	l.setUp()
	traffic.feed(ingestToken{}, perRound)
	waitGrowth(t, "ingest replies", &l.replies, perRound/4)
	traffic.stopPublishers()
	l.settle(t, consumer)
	for _, n := range c.nodes {
		if n.proc != nil {
			n.proc.stop(t)
			n.proc = nil
		}
	}
	lost, deliveries, redeliveries := l.verify(t)
	t.Logf("SIGTERM of leader %s: it handed over to %s; %s led after; acknowledged: %d, lost: %d, deliveries: %d, redeliveries: %d",
		victim.id, m[1], leader, l.replies.Load(), lost, deliveries, redeliveries)
}
