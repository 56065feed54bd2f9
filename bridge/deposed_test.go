package bridge_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge"
	"github.com/natsdelay/natsdelay/bridge/bridgetest"
	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/delaystore"
)

// deposableCluster is a Cluster whose node leads from the start until
// depose: from then on it holds no lease and knows another leader, while
// it has not yet told the Service (a Raft node's watch reports the loss a
// moment after Raft knows it). Its watch goroutine is its own: cancel
// waits for it.
type deposableCluster struct {
	fixedMembership
	deposed atomic.Bool
	wg      sync.WaitGroup
}

func (c *deposableCluster) WatchLeadership(f func(bool)) func() {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		f(true)
	}()
	return c.wg.Wait
}

func (c *deposableCluster) LeaseCheck() func() bool { return func() bool { return !c.deposed.Load() } }

func (c *deposableCluster) AwaitLease(time.Duration) bool { return !c.deposed.Load() }

func (c *deposableCluster) Status() wire.NodeStatus {
	if c.deposed.Load() {
		return wire.NodeStatus{ID: "nodea", Role: wire.RoleFollower, LeaderID: "nodeb"}
	}
	return wire.NodeStatus{ID: "nodea", Role: wire.RoleLeader, LeaderID: "nodea"}
}

// fixedMembership is the membership part of a test's Cluster: it
// changes nothing.
type fixedMembership struct{}

func (fixedMembership) AddVoter(context.Context, string, string) error {
	return errors.New("test: no membership changes")
}

func (fixedMembership) RemoveServer(context.Context, string) error {
	return errors.New("test: no membership changes")
}

func (fixedMembership) StepDown(context.Context) error { return errors.New("test: no step-down") }

// A node that lost its leadership and has not noticed yet still holds the
// subscriptions of the leader, and takes requests that no other node got:
// a new leader subscribes only once it has applied what was committed.
// Each gets a 503 "not the leader" naming the leader it knows, which the
// publisher retries; a node that stayed silent left the publisher to its
// timeout (seen in a 3-node cluster whose leader handed its leadership
// over under load).
func TestService_DeposedBeforeNoticing_Answers503NotLeader(t *testing.T) {
	c := &deposableCluster{}
	h := startNode(t, c)
	if code, text := requestStatus(t, h.Conn, "delay.r.x"); code != "" {
		t.Fatalf("while leading: %s %s", code, text)
	}
	c.deposed.Store(true)
	for _, subj := range []string{"delay.r.x", wire.DefaultAPIPrefix + "." + wire.VerbInfo} {
		rep, err := h.Conn.Request(subj, []byte("{}"), 10*time.Second)
		if errors.Is(err, nats.ErrTimeout) {
			t.Fatalf("%s to a deposed node: no answer", subj)
		}
		if err != nil {
			t.Fatalf("%s: %v", subj, err)
		}
		code, text := rep.Header.Get(wire.HeaderServiceErrorCode), rep.Header.Get(wire.HeaderServiceError)
		if code != "503" || !strings.HasSuffix(text, "not the leader: leader is nodeb") {
			t.Fatalf("%s to a deposed node: %q %q, want 503 \"...not the leader: leader is nodeb\"", subj, code, text)
		}
	}
}

// waitFor waits up to 30 s for cond.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 30s for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// startNode runs a Service as a node of the cluster c, on a store in
// memory that it reopens at each Resume (a Raft node's store stays the
// node's), and waits until it serves. Its ack wait is 2 s: a new
// leadership's dispatcher may deliver before the Service routes ACKs to
// it, and a delivery whose ACK was refused then goes again after it.
func startNode(t *testing.T, c bridge.Cluster) *bridgetest.Harness {
	t.Helper()
	st := bridgetest.MemStore(t)
	t.Cleanup(func() { _ = st.Close() })
	ackWait := func(cfg *bridge.Config) { cfg.Delivery.AckWait = 2 * time.Second }
	h := bridgetest.NewOn(t, unclosed{st}, ackWait, bridge.WithCluster(c), bridge.WithReopen(func() (delaystore.Store, error) { return unclosed{st}, nil }))
	waitFor(t, "the node to serve", h.Service.Leader)
	return h
}

// unclosed is a handle on a store that closing does not close, as a Raft
// node's Store is: the store is the node's.
type unclosed struct{ delaystore.Store }

func (unclosed) Close() error { return nil }
