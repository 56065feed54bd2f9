package raftstore

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A lease is held only after a commit of its current term extends it, for
// the lease's length from the moment the commit was proposed; revoking it
// ends it at once, and a commit proposed before a revoke or in an earlier
// term extends nothing.
func TestLease_HeldOnlyUnderAProofOfItsTerm(t *testing.T) {
	l := newLease(time.Hour)
	if l.held() {
		t.Fatal("held before any grant")
	}
	term, start := l.begin()
	l.extend(term, start)
	if l.held() {
		t.Fatal("held after a commit proposed before the grant")
	}

	term = l.grant()
	if l.held() {
		t.Fatal("held on grant, before any commit")
	}
	got, start := l.begin()
	if got != term {
		t.Fatalf("begin: term %d, want %d", got, term)
	}
	l.extend(term, start)
	if !l.held() || l.remaining() > l.length {
		t.Fatalf("after a commit: held %v, remaining %v of %v", l.held(), l.remaining(), l.length)
	}

	// A proof older than the lease's length proves nothing now.
	stale := newLease(time.Second)
	st := stale.grant()
	stale.extend(st, stale.now()-int64(stale.length)-1)
	if stale.held() {
		t.Fatal("held on a proof older than the lease's length")
	}

	l.revoke()
	if l.held() {
		t.Fatal("held after revoke")
	}
	l.extend(term, l.now())
	if l.held() {
		t.Fatal("a commit of the revoked term extended the lease")
	}
	next := l.grant()
	l.extend(term, l.now())
	if l.held() {
		t.Fatal("a commit of an earlier term extended the lease of a new one")
	}
	l.extend(next, l.now())
	if !l.held() {
		t.Fatal("a commit of the new term did not extend the lease")
	}
}

// The lease lasts a fraction of LeaderLeaseTimeout, the time within which
// no other node can be elected after a quorum last heard from this one.
func TestLease_ShorterThanLeaderLeaseTimeout(t *testing.T) {
	for _, llt := range []time.Duration{10 * time.Millisecond, 500 * time.Millisecond, 5 * time.Second} {
		if got := newLease(llt).length; got >= llt || got < llt/2 {
			t.Errorf("LeaderLeaseTimeout %v: lease %v, want below it and above half", llt, got)
		}
	}
}

// leaseHolders samples every node's HoldsLease until stop, and counts the
// samples in which more than one node held it.
type leaseHolders struct {
	samples, overlaps atomic.Int64
	stop              chan struct{}
	stopOnce          sync.Once
	done              sync.WaitGroup
}

func watchLeaseHolders(c *testCluster) *leaseHolders {
	h := &leaseHolders{stop: make(chan struct{})}
	h.done.Go(func() {
		for {
			select {
			case <-h.stop:
				return
			default:
			}
			holders := 0
			for _, n := range c.nodes {
				if n.node != nil && n.node.HoldsLease() {
					holders++
				}
			}
			h.samples.Add(1)
			if holders > 1 {
				h.overlaps.Add(1)
			}
			time.Sleep(100 * time.Microsecond)
		}
	})
	return h
}

func (h *leaseHolders) close() {
	h.stopOnce.Do(func() { close(h.stop) })
	h.done.Wait()
}

// A leader cut off from the others loses its lease before any other node
// can hold one: it cannot commit, so nothing renews it, and a new leader
// holds its own only after its first commit. At no sample do two nodes
// hold the lease.
func TestCluster_IsolatedLeader_LosesLeaseBeforeAnotherHoldsOne(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, enginePebble, testConfig())
	old := c.waitLeader()
	waitFor(t, 10*time.Second, "the leader's lease", old.node.HoldsLease)
	h := watchLeaseHolders(c)
	defer h.close()

	old.node.mux.isolate(true)
	others := &testCluster{t: t}
	for _, n := range c.nodes {
		if n != old {
			others.nodes = append(others.nodes, n)
		}
	}
	leader := others.waitLeader()
	waitFor(t, 10*time.Second, "the new leader's lease", leader.node.HoldsLease)
	if old.node.HoldsLease() {
		t.Fatal("the isolated leader still holds its lease while another holds one")
	}
	old.node.mux.isolate(false)
	h.close()
	if n := h.overlaps.Load(); n > 0 {
		t.Fatalf("two nodes held the lease in %d of %d samples", n, h.samples.Load())
	}
	t.Logf("%d samples, none with two holders", h.samples.Load())
}

// A leader that hands its leadership over ends its lease before the
// transfer, which lets the target be elected without waiting for it.
func TestCluster_TransferLeadership_EndsLeaseFirst(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, enginePebble, testConfig())
	old := c.waitLeader()
	waitFor(t, 10*time.Second, "the leader's lease", old.node.HoldsLease)
	h := watchLeaseHolders(c)
	defer h.close()

	ctx := t.Context()
	id, err := old.node.TransferLeadership(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if old.node.HoldsLease() {
		t.Fatal("the old leader holds its lease after handing leadership over")
	}
	var leader *testNode
	for _, n := range c.nodes {
		if n.id == id {
			leader = n
		}
	}
	if leader == nil {
		t.Fatalf("transfer named %q, not a node", id)
	}
	waitFor(t, 10*time.Second, "the new leader's lease", leader.node.HoldsLease)
	h.close()
	if n := h.overlaps.Load(); n > 0 {
		t.Fatalf("two nodes held the lease in %d of %d samples", n, h.samples.Load())
	}
}

// An idle leader keeps its lease: with no commit to renew it, barriers do,
// so the lease's end moves on by more than its length while nothing is
// written.
func TestCluster_IdleLeader_RenewsLease(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.LeaderLeaseTimeout = 200 * time.Millisecond
	c := startCluster(t, 3, enginePebble, cfg)
	leader := c.waitLeader()
	waitFor(t, 10*time.Second, "the leader's lease", leader.node.HoldsLease)
	first := leader.node.lease.until.Load()
	waitFor(t, 10*time.Second, "renewals while idle", func() bool {
		return leader.node.lease.until.Load() > first+3*int64(leader.node.lease.length)
	})
	waitFor(t, 10*time.Second, "the lease held", leader.node.HoldsLease)
}
