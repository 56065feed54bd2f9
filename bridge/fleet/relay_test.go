package fleet_test

import (
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge/fleet"
	"github.com/natsdelay/natsdelay/bridge/wire"
)

// standby is a cell's service on a node of a cluster: leading (and so
// holding the serving subscriptions) or a follower, and holding its lease
// or not; it answers what it is handed as fakeService does. It keeps the
// cell's record as the replicated store would (fleet.Keeper), and runs
// the serve hook at once when it leads, as bridge.Service does when it
// serves.
type standby struct {
	*fakeService
	leads, lease bool

	mu     sync.Mutex
	record []byte
}

func (s *standby) Leader() bool { return s.leads && s.lease }
func (s *standby) Leads() bool  { return s.leads }

func (s *standby) FleetRecord() ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.record, nil
}

func (s *standby) SetFleetRecord(b []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.record = b
	return nil
}

func (s *standby) OnServe(f func() error) error {
	if s.leads && f != nil {
		return f()
	}
	return nil
}

// ask publishes a request to subject and returns its answer's error: nil
// for an answer that is not an error, the service error, or the request's
// own error (no responders, a timeout).
func ask(nc *nats.Conn, subject string) error {
	r, err := nc.Request(subject, []byte("x"), 10*time.Second)
	if err != nil {
		return err
	}
	return wire.ParseError(r.Header, r.Data)
}

// TestNode_FollowerAlone_Answers503 runs one node of cell a, a follower
// with no leader anywhere: a publish to a's partitions must get a 503
// from it, not NATS's no-responders; once a node of a leads, the
// follower's publishes reach it, forwarded, and its answers come back.
func TestNode_FollowerAlone_Answers503(t *testing.T) {
	nc := startNATS(t)
	rec := fleet.Record{Cell: "a", Partitions: 16, Epoch: 1, Owned: []fleet.Range{{From: 0, To: 15}}}
	startClusterNode(t, nc, &standby{fakeService: newFakeService()}, rec)
	if err := ask(nc, "delay.orders.1"); !errors.Is(err, wire.ErrUnavailable) {
		t.Fatalf("publish with no leader: %v, want a 503", err)
	}
	alive := make(chan *nats.Msg, 64)
	sub, err := nc.ChanSubscribe(fleet.AliveSubject, alive)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	leader := &standby{fakeService: newFakeService(), leads: true, lease: true}
	startClusterNode(t, nc, leader, rec)
	// The leader heartbeats once it has taken the cell's subscriptions.
	select {
	case <-alive:
	case <-time.After(10 * time.Second):
		t.Fatal("the leader tells the fleet nothing")
	}
	// NB: the queue group gives each publish to either node; the
	// follower forwards what it takes once it has heard the leader.
	ok := 0
	for i := 0; ok < 10; i++ {
		err := ask(nc, "delay.orders.1")
		switch {
		case err == nil:
			ok++
			received(t, leader.got, "the leader's ingest")
		case ok > 0 || !errors.Is(err, wire.ErrUnavailable) || i > 1000:
			t.Fatalf("publish %d with a leader, after %d answered: %v", i, ok, err)
		}
	}
}

// TestNode_LeaseLapsed_KeepsServing checks that a leader whose lease has
// lapsed for a moment keeps the cell's subscriptions and heartbeats, and
// hands what it takes to its service (which waits for the lease), rather
// than leaving its partitions to nobody.
func TestNode_LeaseLapsed_KeepsServing(t *testing.T) {
	nc := startNATS(t)
	heard := make(chan fleet.Status, 64)
	sub, err := nc.Subscribe(fleet.AliveSubject, func(m *nats.Msg) {
		var st fleet.Status
		if json.Unmarshal(m.Data, &st) == nil {
			select {
			case heard <- st:
			default:
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	svc := &standby{fakeService: newFakeService(), leads: true}
	startClusterNode(t, nc, svc, fleet.Record{Cell: "a", Partitions: 16, Epoch: 1, Owned: []fleet.Range{{From: 0, To: 15}}})
	select {
	case st := <-heard:
		if st.Cell != "a" {
			t.Fatalf("heard %+v", st)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a leader without its lease tells the fleet nothing")
	}
	if err := ask(nc, "delay.orders.1"); err != nil {
		t.Fatalf("publish to a leader without its lease: %v, want its service's answer", err)
	}
	if got := received(t, svc.got, "the service's ingest"); got != "$DELAY.CELL.a.IN.orders.1" {
		t.Fatalf("service got %q", got)
	}
}

// TestNode_Forward_OwnerSilent_503AfterForwardTimeout plays cell a, a
// cluster, as a heartbeat and a subscription to its forwarded subject
// that never answers: a publish that cell b forwards to it must get b's 503 once
// ForwardTimeout has passed, not wait for the publisher's timeout.
func TestNode_Forward_OwnerSilent_503AfterForwardTimeout(t *testing.T) {
	nc := startNATS(t)
	took := make(chan *nats.Msg, 4)
	sub, err := nc.ChanSubscribe(fleet.CellPrefix+".a.FWD.>", took)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	heartbeat(t, nc, fleet.Status{Record: fleet.Record{Cell: "a", Partitions: 16, Epoch: 1, Owned: []fleet.Range{{From: 0, To: 15}}}, Node: "a", Clustered: true})
	b, err := fleet.New(nc, newFakeService(), fleet.Record{Cell: "b", Partitions: 16, Epoch: 1},
		fleet.Config{Cell: "b", Heartbeat: 20 * time.Millisecond, ForwardTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := b.Close(); err != nil {
			t.Error(err)
		}
	}()
	for {
		err := ask(nc, "delay.orders.1")
		if errors.Is(err, wire.ErrUnavailable) && strings.Contains(err.Error(), "has no owner this node knows of yet") {
			continue // b has not heard a yet
		}
		if !errors.Is(err, wire.ErrUnavailable) || !strings.Contains(err.Error(), "did not answer within 200ms") {
			t.Fatalf("publish forwarded to a silent owner: %v, want the router's 503", err)
		}
		break
	}
	if m := <-took; !strings.HasPrefix(m.Reply, fleet.RelayPrefix+".") {
		t.Fatalf("forwarded with reply %q, want the router's", m.Reply)
	}
}

// startClusterNode starts the node of a cell that is a cluster.
func startClusterNode(t *testing.T, nc *nats.Conn, svc fleet.Service, rec fleet.Record) {
	t.Helper()
	n, err := fleet.New(nc, svc, rec, fleet.Config{Cell: rec.Cell, Heartbeat: 20 * time.Millisecond, Clustered: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Error(err)
		}
	})
}

// TestNode_Forward_SingleNodeCell_PublishersReply checks that a forward
// to a single-node cell keeps the publisher's reply subject: the owner
// answers the publisher directly, with no relay. Publishes that queued
// at b while it had not heard of a yet go on as a batch, whose every
// publish keeps its reply just the same.
func TestNode_Forward_SingleNodeCell_PublishersReply(t *testing.T) {
	nc := startNATS(t)
	took := make(chan *nats.Msg, 64)
	sub, err := nc.ChanSubscribe(fleet.CellPrefix+".a.FWD.>", took)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	heartbeat(t, nc, fleet.Status{Record: fleet.Record{Cell: "a", Partitions: 16, Epoch: 1, Owned: []fleet.Range{{From: 0, To: 15}}}, Node: "a"})
	startNode(t, nc, newFakeService(), fleet.Record{Cell: "b", Partitions: 16, Epoch: 1})
	for {
		if err := nc.PublishRequest("delay.orders.1", "_INBOX.mine", nil); err != nil {
			t.Fatal(err)
		}
		select {
		case m := <-took:
			replies := []string{m.Reply}
			if !strings.Contains(strings.TrimPrefix(m.Subject, fleet.CellPrefix+".a.FWD."), ".") {
				ps, err := fleet.DecodeBatch(m.Data) // <router>, no subject: a batch
				if err != nil {
					t.Fatal(err)
				}
				replies = replies[:0]
				for _, p := range ps {
					replies = append(replies, p.Reply)
				}
			}
			for _, r := range replies {
				if r != "_INBOX.mine" {
					t.Fatalf("forwarded %s with reply %q, want the publisher's", m.Subject, r)
				}
			}
			return
		case <-time.After(50 * time.Millisecond): // b has not heard a yet
		}
	}
}

// TestNode_Forward_Burst_ToCluster_NobodyServes_503AtOnce plays cell a, a
// cluster, as heartbeats alone: nobody takes its forwarded subjects (a
// cell between leaders). A burst that router b forwards to it as one
// batch must get b's 503 for every publish as soon as NATS says nobody
// took the batch, as a single forward does, not after ForwardTimeout.
func TestNode_Forward_Burst_ToCluster_NobodyServes_503AtOnce(t *testing.T) {
	nc := startNATS(t)
	hold := fleet.Partition("hold", 16)
	heartbeat(t, nc, fleet.Status{Record: fleet.Record{Cell: "a", Partitions: 16, Epoch: 1, Owned: allBut(hold, 16)}, Node: "a", Clustered: true})
	g := &gate{entered: make(chan struct{}, 1), release: make(chan struct{})}
	b, err := fleet.New(nc, g, fleet.Record{Cell: "b", Partitions: 16, Epoch: 1, Owned: []fleet.Range{{From: hold, To: hold}}},
		fleet.Config{Cell: "b", IngestPrefix: "hop", Heartbeat: 20 * time.Millisecond, ForwardTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		g.open()
		if err := b.Close(); err != nil {
			t.Error(err)
		}
	})
	const noNode = "has no node serving it now"
	for try := 0; ; try++ {
		err := ask(nc, "hop."+burstSubjects(hold, 16, 1)[0])
		if err != nil && strings.Contains(err.Error(), noNode) {
			break // b has heard of a, and forwards to it alone
		}
		if try == 3000 {
			t.Fatalf("b never forwarded to a: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	const n = 50
	_, answers := burst(t, nc, b, g, n, "_INBOX.nobody")
	refused := map[string]bool{}
	for len(refused) < n {
		select {
		case m := <-answers:
			if m.Subject == "_INBOX.nobody.hold" {
				continue // b's own partition
			}
			if err := wire.ParseError(m.Header, m.Data); !errors.Is(err, wire.ErrUnavailable) || !strings.Contains(err.Error(), noNode) {
				t.Fatalf("%s answered %v, want b's 503 that nobody serves a", m.Subject, err)
			}
			refused[m.Subject] = true
		case <-time.After(30 * time.Second):
			t.Fatalf("%d of %d batched publishers answered; the rest wait for ForwardTimeout", len(refused), n)
		}
	}
}
