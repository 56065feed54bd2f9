package raftstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"natsdelay/delaystore"
	"natsdelay/delaystore/storetest"
)

// A node that cannot apply a committed entry does not diverge silently: it
// stops (Raft shut down, Status says why), the Commit that met the fault
// fails with delaystore.ErrFailed, and the others elect a leader and go on
// without it.
func TestCluster_ApplyFails_NodeStopsLoudly(t *testing.T) {
	t.Parallel()
	var nodes []*testNode
	var lns []net.Listener
	var peers []string
	var failing []*storetest.FailingStore
	for i := range 3 {
		n, ln := newTestNode(t, fmt.Sprintf("node%d", i), enginePebble)
		fs := storetest.NewFailingStore(n.local)
		n.local = fs
		failing = append(failing, fs)
		nodes, lns, peers = append(nodes, n), append(lns, ln), append(peers, n.addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := errors.Join(openAll(ctx, nodes, lns, [][]string{peers, peers, peers}, nil)...); err != nil {
		t.Fatal(err)
	}
	c := &testCluster{t: t, nodes: nodes}
	leader := c.waitLeader()
	if err := commitPairs(leader.node.Store(), "a", "1"); err != nil {
		t.Fatal(err)
	}
	for i, n := range nodes {
		if n == leader {
			failing[i].Break()
		}
	}
	err := commitPairs(leader.node.Store(), "b", "2")
	if !errors.Is(err, delaystore.ErrFailed) || !errors.Is(err, ErrApplyFailed) {
		t.Fatalf("commit on a leader that cannot apply: %v, want ErrFailed and ErrApplyFailed", err)
	}
	waitFor(t, 10*time.Second, "the failed node to stop", func() bool {
		st := leader.node.Status()
		return st.Role == "shutdown" && strings.Contains(st.Err, "apply to local store failed")
	})
	if err := commitPairs(leader.node.Store(), "c", "3"); !errors.Is(err, delaystore.ErrFailed) {
		t.Fatalf("commit on the stopped node: %v, want ErrFailed", err)
	}

	// The others go on, with the entry the failed node could not apply.
	others := &testCluster{t: t}
	for _, n := range nodes {
		if n != leader {
			others.nodes = append(others.nodes, n)
		}
	}
	l2 := others.waitLeader()
	if err := commitPairs(l2.node.Store(), "d", "4"); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "b", "d"} {
		if _, err := l2.local.Get([]byte(k)); err != nil {
			t.Errorf("new leader lacks %q: %v", k, err)
		}
	}
}

// WatchLeadership says true only once the new leader has applied every
// entry committed before: a Repository opened in the callback sees every
// message. Calls alternate, and Close ends with false.
func TestNode_WatchLeadership_TrueAfterBarrier(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, engineCrashable, testConfig())
	leader := c.waitLeader()
	r := openRepo(t, leader.node.Store())
	scheduleN(t, r, "a", 300, 30)
	r.Close()

	type event struct {
		id      string
		leader  bool
		pending uint64
	}
	var mu sync.Mutex
	var events []event
	for _, n := range c.nodes {
		if n == leader {
			continue
		}
		cancel := n.node.WatchLeadership(func(isLeader bool) {
			ev := event{id: n.id, leader: isLeader}
			if isLeader {
				// What the service does on becoming leader.
				r := openRepo(t, n.node.Store())
				ev.pending = r.Pending()
				r.Close()
			}
			mu.Lock()
			events = append(events, ev)
			mu.Unlock()
		})
		t.Cleanup(cancel)
	}
	leader.crash()
	l2 := c.waitLeader()
	waitFor(t, 10*time.Second, "the new leader's callback", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(events) > 0
	})
	l2.stop()
	mu.Lock()
	defer mu.Unlock()
	var mine []event
	for _, ev := range events {
		if ev.id == l2.id {
			mine = append(mine, ev)
		}
	}
	if len(mine) != 2 || !mine[0].leader || mine[1].leader {
		t.Fatalf("new leader's calls: %+v, want true then false (on Close)", mine)
	}
	if mine[0].pending != 300 {
		t.Fatalf("new leader saw %d pending when told it leads, want 300", mine[0].pending)
	}
}
