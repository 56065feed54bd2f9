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

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/delaystore/storetest"
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
	c.commitOnLeader("a", "1")
	c.appliedEverywhere()
	leader := c.waitLeader()
	for i, n := range nodes {
		if n == leader {
			failing[i].Break()
		}
	}
	err := commitPairs(leader.node.Store(), "b", "2")
	if errors.Is(err, ErrNotLeader) {
		// It lost leadership first (an election under load): the entry
		// then reaches it from the new leader, and applying it fails there.
		t.Logf("%s lost leadership before the commit: %v", leader.id, err)
		others := &testCluster{t: t}
		for _, n := range nodes {
			if n != leader {
				others.nodes = append(others.nodes, n)
			}
		}
		others.commitOnLeader("b", "2")
	} else if !errors.Is(err, delaystore.ErrFailed) || !errors.Is(err, ErrApplyFailed) {
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
	l2 := others.commitOnLeader("d", "4")
	for _, k := range []string{"a", "b", "d"} {
		if _, err := l2.local.Get([]byte(k)); err != nil {
			t.Errorf("new leader lacks %q: %v", k, err)
		}
	}
}

// WatchLeadership says true only once the new leader has applied every
// entry committed before: a Repository opened in the callback sees every
// message. Calls alternate, starting with true, and Close ends with false.
// Elections of their own (under load) may add calls, which must keep to
// the same rules.
func TestNode_WatchLeadership_TrueAfterBarrier(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, engineCrashable, testConfig())
	w := c.newWriter()
	w.schedule("a", 300, 30)
	w.close()
	leader := c.waitLeader()

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
	byNode := map[string][]event{}
	for _, ev := range events {
		byNode[ev.id] = append(byNode[ev.id], ev)
		if ev.leader && ev.pending != 300 {
			t.Errorf("%s saw %d pending when told it leads, want 300", ev.id, ev.pending)
		}
	}
	for id, evs := range byNode {
		for i, ev := range evs {
			if ev.leader != (i%2 == 0) {
				t.Fatalf("%s's calls: %+v, want true, false, true, ...", id, evs)
			}
		}
	}
	if mine := byNode[l2.id]; len(mine) < 2 || mine[len(mine)-1].leader {
		t.Fatalf("new leader's calls: %+v, want true, ..., false (on Close)", mine)
	}
}
