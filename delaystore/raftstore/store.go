package raftstore

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/hashicorp/raft"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/delaystore/internal/gate"
)

// store is the replicated delaystore.Store of a node: reads go to the local
// store, commits through Raft. Each Node.Store call returns a new one, so
// that closing one (as the service does when it stops serving) closes that
// handle only.
type store struct {
	n    *Node
	gate *gate.Gate[*iterator]
	// epoch and term are the leadership the handle belongs to (see
	// Node.Store), 0 if it was opened while the node did not lead.
	epoch, term uint64
}

// proposalTerm is the Raft term a commit through s proposes its entry in:
// that of its leadership, which must be under way.
func (s *store) proposalTerm() (uint64, error) {
	n := s.n
	n.mu.Lock()
	ready, current, closed := n.mu.ready, n.mu.epoch, n.mu.closed
	n.mu.Unlock()
	switch {
	case closed || n.fsm.err() != nil || n.raft.State() == raft.Shutdown:
		// As Raft would answer: the node's failure, or closed.
		return 0, n.raftError("commit", raft.ErrRaftShutdown)
	case s.epoch == 0:
		return 0, fmt.Errorf("raftstore: commit: %w", n.notLeader(errOpenedAsFollower))
	case !ready || s.epoch != current:
		return 0, fmt.Errorf("raftstore: commit: %w", n.notLeader(errLeadershipEnded))
	}
	return s.term, nil
}

var _ delaystore.Store = (*store)(nil)

// Get reads the local store.
func (s *store) Get(key []byte) ([]byte, error) {
	var v []byte
	err := s.gate.Call(func() (err error) {
		v, err = s.n.local.Get(key)
		return err
	})
	return v, err
}

// NewBatch starts a batch whose Commit replicates it.
func (s *store) NewBatch() delaystore.Batch {
	return &batch{s: s, cmd: newCommand()}
}

// NewIter opens an iterator on the local store.
func (s *store) NewIter(opts delaystore.IterOptions) (delaystore.Iterator, error) {
	return s.gate.Iter(func() (*iterator, bool, error) {
		it, err := s.n.local.NewIter(opts)
		if err != nil {
			return nil, false, err
		}
		return &iterator{Iterator: it, s: s}, true, nil
	})
}

// Scan scans the local store.
func (s *store) Scan(opts delaystore.IterOptions, yield func(key, value []byte) bool) error {
	return s.gate.Call(func() error { return s.n.local.Scan(opts, yield) })
}

// Flush does nothing: a committed batch is already durable, in the Raft log
// of a quorum.
func (s *store) Flush() error {
	return s.gate.Call(func() error { return nil })
}

// Close closes this handle: later calls return delaystore.ErrClosed, and
// iterators still open are closed and reported. It waits for calls in
// flight. It does not stop the node.
func (s *store) Close() error {
	leaked, _, ok := s.gate.Close()
	if !ok {
		return nil
	}
	var errs []error
	for it := range leaked {
		it.abandon()
	}
	if n := len(leaked); n > 0 {
		errs = append(errs, fmt.Errorf("raftstore: close: %d iterators still open", n))
	}
	return errors.Join(errs...)
}

// iterator is an iterator of the local store that the handle's Close can
// abandon: its owner then finds it invalid, with ErrClosed.
type iterator struct {
	delaystore.Iterator
	s *store
	// abandoned is set by the handle's Close, from another goroutine.
	abandoned atomic.Bool
	closed    bool
}

func (it *iterator) abandon() {
	it.abandoned.Store(true)
	it.Iterator.Close()
}

func (it *iterator) First() bool          { return !it.abandoned.Load() && it.Iterator.First() }
func (it *iterator) SeekGE(k []byte) bool { return !it.abandoned.Load() && it.Iterator.SeekGE(k) }
func (it *iterator) Next() bool           { return !it.abandoned.Load() && it.Iterator.Next() }
func (it *iterator) Valid() bool          { return !it.abandoned.Load() && it.Iterator.Valid() }

func (it *iterator) Error() error {
	if it.abandoned.Load() {
		return fmt.Errorf("raftstore: iterator: %w", delaystore.ErrClosed)
	}
	return it.Iterator.Error()
}

func (it *iterator) Close() error {
	if it.closed {
		return nil
	}
	it.closed = true
	if it.abandoned.Load() {
		return it.Error()
	}
	it.s.gate.Forget(it)
	return it.Iterator.Close()
}

// batch collects operations encoded as one Raft log entry.
type batch struct {
	s         *store
	cmd       command
	committed bool
	closed    bool
}

func (b *batch) Set(key, value []byte) error {
	if err := b.usable(); err != nil {
		return err
	}
	return b.cmd.set(key, value)
}

func (b *batch) Delete(key []byte) error {
	if err := b.usable(); err != nil {
		return err
	}
	return b.cmd.delete(key)
}

// SingleDelete is replicated as a plain Delete. NB: a restart replays the
// log from the latest snapshot over a local store that may hold the
// entries already (see the package doc), so a key set once by the leader
// can be set twice on a node, where a single delete would bring back the
// first value after a compaction.
func (b *batch) SingleDelete(key []byte) error { return b.Delete(key) }

func (b *batch) Len() int { return b.cmd.n }

func (b *batch) usable() error {
	switch {
	case b.closed:
		return delaystore.ErrClosed
	case b.committed:
		return delaystore.ErrBatchCommitted
	}
	return nil
}

// Commit replicates the batch as one log entry and returns once a quorum
// stored it and this node applied it to its local store. The sync mode is
// moot: the Raft log of every node syncs each entry. It returns an error
// wrapping ErrNotLeader if this node is not the leader or lost leadership
// before the entry committed (it may still commit, in the leadership it
// was proposed in: never in a later one), or if the handle's leadership
// ended (see Node.Store), one wrapping
// delaystore.ErrFailed and ErrApplyFailed if this node could not apply it
// (the entry is committed nonetheless, and the others apply it), and
// delaystore.ErrClosed once the node or this store is closed. A key that
// is empty or longer than MaxKeySize is refused by Set and Delete.
func (b *batch) Commit(delaystore.SyncMode) error {
	if err := b.usable(); err != nil {
		return err
	}
	b.committed = true
	return b.s.gate.Call(func() error {
		if b.cmd.n == 0 {
			return nil
		}
		entry := b.cmd.bytes()
		if limit := b.s.n.cfg.MaxEntryBytes; len(entry) > limit {
			return fmt.Errorf("%w: a batch of %d operations encodes to %d bytes, over MaxEntryBytes (%d): commit it in smaller batches",
				ErrEntryTooLarge, b.cmd.n, len(entry), limit)
		}
		term, err := b.s.proposalTerm()
		if err != nil {
			return err
		}
		return b.s.n.apply(entry, term)
	})
}

func (b *batch) Close() error {
	b.closed = true
	b.cmd = command{}
	return nil
}

// apply proposes one entry and waits for it to be committed and applied.
func (n *Node) apply(entry []byte, term uint64) error {
	// No enqueue timeout: the future resolves when the entry is applied,
	// or when leadership is lost. Raft does not always answer one it holds
	// when it shuts down, so the wait ends with Close too (see await): a
	// commit stuck there held a writer that Close waited for through the
	// leadership watch, and Close hung.
	leaseTerm, start := n.lease.begin()
	f := n.raft.ApplyLog(raft.Log{Data: entry, Extensions: proposedIn(term)}, 0)
	if err := n.await(f); err != nil {
		return n.raftError("commit", err)
	}
	err, _ := f.Response().(error)
	switch {
	case errors.Is(err, errStaleProposal):
		return n.raftError("commit", err)
	case err != nil:
		return fmt.Errorf("raftstore: commit: %w", err)
	}
	n.lease.extend(leaseTerm, start)
	return nil
}

// raftError maps Raft's errors to the package's.
func (n *Node) raftError(op string, err error) error {
	switch {
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipLost), errors.Is(err, errStaleProposal),
		errors.Is(err, raft.ErrLeadershipTransferInProgress), errors.Is(err, raft.ErrAbortedByRestore):
		return fmt.Errorf("raftstore: %s: %w", op, n.notLeader(err))
	case errors.Is(err, raft.ErrRaftShutdown):
		if ferr := n.fsm.err(); ferr != nil {
			return fmt.Errorf("raftstore: %s: %w", op, ferr)
		}
		return fmt.Errorf("raftstore: %s: %w: %w", op, delaystore.ErrClosed, err)
	}
	return fmt.Errorf("raftstore: %s: %w", op, err)
}

// notLeader is the ErrNotLeader of this node, naming the leader it knows
// of: never itself (a leader that just lost its leadership may still name
// itself until it hears of the next).
func (n *Node) notLeader(cause error) error {
	_, id := n.raft.LeaderWithID()
	leader := string(id)
	if leader == n.cfg.NodeID {
		leader = ""
	}
	return &delaystore.NotLeaderError{Leader: leader, Err: cause}
}

// ReleaseMemory hands back the memory the local store keeps for writes,
// if it keeps any (see delaystore.MemoryReleaser). It is this node's
// alone: the other nodes keep theirs.
func (s *store) ReleaseMemory() error {
	return s.gate.Call(func() error {
		if r, ok := s.n.local.(delaystore.MemoryReleaser); ok {
			return r.ReleaseMemory()
		}
		return nil
	})
}

var _ delaystore.MemoryReleaser = (*store)(nil)
