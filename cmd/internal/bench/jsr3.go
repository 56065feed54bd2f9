package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// SystemJSR3 names JetStream schedules on an R3 stream of a three-server
// JetStream cluster, the replicated peer of a natsdelay cluster.
const SystemJSR3 = "jetstream R3"

// jsCluster is three embedded nats-servers with JetStream, routed into one
// cluster, in this process.
type jsCluster struct {
	servers []*server.Server
	urls    []string
}

// startJSCluster starts the three servers under dir and waits until
// JetStream has a meta leader that can place a stream on all three.
func (e *env) startJSCluster(dir string) (*jsCluster, error) {
	var routes []*url.URL
	var ports []int
	for range 3 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
		_ = ln.Close()
	}
	for _, p := range ports {
		routes = append(routes, &url.URL{Scheme: "nats", Host: "127.0.0.1:" + strconv.Itoa(p)})
	}
	c := &jsCluster{}
	for i, p := range ports {
		opts := &server.Options{
			ServerName: "bench-js-" + strconv.Itoa(i+1),
			Host:       "127.0.0.1",
			Port:       server.RANDOM_PORT,
			JetStream:  true,
			StoreDir:   filepath.Join(dir, "js"+strconv.Itoa(i+1)),
			SyncAlways: e.cfg.JSSyncAlways,
			Cluster:    server.ClusterOpts{Name: "bench-js", Host: "127.0.0.1", Port: p},
			Routes:     routes,
			NoSigs:     true,
			NoLog:      true,
		}
		s, err := server.NewServer(opts)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("bench: JetStream cluster server: %w", err), c.close())
		}
		s.Start()
		c.servers = append(c.servers, s)
	}
	for _, s := range c.servers {
		if !s.ReadyForConnections(10 * time.Second) {
			return nil, errors.Join(errors.New("bench: JetStream cluster server not ready after 10s"), c.close())
		}
		c.urls = append(c.urls, s.ClientURL())
	}
	// A meta leader is not enough: an R3 stream is placed only on peers
	// it has heard stats from, and until it has from all three, creating
	// one fails with "no suitable peers for placement".
	if err := poll(e.cfg.Timeout, func() (bool, error) {
		for _, s := range c.servers {
			if s.JetStreamIsLeader() {
				return len(s.JetStreamClusterPeers()) == len(c.servers), nil
			}
		}
		return false, nil
	}); err != nil {
		return nil, errors.Join(fmt.Errorf("bench: JetStream cluster has no meta leader that knows all %d peers: %w", len(c.servers), err), c.close())
	}
	return c, nil
}

func (c *jsCluster) close() error {
	for _, s := range c.servers {
		s.Shutdown()
		s.WaitForShutdown()
	}
	return nil
}

// runJSR3 measures JetStream schedules on an R3 stream as runCluster
// measures natsdelay: ingest, fire lateness at the first offered rate, and
// Failovers times the shutdown of the stream leader's server.
func (e *env) runJSR3(ctx context.Context, cr *ClusterResult) error {
	c, err := e.startJSCluster(filepath.Join(e.dir, "jsr3"))
	if err != nil {
		return err
	}
	defer c.close()
	// A view of the env on the JetStream cluster: its own connections,
	// reconnecting to any server, and R3 streams.
	je := *e
	je.conns, je.replicas = nil, 3
	defer func() {
		for _, nc := range je.conns {
			nc.Close()
		}
	}()
	for i := range 8 {
		nc, err := nats.Connect(strings.Join(c.urls, ","), nats.Name("bench-r3-"+strconv.Itoa(i)), nats.MaxReconnects(-1), nats.ReconnectWait(10*time.Millisecond))
		if err != nil {
			return fmt.Errorf("bench: connect to the JetStream cluster: %w", err)
		}
		je.conns = append(je.conns, nc)
	}
	if je.js, err = jetstream.New(je.conns[0]); err != nil {
		return err
	}
	je.url = strings.Join(c.urls, ",")

	if err := e.r3Ingest(ctx, &je, cr); err != nil {
		return err
	}

	rate := e.cfg.FireRates[0]
	rec := newRecorder(e.cfg.FireMsgs)
	run, err := je.startSystem(ctx, SystemJS, "r3fire", rec)
	if err != nil {
		return err
	}
	run.system = SystemJSR3
	r, err := je.fire(run, rec, e.cfg.FireMsgs, rate, e.cfg.FireLead)
	if err = errors.Join(err, run.stop()); err != nil {
		return err
	}
	cr.Fire = append(cr.Fire, r)

	// NB: one failover only: the server shut down is not restarted, and
	// a second would leave one server of three, no quorum.
	f, err := je.jsFailover(ctx, c, 0)
	if err != nil {
		return err
	}
	cr.JSFailovers = append(cr.JSFailovers, f)
	return nil
}

// r3Ingest measures ingest, pipelined and by requesters, into an R3
// stream of je, the env's view of the JetStream cluster.
func (e *env) r3Ingest(ctx context.Context, je *env, cr *ClusterResult) error {
	s, err := je.stream(ctx, "r3ingest")
	if err != nil {
		return err
	}
	n := e.cfg.IngestMsgs
	future := time.Now().Add(time.Hour)
	for _, mode := range []string{"pipelined", "requesters"} {
		var done atomic.Int64
		p := startProgress(e.cfg.Progress, "cluster ingest "+SystemJSR3+" "+mode, n, &done)
		base := 0
		if mode == "requesters" {
			base = n
		}
		msg := func(i int) *nats.Msg { return je.jsMsg("r3ingest", base+i, future) }
		mark := e.markCPU(0)
		var el time.Duration
		var failed int
		if mode == "pipelined" {
			el, failed, err = pipelined(je.conns[0], n, e.cfg.Outstanding, e.cfg.Timeout, msg, jsOK, &done)
		} else {
			el, failed, err = requesters(je.conns, n, e.cfg.Requesters, e.cfg.Timeout, msg, jsOK, &done)
		}
		cpu := mark.since()
		p.done()
		if err != nil {
			return errors.Join(err, je.deleteStream(ctx, s))
		}
		cr.Ingest = append(cr.Ingest, ingestResult(SystemJSR3, mode, n, failed, el, cpu))
	}
	return je.deleteStream(ctx, s)
}

// jsFailover shuts the server of the stream leader down with a schedule
// due 100ms later, then times the first acknowledged schedule and the
// first delivery, on a stream of its own. The server is not restarted.
func (e *env) jsFailover(ctx context.Context, c *jsCluster, k int) (FailoverResult, error) {
	var f FailoverResult
	phase := "r3fail" + strconv.Itoa(k)
	rec := newRecorder(1)
	run, err := e.startSystem(ctx, SystemJS, phase, rec)
	if err != nil {
		return f, err
	}
	defer func() { _ = run.stop() }()
	s, err := e.js.Stream(ctx, "BENCH_"+e.id+"_"+phase)
	if err != nil {
		return f, err
	}
	info, err := s.Info(ctx)
	if err != nil || info.Cluster == nil {
		return f, fmt.Errorf("bench: stream leader: %v", err)
	}
	var leader *server.Server
	for _, srv := range c.servers {
		if srv.Name() == info.Cluster.Leader {
			leader = srv
		}
	}
	if leader == nil {
		return f, fmt.Errorf("bench: no server named %q leads the stream", info.Cluster.Leader)
	}
	kill := time.Now().Add(200 * time.Millisecond)
	rep, err := e.conns[0].RequestMsg(run.msg(0, kill.Add(100*time.Millisecond)), e.cfg.Timeout)
	if err != nil || !jsOK(rep) {
		return f, fmt.Errorf("bench: schedule before the failover: %v", err)
	}
	time.Sleep(time.Until(kill))
	t0 := time.Now()
	leader.Shutdown()
	if err := poll(e.cfg.Timeout, func() (bool, error) {
		rep, err := e.conns[1].RequestMsg(run.msg(1, time.Now().Add(time.Hour)), 500*time.Millisecond)
		if err != nil || !jsOK(rep) {
			time.Sleep(5 * time.Millisecond)
			return false, nil
		}
		return true, nil
	}); err != nil {
		return f, fmt.Errorf("bench: no schedule acknowledged after the stream leader's shutdown: %w", err)
	}
	f.ToAckMs = ms(time.Since(t0))
	rec.wait(e.cfg.Timeout)
	rec.mu.Lock()
	first := rec.mu.first
	rec.mu.Unlock()
	if first.IsZero() {
		return f, errors.New("bench: the schedule due after the failover did not fire")
	}
	f.ToDeliveryMs = ms(first.Sub(t0))
	return f, nil
}
