package raftstore

import (
	"slices"
	"sync"

	"github.com/hashicorp/raft"
)

// Heartbeats prove leadership as commits do. A follower answers an
// AppendEntries of this node's term with success only after it took this
// node as its leader and reset its heartbeat timer, at or after the moment
// the request was sent; from then it refuses its vote to any other node
// for at least HeartbeatTimeout (see lease). So answers from enough
// followers to make a quorum with this node, to requests sent at or after
// t, prove what a commit proposed at t proves, and extend the lease the
// same way.
//
// Why it matters: Raft sends heartbeats on connections of their own,
// every tenth of HeartbeatTimeout or so, and followers answer them
// without queueing them behind the log. A leader whose commits are slow
// (a burst of writes, a slow disk on the leader, a CPU shared with the
// followers) still proves its leadership every few tens of milliseconds,
// instead of holding its deliveries and answers back until a commit
// behind the queue renews the lease. A node that is cut off or paused
// gets no answers, or answers dated before its pause, and loses the lease
// as before.

// leaseTransport is the node's transport as Raft sees it: commitWatch,
// whose AppendEntries answers also feed the lease.
type leaseTransport struct {
	*commitWatch
	n *Node
}

// AppendEntries sends one AppendEntries (a heartbeat, or entries outside
// the pipeline) and notes a successful answer as a proof of leadership
// dated from just before the send.
func (t *leaseTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	term, start := t.n.lease.begin()
	err := t.commitWatch.AppendEntries(id, target, args, resp)
	if err == nil && term != 0 && resp.Success && resp.Term == args.Term {
		t.n.answered(term, id, start)
	}
	return err
}

// AppendEntriesPipeline opens a pipeline to a follower, closed as soon as
// Raft stops taking its answers (see pipeline.go).
func (t *leaseTransport) AppendEntriesPipeline(id raft.ServerID, target raft.ServerAddress) (raft.AppendPipeline, error) {
	p, err := t.commitWatch.AppendEntriesPipeline(id, target)
	if err != nil {
		return nil, err
	}
	return t.n.pipes.add(p)
}

// answered records that follower id answered, in the lease's term, a
// request sent at start, and extends the lease to the proof that a quorum
// of the voters now gives.
func (n *Node) answered(term uint64, id raft.ServerID, start int64) {
	// NB: a lease term is granted only after n.raft is set (setLeader runs
	// on a goroutine started after it), and term is not 0 here.
	cfg := n.raft.GetConfiguration()
	if cfg.Error() != nil {
		return
	}
	var voters []raft.ServerID
	for _, s := range cfg.Configuration().Servers {
		if s.Suffrage == raft.Voter {
			voters = append(voters, s.ID)
		}
	}
	if proof, ok := n.answers.note(term, id, start, raft.ServerID(n.cfg.NodeID), voters); ok {
		n.lease.extend(term, proof)
	}
}

// followerAnswers keeps, for one lease term, the latest send time of a
// request each follower answered with success.
type followerAnswers struct {
	mu   sync.Mutex
	term uint64
	sent map[raft.ServerID]int64
}

// note records id's answer to a request sent at start in term and returns
// the latest time from which answers of a quorum (self included) are
// known: the quorum-1'th latest answer of the other voters. ok is false
// while too few voters answered in this term, and when self is not a
// voter.
func (a *followerAnswers) note(term uint64, id raft.ServerID, start int64, self raft.ServerID, voters []raft.ServerID) (proof int64, ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if term != a.term || a.sent == nil {
		a.term, a.sent = term, make(map[raft.ServerID]int64)
	}
	if start > a.sent[id] {
		a.sent[id] = start
	}
	if !slices.Contains(voters, self) {
		return 0, false
	}
	need := len(voters)/2 + 1 - 1 // a quorum, less this node
	if need == 0 {
		return 0, false // a single voter: its commits prove it alone
	}
	times := make([]int64, 0, len(voters))
	for _, v := range voters {
		if t, heard := a.sent[v]; heard && v != self {
			times = append(times, t)
		}
	}
	if len(times) < need {
		return 0, false
	}
	slices.Sort(times)
	return times[len(times)-need], true
}
