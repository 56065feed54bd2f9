package raftstore

import (
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// A follower's lag
//
// A follower is behind when an entry the leader had committed MaxLag ago
// is still not applied here. The leader's commit index arrives with every
// AppendEntries it sends, at least every CommitTimeout while it has
// nothing new; the follower's own commit index is no substitute, since it
// stops with its log when the follower cannot store entries (a full
// disk). So commitWatch notes each one as it arrives, before Raft handles
// it, and lag compares the oldest noted index not yet applied with the
// applied index.
//
// The rule measures time, not entries, so that it neither flaps nor
// waits for a count: an idle cluster has nothing committed that is not
// applied; a follower under load applies what it receives within
// milliseconds, so each mark it notes is cleared by the next; right after
// a restart it has noted nothing until the leader's first AppendEntries,
// and then catches up from its log in seconds, within MaxLag. A follower
// whose log or store cannot keep up leaves its mark in place, and is
// behind once the mark is MaxLag old, however slowly entries arrive.
//
// Raft's applied index counts entries handed to the FSM, whose queue
// holds some hundred batches: a follower whose local store blocks shows
// as behind once that queue is full, which under load is at once.

// commitWatch is the node's transport as Raft sees it: the network
// transport, whose Consumer is fed through watch, which notes the
// leader's commit index of each AppendEntries it passes on.
type commitWatch struct {
	*raft.NetworkTransport
	out   chan raft.RPC // unbuffered: Raft takes RPCs at its own pace, as from the transport
	noted func(commit uint64)
}

func newCommitWatch(t *raft.NetworkTransport, noted func(uint64)) *commitWatch {
	return &commitWatch{NetworkTransport: t, out: make(chan raft.RPC), noted: noted}
}

// Consumer is what Raft reads RPCs from.
func (w *commitWatch) Consumer() <-chan raft.RPC { return w.out }

// watch passes the transport's RPCs on to Raft until done is closed. An
// RPC it holds when done closes is never answered, which its sender sees
// as the node gone, as it is.
func (w *commitWatch) watch(done <-chan struct{}) {
	in := w.NetworkTransport.Consumer()
	for {
		select {
		case rpc := <-in:
			if a, ok := rpc.Command.(*raft.AppendEntriesRequest); ok && a.LeaderCommitIndex > 0 {
				w.noted(a.LeaderCommitIndex)
			}
			select {
			case w.out <- rpc:
			case <-done:
				return
			}
		case <-done:
			return
		}
	}
}

// lagMark follows the oldest commit index the leader sent that this node
// has not applied. It is safe for concurrent use.
type lagMark struct {
	mu struct {
		sync.Mutex
		// leaderCommit is the highest commit index a leader sent.
		leaderCommit uint64
		// index and since are the mark: the leader had committed index by
		// since, and it was not applied here then. index 0 is no mark.
		index uint64
		since time.Time
	}
}

// note records that a leader sent commit at now, when this node had
// applied up to applied.
func (l *lagMark) note(commit, applied uint64, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.mu.leaderCommit = max(l.mu.leaderCommit, commit)
	l.clearLocked(applied)
	if l.mu.index == 0 && commit > applied {
		l.mu.index, l.mu.since = commit, now
	}
}

// clearLocked drops the mark once applied reaches it. mu must be held.
func (l *lagMark) clearLocked(applied uint64) {
	if l.mu.index != 0 && applied >= l.mu.index {
		l.mu.index = 0
	}
}

// Lag is how far a node's local store is behind its leader.
type Lag struct {
	// Entries is the highest commit index a leader sent this node minus
	// the index it applied; 0 when it is not behind, or has heard no
	// leader since it started.
	Entries uint64
	// Age is how long an entry the leader had committed has waited here
	// unapplied; 0 when none has.
	Age time.Duration
	// Behind says why the node is behind its leader (Age over MaxLag),
	// empty when it is not.
	Behind string
}

// lag is the lag at now of a node that applied up to applied, against
// the bound maxLag.
func (l *lagMark) lag(applied uint64, now time.Time, maxLag time.Duration) Lag {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.clearLocked(applied)
	var g Lag
	if l.mu.leaderCommit > applied {
		g.Entries = l.mu.leaderCommit - applied
	}
	if l.mu.index != 0 {
		g.Age = max(now.Sub(l.mu.since), 0)
	}
	if g.Age > maxLag {
		g.Behind = fmt.Sprintf("behind the leader: entry %d, committed %v ago, not applied (applied index %d, leader's commit index %d, bound %v)",
			l.mu.index, g.Age.Round(time.Millisecond), applied, l.mu.leaderCommit, maxLag)
	}
	return g
}

// noteCommit is commitWatch's report of a leader's commit index.
func (n *Node) noteCommit(commit uint64) {
	n.lag.note(commit, n.raft.AppliedIndex(), time.Now())
}

// followerLag is the lag at now of this node, which does not lead and
// applied up to applied. A node that has heard from no leader for MaxLag
// (since it started, at first) is behind too: it cannot know what it
// misses. An election in a healthy cluster takes about an
// ElectionTimeout, well within MaxLag.
func (n *Node) followerLag(applied uint64, now time.Time) Lag {
	g := n.lag.lag(applied, now, n.cfg.MaxLag)
	if g.Behind != "" {
		return g
	}
	heard := n.raft.LastContact()
	if heard.Before(n.started) {
		heard = n.started
	}
	if quiet := now.Sub(heard); quiet > n.cfg.MaxLag {
		g.Behind = fmt.Sprintf("no contact from a leader for %v (bound %v)", quiet.Round(time.Millisecond), n.cfg.MaxLag)
	}
	return g
}
