package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge/client"
	"github.com/natsdelay/natsdelay/bridge/wire"
)

// ClusterResult is what the cluster phase measured: natsdelay as one
// `serve` process beside a cluster of three, all child processes on this
// machine and the bench's server, and the failover of the three.
type ClusterResult struct {
	// Ingest and Fire have one row per system: "natsdelay x1",
	// "natsdelay x3" and "jetstream R3". Their CPU.Service sums the
	// natsdelay nodes' processes; JetStream R3 runs in the bench process.
	Ingest []IngestResult `json:"ingest"`
	Fire   []FireResult   `json:"fire"`
	// Failovers are the leader kills of the three-node cluster.
	Failovers []FailoverResult `json:"failovers"`
	// JSFailovers is the shutdown of the server that leads the R3
	// stream (in process: the servers run in the bench), once.
	JSFailovers []FailoverResult `json:"jetstream_r3_failovers"`
	// ClusterTimeout is the nodes' --cluster-timeout.
	ClusterTimeout string `json:"cluster_timeout"`
	// Machines is the CPU quota and the disk of each node.
	Machines MachineNote `json:"machines"`
	// ThrottledPct is, per natsdelay system, the share of its nodes'
	// quota periods in which a node used up its quota and was held back;
	// absent without a quota.
	ThrottledPct map[string]float64 `json:"throttled_pct,omitempty"`
}

// FailoverResult is one SIGKILL of the leader of a cluster.
type FailoverResult struct {
	// ToAckMs is from the kill to the first ingest request answered with
	// a tag by the new leader; ToDeliveryMs to the first delivery by it of
	// a message due just after the kill.
	ToAckMs      float64 `json:"to_ack_ms"`
	ToDeliveryMs float64 `json:"to_delivery_ms"`
}

// clusterTimeout is the nodes' --cluster-timeout: serve's default.
const clusterTimeout = time.Second

// benchNode is one `serve` child process of the cluster phase.
type benchNode struct {
	id, dir, raft string
	machine       *machine // its cgroup and tmpfs, where the run gives it them
	cmd           *exec.Cmd
	stderr        *tailBuffer
	exited        chan struct{}
}

// nodeSet is the processes of one system of the cluster and cells phases.
type nodeSet struct {
	e     *env
	spec  setSpec
	nodes []*benchNode
}

// setSpec is what startSet starts: n serve processes with data under dir,
// on the subjects of prefixes, each with extra flags.
type setSpec struct {
	n        int
	dir      string
	prefixes prefixes
	// extra is the flags of node i beyond those of every node.
	extra func(i int) []string
}

// prefixes are the ingest, ack and API prefixes of a set of nodes.
type prefixes struct {
	ingest, ack, api string
}

// startNodes starts n serve processes on the bench's server and subjects:
// one plain node for n == 1, else a cluster of n, and waits until one
// serves.
func (e *env) startNodes(n int, dir string) (*nodeSet, error) {
	return e.startSet(setSpec{n: n, dir: dir, prefixes: prefixes{e.ingest, e.ack, e.api}})
}

// startSet starts spec's nodes, each on the machine the run gives it (a
// cgroup with a CPU quota, a tmpfs), and waits until one serves.
func (e *env) startSet(spec setSpec) (*nodeSet, error) {
	if len(e.cfg.ServiceCommand) == 0 {
		return nil, fmt.Errorf("%w: the cluster phase runs natsdelay serve as child processes: set ServiceCommand", ErrInvalidConfig)
	}
	s := &nodeSet{e: e, spec: spec}
	var raft []string
	if spec.n > 1 {
		var err error
		if raft, err = freeAddrs(spec.n); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(spec.dir, 0o755); err != nil {
		return nil, fmt.Errorf("bench: make %s: %w", spec.dir, err)
	}
	for i := range spec.n {
		node := &benchNode{id: "n" + strconv.Itoa(i+1), dir: filepath.Join(spec.dir, "n"+strconv.Itoa(i+1))}
		if raft != nil {
			node.raft = raft[i]
		}
		s.nodes = append(s.nodes, node)
	}
	for i, node := range s.nodes {
		err := e.setMachine(node)
		if err == nil {
			err = s.start(node, i, raft)
		}
		if err != nil {
			return nil, errors.Join(err, s.close())
		}
	}
	if err := s.waitServing(); err != nil {
		return nil, errors.Join(err, s.close())
	}
	return s, nil
}

// nodeLog opens the file that keeps node's whole log under NodeLogs, for
// appending (a node restarted after a failover goes on in it), or
// returns nil without NodeLogs.
func (s *nodeSet) nodeLog(node *benchNode) (*os.File, error) {
	if s.e.cfg.NodeLogs == "" {
		return nil, nil
	}
	rel, err := filepath.Rel(s.e.dir, node.dir)
	if err != nil {
		rel = node.dir
	}
	name := filepath.Join(s.e.cfg.NodeLogs, strings.ReplaceAll(filepath.ToSlash(rel), "/", "-")+".log")
	if err := os.MkdirAll(s.e.cfg.NodeLogs, 0o755); err != nil {
		return nil, fmt.Errorf("bench: node logs: %w", err)
	}
	f, err := os.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("bench: node logs: %w", err)
	}
	return f, nil
}

func (s *nodeSet) start(node *benchNode, i int, raft []string) error {
	e := s.e
	args := append(e.cfg.ServiceCommand[1:len(e.cfg.ServiceCommand):len(e.cfg.ServiceCommand)],
		"--nats", e.url, "--data-dir", node.dir, "--engine", "pebble",
		"--ingest-prefix", s.spec.prefixes.ingest, "--ack-prefix", s.spec.prefixes.ack, "--api-prefix", s.spec.prefixes.api, "--http", "")
	if raft != nil {
		args = append(args, "--node-id", node.id, "--cluster-listen", node.raft, "--cluster-peers", strings.Join(raft, ","),
			"--cluster-timeout", clusterTimeout.String())
	}
	if s.spec.extra != nil {
		args = append(args, s.spec.extra(i)...)
	}
	node.cmd = exec.Command(e.cfg.ServiceCommand[0], args...)
	node.stderr = &tailBuffer{max: 8 << 10}
	node.cmd.Stderr = node.stderr
	logFile, err := s.nodeLog(node)
	if err != nil {
		return err
	}
	if logFile != nil {
		node.cmd.Stderr = io.MultiWriter(node.stderr, logFile)
	}
	node.exited = make(chan struct{})
	if err := node.cmd.Start(); err != nil {
		if logFile != nil {
			_ = logFile.Close()
		}
		return fmt.Errorf("bench: start %s: %w", e.cfg.ServiceCommand[0], err)
	}
	go func() {
		// Owned by the node: close and kill wait for it.
		_ = node.cmd.Wait()
		if logFile != nil {
			_ = logFile.Close()
		}
		close(node.exited)
	}()
	if err := node.machine.add(node.cmd.Process.Pid); err != nil {
		node.kill()
		return err
	}
	return nil
}

// waitServing waits until INFO is answered: a node serves.
func (s *nodeSet) waitServing() error {
	return poll(s.e.cfg.Timeout, func() (bool, error) {
		for _, n := range s.nodes {
			select {
			case <-n.exited:
				return false, fmt.Errorf("bench: natsdelay %s exited:\n%s", n.id, n.stderr)
			default:
			}
		}
		_, err := s.client(time.Second).Info(context.Background())
		return err == nil, nil
	})
}

// client is an API client of the set's prefixes.
func (s *nodeSet) client(timeout time.Duration) *client.Client {
	p := s.spec.prefixes
	c, err := client.New(s.e.conns[0], client.WithAPIPrefix(p.api), client.WithIngestPrefix(p.ingest), client.WithTimeout(timeout))
	if err != nil {
		// NB: every timeout here is a constant above 0: an error is a
		// bug of the bench.
		panic(err)
	}
	return c
}

// leader is the node that says it leads, gathered over CLUSTER.STATUS.
func (s *nodeSet) leader() (*benchNode, error) {
	st, err := s.client(time.Second).ClusterStatus(context.Background())
	if err != nil {
		return nil, fmt.Errorf("bench: cluster status: %w", err)
	}
	for _, ns := range st.Nodes {
		if ns.Role != wire.RoleLeader {
			continue
		}
		for _, n := range s.nodes {
			if n.id == ns.ID {
				return n, nil
			}
		}
	}
	return nil, errors.New("bench: no node says it leads")
}

// cpu is the CPU time of the live nodes so far; -1 if any is unknown.
func (s *nodeSet) cpu() float64 {
	var sum time.Duration
	for _, n := range s.nodes {
		c, ok := procCPU(strconv.Itoa(n.cmd.Process.Pid))
		if !ok {
			return -1
		}
		sum += c
	}
	return sum.Seconds()
}

// kill SIGKILLs node and waits until it is gone.
func (n *benchNode) kill() {
	_ = n.cmd.Process.Signal(syscall.SIGKILL)
	<-n.exited
}

// close stops every node with SIGTERM, killing those that do not stop,
// then tears down their machines.
func (s *nodeSet) close() error {
	var errs []error
	for _, n := range s.nodes {
		if n.cmd == nil || n.cmd.Process == nil {
			continue
		}
		_ = n.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, n := range s.nodes {
		if n.cmd == nil || n.cmd.Process == nil {
			continue
		}
		select {
		case <-n.exited:
		case <-time.After(s.e.cfg.Timeout):
			n.kill()
			errs = append(errs, fmt.Errorf("bench: natsdelay %s did not stop:\n%s", n.id, n.stderr))
		}
	}
	for _, n := range s.nodes {
		if n.machine != nil {
			errs = append(errs, n.machine.close())
		}
	}
	return errors.Join(errs...)
}

// throttled sums the periods of the set's cgroups and those in which a
// node was held back by its quota.
func (s *nodeSet) throttled() (periods, throttled int64) {
	for _, n := range s.nodes {
		p, t := n.machine.throttled()
		periods, throttled = periods+p, throttled+t
	}
	return periods, throttled
}

// runCluster measures natsdelay as one node and as a cluster of three:
// ingest pipelined and with concurrent requesters, fire lateness at the
// first offered rate, and for the three the failover after a SIGKILL of
// the leader, Failovers times.
func (e *env) runCluster(ctx context.Context) (*ClusterResult, error) {
	cr := &ClusterResult{ClusterTimeout: clusterTimeout.String(), Machines: e.cfg.machineNote()}
	for _, n := range []int{1, 3} {
		system := fmt.Sprintf("%s x%d", SystemDelay, n)
		s, err := e.startNodes(n, filepath.Join(e.dir, "cluster"+strconv.Itoa(n)))
		if err != nil {
			return cr, err
		}
		err = e.clusterRuns(s, system, n, cr)
		if periods, throttled := s.throttled(); periods > 0 {
			if cr.ThrottledPct == nil {
				cr.ThrottledPct = map[string]float64{}
			}
			cr.ThrottledPct[system] = 100 * float64(throttled) / float64(periods)
		}
		if err = errors.Join(err, s.close()); err != nil {
			return cr, fmt.Errorf("bench: cluster phase, %s: %w", system, err)
		}
	}
	if err := e.runJSR3(ctx, cr); err != nil {
		return cr, fmt.Errorf("bench: cluster phase, %s: %w", SystemJSR3, err)
	}
	return cr, nil
}

func (e *env) clusterRuns(s *nodeSet, system string, n int, cr *ClusterResult) error {
	subj := e.plain + ".cluster" + strconv.Itoa(n)
	msg := func(int) *nats.Msg { return e.delayMsg(subj+".ingest", time.Time{}) }
	for _, mode := range []string{"pipelined", "requesters"} {
		var done atomic.Int64
		p := startProgress(e.cfg.Progress, "cluster ingest "+system+" "+mode, e.cfg.IngestMsgs, &done)
		mark, svc0 := e.markCPU(0), s.cpu()
		var el time.Duration
		var failed int
		var err error
		if mode == "pipelined" {
			el, failed, err = pipelined(e.conns[0], e.cfg.IngestMsgs, e.cfg.Outstanding, e.cfg.Timeout, msg, delayOK, &done)
		} else {
			el, failed, err = requesters(e.conns, e.cfg.IngestMsgs, e.cfg.Requesters, e.cfg.Timeout, msg, delayOK, &done)
		}
		cpu := mark.since()
		if svc1 := s.cpu(); svc0 >= 0 && svc1 >= 0 {
			cpu.Service = svc1 - svc0
		}
		p.done()
		if err != nil {
			return err
		}
		cr.Ingest = append(cr.Ingest, ingestResult(system, mode, e.cfg.IngestMsgs, failed, el, cpu))
	}

	rate := e.cfg.FireRates[0]
	rec := newRecorder(e.cfg.FireMsgs)
	stopSub, err := e.delayConsumer(subj+".fire", rec)
	if err != nil {
		return err
	}
	run := &sysRun{system: system, msg: func(_ int, at time.Time) *nats.Msg { return e.delayMsg(subj+".fire", at) }, ok: delayOK}
	svc0 := s.cpu()
	r, err := e.fire(run, rec, e.cfg.FireMsgs, rate, e.cfg.FireLead)
	if svc1 := s.cpu(); svc0 >= 0 && svc1 >= 0 {
		r.CPU.Service = svc1 - svc0
	}
	if err = errors.Join(err, stopSub()); err != nil {
		return err
	}
	cr.Fire = append(cr.Fire, r)
	if n == 1 {
		return nil
	}
	for range e.cfg.Failovers {
		f, err := e.failover(s, subj)
		if err != nil {
			return err
		}
		cr.Failovers = append(cr.Failovers, f)
	}
	return nil
}

// failover kills the leader with a message due just after the kill, then
// times the first tag from the new leader and the first delivery, and
// restarts the killed node.
func (e *env) failover(s *nodeSet, subj string) (FailoverResult, error) {
	var f FailoverResult
	leader, err := s.leader()
	if err != nil {
		return f, err
	}
	nc, err := e.connect("bench-failover")
	if err != nil {
		return f, err
	}
	defer nc.Close()
	delivered := make(chan time.Time, 1)
	sub, err := nc.Subscribe(subj+".failover", func(m *nats.Msg) {
		now := time.Now()
		_ = m.Respond(nil)
		select {
		case delivered <- now:
		default:
		}
	})
	if err != nil {
		return f, err
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		return f, err
	}
	// Due 100ms after the kill: the old leader is gone before it is due.
	kill := time.Now().Add(200 * time.Millisecond)
	rep, err := e.conns[0].RequestMsg(e.delayMsg(subj+".failover", kill.Add(100*time.Millisecond)), e.cfg.Timeout)
	if err != nil {
		return f, err
	}
	if err := wire.ParseError(rep.Header, rep.Data); err != nil {
		return f, err
	}
	time.Sleep(time.Until(kill))
	t0 := time.Now()
	leader.kill()
	// The first acknowledged ingest: retried on no responders and on
	// 503s, as a publisher would, every 5ms.
	if err := poll(e.cfg.Timeout, func() (bool, error) {
		rep, err := e.conns[0].RequestMsg(e.delayMsg(subj+".ingest", time.Time{}), 500*time.Millisecond)
		if err != nil || wire.ParseError(rep.Header, rep.Data) != nil {
			time.Sleep(5 * time.Millisecond)
			return false, nil
		}
		return true, nil
	}); err != nil {
		return f, fmt.Errorf("bench: no ingest acknowledged after the leader's kill: %w", err)
	}
	f.ToAckMs = ms(time.Since(t0))
	select {
	case at := <-delivered:
		f.ToDeliveryMs = ms(at.Sub(t0))
	case <-time.After(e.cfg.Timeout):
		return f, errors.New("bench: the message due after the kill was not delivered")
	}
	if err := s.start(leader, slices.Index(s.nodes, leader), raftAddrs(s)); err != nil {
		return f, err
	}
	return f, s.waitAll()
}

// raftAddrs is the peer list of the set's cluster.
func raftAddrs(s *nodeSet) []string {
	var out []string
	for _, n := range s.nodes {
		out = append(out, n.raft)
	}
	return out
}

// waitAll waits until every node answers CLUSTER.STATUS as leader or
// follower of one leader, and that leader serves.
func (s *nodeSet) waitAll() error {
	api := s.client(300 * time.Millisecond)
	return poll(s.e.cfg.Timeout, func() (bool, error) {
		st, err := api.ClusterStatus(context.Background())
		if err != nil || len(st.Nodes) != len(s.nodes) {
			return false, nil
		}
		leaders := map[string]int{}
		for _, ns := range st.Nodes {
			leaders[ns.LeaderID]++
		}
		if len(leaders) != 1 || leaders[""] > 0 {
			return false, nil
		}
		_, err = s.client(time.Second).Info(context.Background())
		return err == nil, nil
	})
}

// freeAddrs picks n distinct free loopback addresses for the nodes' Raft
// listeners. NB: every listener stays open until all are picked: one
// closed before the next is taken leaves its port free to be picked
// again, and a node refuses a peer list that names an address twice.
func freeAddrs(n int) (addrs []string, err error) {
	lns := make([]net.Listener, 0, n)
	defer func() {
		for _, ln := range lns {
			err = errors.Join(err, ln.Close())
		}
	}()
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, ln)
		addrs = append(addrs, ln.Addr().String())
	}
	return addrs, nil
}
