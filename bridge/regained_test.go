package bridge_test

import (
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge/wire"
)

// regainedCluster is a Cluster whose node leads from the start and can
// lose its leadership and win it back (regain) before its watch tells the
// Service either: meanwhile the node holds the lease again, but of a new
// leadership, in which another leader may have written in between. tell
// then reports the loss and the gain. Its watch goroutine is its own:
// cancel waits for it.
type regainedCluster struct {
	fixedMembership
	epoch  atomic.Uint64
	events chan bool
	quit   chan struct{}
	wg     sync.WaitGroup
}

func newRegainedCluster() *regainedCluster {
	c := &regainedCluster{events: make(chan bool, 4), quit: make(chan struct{})}
	c.epoch.Store(1)
	c.events <- true
	return c
}

func (c *regainedCluster) regain() { c.epoch.Add(2) }

func (c *regainedCluster) tell() {
	c.events <- false
	c.events <- true
}

func (c *regainedCluster) WatchLeadership(f func(bool)) func() {
	c.wg.Go(func() {
		for {
			select {
			case <-c.quit:
				return
			case leader := <-c.events:
				f(leader)
			}
		}
	})
	return func() {
		close(c.quit)
		c.wg.Wait()
	}
}

// LeaseCheck is bound to the leadership under way at the call.
func (c *regainedCluster) LeaseCheck() func() bool {
	e := c.epoch.Load()
	return func() bool { return c.epoch.Load() == e }
}

func (c *regainedCluster) AwaitLease(time.Duration) bool { return true }

func (c *regainedCluster) Status() wire.NodeStatus {
	return wire.NodeStatus{ID: "nodea", Role: wire.RoleLeader, LeaderID: "nodea"}
}

// A node that lost its leadership and won it back before its Service
// was told still runs the work of its first leadership, on what it read
// then: another leader may have settled its messages in between. That
// work must act on nothing under the new leadership's lease: a message
// that falls due then is held back (fenced), requests get a 503, and once
// the Service has been told, the new leadership's work delivers the
// message and settles its ACK. Before, the node's lease, held again, let
// the first leadership's dispatcher deliver and its API answer.
func TestService_LeadershipRegainedBeforeNoticing_FirstLeadershipActsOnNothing(t *testing.T) {
	c := newRegainedCluster()
	h := startNode(t, c)
	var delivered atomic.Int64
	sub, err := h.Conn.Subscribe("regained.x", func(m *nats.Msg) {
		delivered.Add(1)
		_ = m.Respond([]byte("+ACK"))
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := h.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg("delay.regained.x")
	m.Header.Set(wire.HeaderDelay, "2s")
	rep, err := h.Conn.RequestMsg(m, 5*time.Second)
	if err != nil || rep.Header.Get(wire.HeaderServiceErrorCode) != "" {
		t.Fatalf("schedule: %v %q", err, rep.Header.Get(wire.HeaderServiceError))
	}
	due := time.Now().Add(2 * time.Second) // at or after its fire time
	c.regain()
	waitFor(t, "the message to fall due", func() bool { return time.Now().After(due) })
	// After that, the dispatcher's next turn delivers it, or is fenced.
	turns := h.Service.Stats().FencedPasses
	waitFor(t, "a turn of the dispatcher after the message fell due", func() bool {
		return h.Service.Stats().FencedPasses > turns || delivered.Load() > 0
	})
	if n := delivered.Load(); n != 0 {
		t.Fatalf("the first leadership's dispatcher delivered %d under the new leadership's lease", n)
	}
	if code, _ := requestStatus(t, h.Conn, wire.DefaultAPIPrefix+"."+wire.VerbInfo); code != "503" {
		t.Fatalf("INFO to the first leadership's work: code %q, want 503", code)
	}
	c.tell()
	waitFor(t, "the delivery by the new leadership's work", func() bool { return delivered.Load() > 0 })
	waitFor(t, "the ACK to settle the message", func() bool { return h.Service.Stats().Acked == 1 })
}

// A node of a fleet's cell that starts to serve holds every partition
// frozen until it has read the fleet's record (OnServe); what its routes
// hand it meanwhile gets a 503 that says so, not that a partition is
// moving between cells, which none is. Once the record is read, the same
// message is taken.
func TestService_StartingToServe_FrozenAnswerSaysSo(t *testing.T) {
	c := newRegainedCluster()
	h := startNode(t, c)
	var hold atomic.Bool
	entered, release := make(chan struct{}), make(chan struct{})
	var released sync.Once
	free := func() { released.Do(func() { close(release) }) }
	t.Cleanup(free) // NB: before the Service's Close, which waits for the hook
	if err := h.Service.OnServe(func() error {
		if hold.Load() {
			close(entered)
			<-release
		}
		return h.Service.SetFrozen(nil)
	}); err != nil {
		t.Fatal(err)
	}
	hold.Store(true)
	c.regain()
	c.tell()
	<-entered
	answers := make(chan *nats.Msg, 4)
	sub, err := h.Conn.ChanSubscribe("_INBOX.starting.>", answers)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := h.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
	ingest := func(reply string) *nats.Msg {
		h.Service.Ingest(&handed{nc: h.Conn, subject: "delay.starting.x", reply: reply, header: nats.Header{"Delay": {"1h"}}, data: []byte("x")})
		select {
		case m := <-answers:
			return m
		case <-time.After(10 * time.Second):
			t.Fatal("no answer")
			return nil
		}
	}
	m := ingest("_INBOX.starting.1")
	code, text := m.Header.Get(wire.HeaderServiceErrorCode), m.Header.Get(wire.HeaderServiceError)
	if code != "503" || strings.Contains(text, "moving") || !strings.Contains(text, "starting or stopping") {
		t.Fatalf("ingest while the node starts to serve: %s %q, want a 503 saying it is starting or stopping", code, text)
	}
	free()
	waitFor(t, "the node to serve again", h.Service.Leader)
	if m := ingest("_INBOX.starting.2"); m.Header.Get(wire.HeaderServiceErrorCode) != "" {
		t.Fatalf("ingest once it serves: %q", m.Header.Get(wire.HeaderServiceError))
	}
}
