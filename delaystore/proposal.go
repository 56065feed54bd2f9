package delaystore

import (
	"fmt"
	"sync"
	"sync/atomic"
)

// ProposingBatch is a Batch that can be handed to its store's commit
// without waiting for the outcome. A replicated store's commit is a round
// trip to a quorum; proposing lets the next batch be built and sent while
// one is on its way, instead of after it.
type ProposingBatch interface {
	Batch
	// Propose hands the batch to the commit and returns a wait for its
	// outcome, which is Commit's. Batches proposed one after another
	// commit in that order, and one commits only if every batch proposed
	// before it did. An error from Propose itself means nothing was
	// proposed.
	Propose(sync SyncMode) (wait func() error, err error)
}

// A Proposal is a batch of Schedule handed to a ProposingBatch's commit and
// not yet known to have committed. Wait for it; see ProposeSchedule.
type Proposal struct {
	r     *Repository
	msgs  int
	built builtSchedule
	wait  func() error // nil once settled, or for a proposal settled at once

	once sync.Once
	err  error
	// done is set once settle has run; pruneProposalsLocked reads it
	// without waiting.
	done atomic.Bool
}

// Wait waits for the commit and returns the keys, as Schedule does. It may
// be called more than once.
func (p *Proposal) Wait() ([]Scheduled, error) {
	p.settle()
	if p.err != nil {
		return nil, p.err
	}
	return p.built.out, nil
}

// settle waits for the outcome once, and then makes the batch's counts
// and last ID known to readers, or, if it did not commit, stops every
// later write of the repository (see writableLocked). Proposals must be
// settled in the order proposed, as their counts are totals: the writer
// that waits for them does so in order, and settleProposalsLocked too.
func (p *Proposal) settle() {
	p.once.Do(func() {
		defer p.done.Store(true)
		if p.wait == nil {
			return
		}
		if err := p.wait(); err != nil {
			p.err = fmt.Errorf("delaystore: schedule batch of %d: commit: %w", p.msgs, err)
			p.r.failProposals(err)
			return
		}
		p.r.publish(p.built.counts, p.built.last)
	})
}

// ProposeSchedule is Schedule for a store whose batches propose (see
// ProposingBatch): it returns once the batch is handed to the commit, so
// that the caller can build the next one while it is on its way, and Wait
// says when it committed. The caller must Wait for each proposal, in the
// order they were made. Every other write of the repository first waits
// for the proposals still on their way.
//
// NB: building a batch while the one before it is uncommitted is sound
// because every count it reads is one the writers' cache holds (a batch
// that would need one read back from the store, or that replaces a
// message by its client id, waits for the proposals first), and because a
// batch commits only if the ones before it did: after a proposal fails,
// the repository refuses every write, with that failure, and the service
// replaces it with one that reads the store afresh (a new generation).
//
// With a store whose batches do not propose, or for a batch with a client
// id, a recurring schedule or more subjects than the cache holds, it
// commits as Schedule does and returns a proposal already settled.
func (r *Repository) ProposeSchedule(msgs []*StoredMessage, sync SyncMode) *Proposal {
	p := &Proposal{r: r, msgs: len(msgs)}
	if len(msgs) == 0 {
		return p
	}
	if err := checkSchedule(msgs); err != nil {
		p.err = err
		return p
	}
	r.wmu.Lock()
	defer r.wmu.Unlock()
	if r.closed.Load() {
		p.err = ErrClosed
		return p
	}
	if err := r.proposalFailure(); err != nil {
		p.err = err
		return p
	}
	b := r.s.NewBatch()
	defer b.Close()
	pb, ok := b.(ProposingBatch)
	if !ok || !proposable(msgs) || r.counts.nearFull(len(msgs)) {
		if err := r.settleProposalsLocked(); err != nil {
			p.err = err
			return p
		}
		p.built.out, p.err = r.scheduleLocked(msgs, sync, nil)
		return p
	}
	r.pruneProposalsLocked()
	built, err := r.buildSchedule(pb, msgs, nil)
	if err != nil {
		p.err = err
		return p
	}
	wait, err := pb.Propose(sync)
	if err != nil {
		p.err = fmt.Errorf("delaystore: schedule batch of %d: commit: %w", len(msgs), err)
		return p
	}
	// The next batch builds on this one's counts.
	r.counts.committed()
	// NB: but its messages are not kept for reads (see msgCache): it is
	// known to have committed only once settled, without wmu.
	r.msgs.forgetUncommitted()
	r.trimScratch()
	p.built, p.wait = built, wait
	r.proposals = append(r.proposals, p)
	return p
}

// proposable reports whether msgs may be built while earlier batches are
// uncommitted: a client id makes the batch read the store for the message
// it replaces, and a recurring schedule its index.
func proposable(msgs []*StoredMessage) bool {
	for _, m := range msgs {
		if m.ClientId != "" || m.Recurrence != nil {
			return false
		}
	}
	return true
}

// settleProposalsLocked waits for every proposal still on its way, in
// order, and returns the failure of any. wmu must be held.
func (r *Repository) settleProposalsLocked() error {
	for _, p := range r.proposals {
		p.settle()
	}
	clear(r.proposals)
	r.proposals = r.proposals[:0]
	return r.proposalFailure()
}

// pruneProposalsLocked forgets the proposals at the head that are
// settled. wmu must be held.
func (r *Repository) pruneProposalsLocked() {
	n := 0
	for n < len(r.proposals) && r.proposals[n].done.Load() {
		n++
	}
	if n > 0 {
		r.proposals = append(r.proposals[:0], r.proposals[n:]...)
	}
}

// failProposals records the first failure of a proposal: the repository
// refuses every write after it.
func (r *Repository) failProposals(err error) {
	r.proposalMu.Lock()
	defer r.proposalMu.Unlock()
	if r.proposalErr == nil {
		r.proposalErr = err
	}
}

// proposalFailure is the failure that stopped the repository's writes, or
// nil.
func (r *Repository) proposalFailure() error {
	r.proposalMu.Lock()
	defer r.proposalMu.Unlock()
	if r.proposalErr == nil {
		return nil
	}
	return fmt.Errorf("delaystore: an earlier batch did not commit: %w", r.proposalErr)
}

// writableLocked settles the proposals on their way and returns an error
// if the repository takes no more writes: ErrClosed, or the failure of a
// proposal. Every writer but ProposeSchedule calls it under wmu first.
func (r *Repository) writableLocked() error {
	if r.closed.Load() {
		return ErrClosed
	}
	return r.settleProposalsLocked()
}
