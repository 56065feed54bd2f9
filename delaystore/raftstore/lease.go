package raftstore

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// A leadership lease: the span of time in which this node knows that no
// other node can lead. Raft's own leadership is a belief: a process that
// was paused (SIGSTOP, a long GC or VM stall, a frozen container) still
// believes, when it resumes, what it believed before, and acts on it until
// a message from the new leader, or a failed heartbeat, tells it
// otherwise. The lease is what a node checks before an effect that others
// observe (a delivery, an answer), so that a pause of any length cannot
// make a deposed leader act.
//
// Why it holds: a write proposed at time t and committed was stored by a
// quorum, each member of it at or after t and in this node's term. Another
// node can lead only with the votes of a quorum, which shares a member with
// the first. That member votes for another node only once it no longer
// knows of a leader (hashicorp/raft refuses votes while it does, unless the
// leader itself hands leadership over): a follower after its heartbeat
// timeout, at least HeartbeatTimeout after it last heard from this node;
// this node after it stepped down, at least LeaderLeaseTimeout after it
// last heard from a quorum. So no other node leads before t plus the
// shorter of the two, LeaderLeaseTimeout (Config.Validate keeps it at most
// HeartbeatTimeout). The lease runs to t + leaseFraction of it, measured
// on the monotonic clock, which counts the time a process spends stopped.
// A resumed node finds its lease run out and does nothing until a new
// commit proves its leadership again, which a deposed node cannot get.
//
// Every commit renews the lease, and so does every heartbeat that a
// quorum answers (heartbeat.go); a leader that neither commits nor hears
// answers proposes a barrier when half of the lease is left. A node that hands its leadership over ends
// its lease first, since a transfer lets the others elect at once.
type lease struct {
	// base is the monotonic clock's origin for until.
	base time.Time
	// length is how long a commit's proof lasts.
	length time.Duration
	// until is the end of the lease, in nanoseconds since base; the lease
	// is held while the clock reads less. 0: not held.
	until atomic.Int64

	mu sync.Mutex
	// term counts the grants; current is the one that may be extended, 0
	// while none may (this node does not lead, or hands over).
	term, current uint64
}

// leaseFraction is the share of LeaderLeaseTimeout a lease lasts: the rest
// is a margin for the difference between the nodes' clock rates and the
// time between a follower storing an entry and this node reading the
// clock after it.
const leaseFraction = 0.9

func newLease(leaderLeaseTimeout time.Duration) *lease {
	return &lease{base: time.Now(), length: time.Duration(float64(leaderLeaseTimeout) * leaseFraction)}
}

// now reads the monotonic clock.
func (l *lease) now() int64 { return int64(time.Since(l.base)) }

// held reports whether the lease is held now. It is cheap enough to call
// before every publish.
func (l *lease) held() bool { return l.now() < l.until.Load() }

// remaining is how long the lease is held from now; 0 if it is not.
func (l *lease) remaining() time.Duration {
	return max(time.Duration(l.until.Load()-l.now()), 0)
}

// grant opens a new term of the lease, once this node leads, and returns
// it. The lease is held only once a commit proposed in this term extends
// it.
func (l *lease) grant() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.term++
	l.current = l.term
	return l.term
}

// revoke ends the lease at once, and keeps commits proposed before from
// extending it.
func (l *lease) revoke() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.current = 0
	l.until.Store(0)
}

// begin is called just before a proposal: it returns the term to extend
// and the time the proof will date from.
func (l *lease) begin() (term uint64, start int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.current, l.now()
}

// extend records that a proposal made at start, in term, committed.
func (l *lease) extend(term uint64, start int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if term == 0 || term != l.current {
		return
	}
	if end := start + int64(l.length); end > l.until.Load() {
		l.until.Store(end)
	}
}

// isCurrent reports whether term is still the lease's current term.
func (l *lease) isCurrent(term uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return term != 0 && term == l.current
}

// HoldsLease reports whether this node holds the leadership lease now: it
// leads, and a commit it proposed less than the lease's length ago (90% of
// LeaderLeaseTimeout, measured on the monotonic clock) has committed, so
// no other node can lead yet. Check it right before each effect that
// others observe; a node resumed from a pause fails it until it proves its
// leadership again.
func (n *Node) HoldsLease() bool { return n.lease.held() }

// LeaseCheck returns HoldsLease bound to the leadership under way (see
// IsLeader): the check reports false from the moment that leadership
// ends, even once this node leads again. Work started in one leadership
// acts on what it read then, which a leader in between may have changed;
// it must not act under the lease of the next. Called while this node does
// not lead, it returns a check that always reports false. The check is
// cheap enough to call before every publish.
func (n *Node) LeaseCheck() func() bool {
	n.mu.Lock()
	epoch, ready := n.mu.epoch, n.mu.ready
	n.mu.Unlock()
	if !ready {
		return func() bool { return false }
	}
	return func() bool {
		// NB: epochs only grow, so one read on each side of the lease's
		// shows that the lease read was of this leadership.
		return n.leaderEpoch.Load() == epoch && n.lease.held() && n.leaderEpoch.Load() == epoch
	}
}

// renewLease keeps the lease of term held while this node leads: when half
// of it is left, and no commit renewed it meanwhile, it proposes a barrier.
// It returns once term ends or the node closes.
func (n *Node) renewLease(term uint64) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-n.done:
			return
		case <-timer.C:
		}
		if !n.lease.isCurrent(term) {
			return
		}
		if wait := n.lease.remaining() - n.lease.length/2; wait > 0 {
			timer.Reset(wait)
			continue
		}
		if err := n.proveLeadership(); err != nil {
			if errors.Is(err, raft.ErrRaftShutdown) {
				return
			}
			// Not the leader any more, most likely: the watch of Raft's
			// leadership ends the term. Meanwhile, do not spin.
			timer.Reset(n.lease.length / 8)
			continue
		}
		timer.Reset(0)
	}
}

// proveLeadership proposes a barrier and, once it commits, extends the
// lease from the moment it was proposed.
func (n *Node) proveLeadership() error {
	term, start := n.lease.begin()
	if err := n.await(n.raft.Barrier(0)); err != nil {
		return err
	}
	n.lease.extend(term, start)
	return nil
}

// await waits for f's answer, or for Close. NB: Raft hands a committed
// barrier (or membership change) to its FSM loop to answer, and that loop
// ends at Shutdown without answering what it still holds; such a future
// would keep a goroutine waiting for it, and Close waiting for that
// goroutine, forever. So the wait is in a goroutine of its own, which
// Close does not wait for: in that race it outlives the node, blocked on
// an answer that never comes, and is all that is left of it.
func (n *Node) await(f raft.Future) error { return n.awaitCtx(context.Background(), f) }

// awaitCtx is await that also ends with ctx.
func (n *Node) awaitCtx(ctx context.Context, f raft.Future) error {
	errc := make(chan error, 1)
	go func() { errc <- f.Error() }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-n.done:
		return raft.ErrRaftShutdown
	}
}

// AwaitLease waits up to timeout for the lease while this node leads and
// serves, and reports whether it holds it. A leader whose renewal was slow
// gets it back within a round trip; a node that no longer leads returns at
// once.
func (n *Node) AwaitLease(timeout time.Duration) bool {
	if n.lease.held() {
		return true
	}
	deadline := time.Now().Add(timeout)
	for n.IsLeader() && time.Now().Before(deadline) {
		select {
		case <-n.done:
			return false
		case <-time.After(time.Millisecond):
		}
		if n.lease.held() {
			return true
		}
	}
	return false
}
