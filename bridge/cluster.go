package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/delaystore"
)

// Cluster is the replication a Service runs on as a node of a cluster
// (see WithCluster). The package raftstore's Node provides it, through
// an adapter that turns its Status into wire's.
type Cluster interface {
	// WatchLeadership calls f(true) when this node becomes leader, once
	// it has applied everything committed before, and f(false) the moment
	// it stops being leader; serially, never two trues in a row. cancel
	// stops the watch and waits for a call under way.
	WatchLeadership(f func(leader bool)) (cancel func())
	// LeaseCheck returns a check of the leadership lease bound to the
	// leadership under way: it reports whether this node holds the lease
	// now (no other node can lead, however long this process was paused)
	// in that same leadership, and false once it ended, even while this
	// node leads again. Called while this node does not lead, the check
	// always reports false. It is checked before every effect others
	// observe.
	LeaseCheck() func() bool
	// AwaitLease waits up to timeout for the lease while this node leads,
	// and reports whether it holds it: a leader whose renewal was slow
	// gets it back within a round trip, a deposed one never does.
	AwaitLease(timeout time.Duration) bool
	// Status is this node's own view of the cluster.
	Status() wire.NodeStatus
	// AddVoter and RemoveServer change the membership, on the leader; on
	// another node they return an error wrapping wire.ErrUnavailable.
	AddVoter(ctx context.Context, id, addr string) error
	RemoveServer(ctx context.Context, id string) error
	// StepDown hands this node's leadership to another voter and returns
	// once another leads, or ctx ends. A node that is the only voter
	// keeps its leadership and gets an error.
	StepDown(ctx context.Context) error
}

// errNotLeader is why a node of a cluster that is not the leader has its
// core suspended: a request that reaches the core meanwhile gets a 503
// "not the leader".
var errNotLeader error = &delaystore.NotLeaderError{}

// defaultClusterStatusWait is how long INFO waits for the members'
// answers to CLUSTER.STATUS.
const defaultClusterStatusWait = 500 * time.Millisecond

// clusterStatusGrace is how long INFO waits for the other members once a
// quorum of them answered: a member that is down costs that, not the
// whole ClusterStatusWait, so that INFO answers within a client's short
// timeout while the cluster serves. A live member slower than that shows
// as not answered.
const clusterStatusGrace = 100 * time.Millisecond

// resumeWait bounds how long a new leader waits for its store to open
// before it lets clients in anyway (they then get 503s until it is up).
const resumeWait = 30 * time.Second

// onLeadership is the Cluster's leadership callback: serve while leader.
// Calls are serial (see Cluster.WatchLeadership).
func (s *Service) onLeadership(leader bool) {
	if s.closing.Load() {
		return
	}
	s.m.leaderChanges.Inc()
	if leader {
		s.log.Info("cluster leader: serving ingest, acks and the API, and delivering")
		if err := s.startServing(); err != nil {
			s.stepDown(err)
		}
		return
	}
	s.log.Info("not the cluster leader: no longer serving")
	if err := s.stopServing(errNotLeader); err != nil {
		s.log.Warn("stopping serving", "err", err)
	}
}

// stepDownWait bounds how long a leader that cannot serve waits for
// another node to take its leadership over.
const stepDownWait = 10 * time.Second

// stepDown undoes a start of serving that failed and hands the leadership
// over. A leader that does not serve must not keep it: under its lease it
// would deliver while ingest and the API answered no responders, and no
// other node would serve meanwhile. If this node becomes leader again, it
// tries again then.
func (s *Service) stepDown(cause error) {
	s.log.Error("cannot serve as cluster leader: handing the leadership over", "err", cause)
	if err := s.stopServing(errNotLeader); err != nil {
		s.log.Warn("stopping serving", "err", err)
	}
	ctx, cancel := context.WithTimeout(s.closeCtx, stepDownWait)
	defer cancel()
	if err := s.cluster.StepDown(ctx); err != nil && s.closeCtx.Err() == nil {
		s.log.Error("could not hand the leadership over: this node leads, and serves nothing", "err", err)
	}
}

// startServing subscribes to the acks, resumes the core (a new generation
// on the replicated store, which holds everything committed), waits for it
// to take work, and registers the micro service: ingest and the API. An
// error means it does not serve; stopServing undoes what it started.
func (s *Service) startServing() error {
	s.serveMu.Lock()
	defer s.serveMu.Unlock()
	if s.serving {
		return nil
	}
	s.serving = true
	// NB: bound before the core resumes, so to the leadership its store
	// handle belongs to or an earlier one, whose check then fails: the
	// work of this leadership acts under its own lease only.
	check := s.cluster.LeaseCheck()
	s.lease.Store(&check)
	if err := s.subscribeAcks(); err != nil {
		return err
	}
	// NB: every topic is frozen until the serve hook has read what the
	// last leader left (see OnServe).
	s.freezeAll()
	c := s.core.Load()
	c.Resume()
	ctx, cancel := context.WithTimeout(s.closeCtx, resumeWait)
	err := c.WaitUp(ctx)
	cancel()
	if s.closeCtx.Err() != nil {
		return nil // Close is under way, and stops what was started
	}
	if err != nil {
		s.log.Warn("serving before the store is up: ingest answers 503 until it is", "err", err)
	}
	if s.onServe != nil {
		if err := s.onServe(); err != nil {
			return err
		}
	}
	if err := s.register(); err != nil {
		return err
	}
	// NB: flushed before it says it leads, so that whoever sees Leader
	// (or /leader) and then sends a request finds the subscriptions on
	// the server, not "no responders". A flush that fails (the
	// connection is down) changes nothing there: the subscriptions are
	// sent again on reconnect. So it is no reason to step down.
	if err := s.nc.Flush(); err != nil {
		s.log.Warn("serving as leader before the NATS server confirmed the subscriptions", "err", err)
	}
	s.leading.Store(true)
	return nil
}

// stopServing stops the micro service (its endpoints drain: requests
// taken are answered), suspends the core (the writer answers what it
// took, the dispatcher and the janitor stop), then drains the ack
// subscriptions, which the dispatcher needed until it stopped.
func (s *Service) stopServing(reason error) error {
	s.serveMu.Lock()
	defer s.serveMu.Unlock()
	if !s.serving {
		return nil
	}
	s.serving = false
	s.leading.Store(false)
	s.lease.Store(nil)
	s.freezeAll()
	var errs []error
	if s.svc != nil {
		errs = append(errs, s.svc.Stop())
		s.svc = nil
	}
	s.core.Load().Suspend(reason)
	for _, sub := range s.ackSubs {
		errs = append(errs, drain(sub, s.nc))
	}
	s.ackSubs = nil
	return errors.Join(errs...)
}

// Leader reports whether this Service serves ingest, acks and the API: a
// Service that is not a node of a cluster always does, a node only while
// it is the leader and holds its lease, so that at most one node says so
// at any moment, a node resumed from a pause included.
func (s *Service) Leader() bool {
	return s.cluster == nil || (s.leading.Load() && s.holdsLease())
}

// holdsLease reports whether this node holds the leadership lease now, in
// the leadership it serves in (see Cluster.LeaseCheck): a node that lost
// its leadership and won it back before it stopped the work of the first
// one holds the lease of the second only.
func (s *Service) holdsLease() bool {
	if s.cluster == nil {
		return true
	}
	check := s.lease.Load()
	return check != nil && (*check)()
}

// Leads reports whether this Service holds the subscriptions of the one
// that serves: always on a single node, on a node of a cluster while it
// is the Raft leader, whether or not its lease holds this moment. A
// starved leader's lease lapses and comes back without an election; what
// it is asked meanwhile waits for the lease (see mayAnswer), as on the
// subscriptions its service keeps, rather than finding nobody subscribed.
func (s *Service) Leads() bool {
	return s.cluster == nil || s.leading.Load()
}

// leaseWait bounds how long a request waits for a lease that lapsed
// while this node leads: about a lease renewal's round trip.
const leaseWait = 500 * time.Millisecond

// mayAnswer reports whether this Service may answer a request now. A node
// of a cluster answers only under its leadership lease: a request that
// reached a node that was paused meanwhile, or lost its leadership and has
// not noticed yet, gets no answer read from a store that may be stale,
// but the 503 of answering.
func (s *Service) mayAnswer() bool {
	if s.holdsLease() {
		return true
	}
	return s.cluster.AwaitLease(leaseWait) && s.holdsLease()
}

// answering is nil when this Service may answer a request now (see
// mayAnswer), else the 503 that says this node does not lead, naming the
// leader it knows of.
//
// A request over NATS gets it too, rather than silence: the leader that
// took over subscribes in a queue group of its own term, so it gets the
// request as well only if it subscribed before the request was sent, and
// a new leader subscribes only once it has applied what was committed.
// A request taken between this node's loss of the leadership and the
// drain of its subscriptions (a transfer, an election) reached no other
// node, and silence left its publisher to its timeout. When the new
// leader did take it as well, the publisher keeps the first answer; a 503
// that comes first makes it ask again, as any 503 does (with the same
// Delay-Id, the same message).
func (s *Service) answering() error {
	if s.mayAnswer() {
		return nil
	}
	return fmt.Errorf("%w: %s", wire.ErrUnavailable, delaystore.NotLeaderText(&delaystore.NotLeaderError{Leader: s.cluster.Status().LeaderID}))
}

// queueGroup is the queue group of the ingest and API subscriptions. A
// node of a cluster subscribes in a group of its own for each term it
// leads: a leader that was paused still holds its subscriptions until it
// notices it no longer leads, and in a group of its own it cannot take
// requests away from the new leader, which gets every one as well.
func (s *Service) queueGroup() string {
	if s.cluster == nil {
		return s.cfg.QueueGroup
	}
	st := s.cluster.Status()
	return fmt.Sprintf("%s.%s.%d", s.cfg.QueueGroup, st.ID, st.Term)
}

// Role is the node's role in its cluster (leader, follower, candidate),
// or "" when the Service is not a node of a cluster.
func (s *Service) Role() string {
	if s.cluster == nil {
		return ""
	}
	return s.cluster.Status().Role
}

// handleClusterStatus answers CLUSTER.STATUS with this node's own status,
// on every node. A plain subscription, not a queue group: a
// requester gathering replies hears every node.
func (s *Service) handleClusterStatus(m *nats.Msg) {
	if m.Reply == "" {
		return
	}
	body, err := json.Marshal(s.cluster.Status())
	if err != nil {
		s.respondErr(m, err)
		return
	}
	_ = s.nc.Publish(m.Reply, body)
}

// gatherStatus asks every node for its status and returns the answers by
// node id: until every member in peers answered, wait passed, or
// clusterStatusGrace passed after a quorum of them answered.
func (s *Service) gatherStatus(peers []wire.ClusterPeer, wait time.Duration) map[string]wire.NodeStatus {
	got := map[string]wire.NodeStatus{}
	inbox := s.nc.NewInbox()
	ch := make(chan *nats.Msg, 2*len(peers)+8) // one answer per node; more are dropped by nats.go, reported as slow
	sub, err := s.nc.ChanSubscribe(inbox, ch)
	if err != nil {
		return got
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := s.nc.PublishRequest(s.cfg.APIPrefix+"."+wire.VerbClusterStatus, inbox, nil); err != nil {
		return got
	}
	deadline := time.Now().Add(wait)
	timer := time.NewTimer(wait)
	defer timer.Stop()
	graced := false
	for len(got) < len(peers) {
		select {
		case m := <-ch:
			var st wire.NodeStatus
			if json.Unmarshal(m.Data, &st) == nil && st.ID != "" {
				got[st.ID] = st
			}
			if !graced && len(got) >= len(peers)/2+1 {
				graced = true
				timer.Reset(min(clusterStatusGrace, time.Until(deadline)))
			}
		case <-timer.C:
			return got
		}
	}
	return got
}

// ClusterInfo is INFO's cluster object on any node, the leader or not:
// this node's view, and each member's answer to CLUSTER.STATUS with its
// replication lag. Nil outside a cluster.
func (s *Service) ClusterInfo() *wire.ClusterInfo {
	if s.cluster == nil {
		return nil
	}
	return s.clusterInfo()
}

// clusterInfo is INFO's cluster object: this node's view, and each
// member's answer to CLUSTER.STATUS with its replication lag.
func (s *Service) clusterInfo() *wire.ClusterInfo {
	me := s.cluster.Status()
	ci := &wire.ClusterInfo{
		ID: me.ID, Role: me.Role, LeaderID: me.LeaderID, Term: me.Term,
		CommitIndex: me.CommitIndex, AppliedIndex: me.AppliedIndex,
	}
	answers := s.gatherStatus(me.Peers, s.cfg.ClusterStatusWait)
	answers[me.ID] = me
	for _, p := range me.Peers {
		pi := wire.PeerInfo{ID: p.ID, Addr: p.Addr, Voter: p.Voter}
		if st, ok := answers[p.ID]; ok {
			pi.Answered, pi.Role, pi.AppliedIndex, pi.HTTP = true, st.Role, st.AppliedIndex, st.HTTP
			lag := uint64(0)
			if me.CommitIndex > st.AppliedIndex {
				lag = me.CommitIndex - st.AppliedIndex
			}
			pi.Lag = &lag
		}
		ci.Peers = append(ci.Peers, pi)
	}
	slices.SortFunc(ci.Peers, func(a, b wire.PeerInfo) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	return ci
}

// apiClusterAdd adds a voting member: CLUSTER.ADD, on the leader.
func (s *Service) apiClusterAdd(req micro.Request) (any, error) {
	var r wire.ClusterAddRequest
	if err := decodeRequest(req.Data(), &r); err != nil {
		return nil, err
	}
	var bad []string
	if r.ID == "" {
		bad = append(bad, `"id" is empty: want the new node's --node-id`)
	}
	if _, port, err := net.SplitHostPort(r.Addr); err != nil || port == "" || port == "0" {
		bad = append(bad, fmt.Sprintf(`"addr" %q: want the new node's cluster address, host:port, such as 10.0.0.4:7000`, r.Addr))
	}
	if len(bad) > 0 {
		return nil, badRequest("%s", strings.Join(bad, "; "))
	}
	ctx, cancel := context.WithTimeout(context.Background(), apiTimeout)
	defer cancel()
	if err := s.cluster.AddVoter(ctx, r.ID, r.Addr); err != nil {
		return nil, clusterChangeError("adding "+r.ID, err)
	}
	return wire.ClusterChangeReply{Peers: s.cluster.Status().Peers}, nil
}

// apiClusterRemove removes a member: CLUSTER.REMOVE, on the leader.
func (s *Service) apiClusterRemove(req micro.Request) (any, error) {
	var r wire.ClusterRemoveRequest
	if err := decodeRequest(req.Data(), &r); err != nil {
		return nil, err
	}
	if r.ID == "" {
		return nil, badRequest(`"id" is empty: want the --node-id of the member to remove`)
	}
	known := false
	for _, p := range s.cluster.Status().Peers {
		known = known || p.ID == r.ID
	}
	if !known {
		return nil, fmt.Errorf("%w: no member with id %q", wire.ErrNotFound, r.ID)
	}
	ctx, cancel := context.WithTimeout(context.Background(), apiTimeout)
	defer cancel()
	if err := s.cluster.RemoveServer(ctx, r.ID); err != nil {
		return nil, clusterChangeError("removing "+r.ID, err)
	}
	return wire.ClusterChangeReply{Peers: s.cluster.Status().Peers}, nil
}

// clusterChangeError is the answer to a membership change that failed:
// a 400 or 503 as the Cluster said, else a 503 (the change may be retried).
func clusterChangeError(what string, err error) error {
	if errors.Is(err, wire.ErrBadRequest) || errors.Is(err, wire.ErrUnavailable) {
		return fmt.Errorf("%s: %w", what, err)
	}
	return unavailable("%s: %v", what, err)
}
