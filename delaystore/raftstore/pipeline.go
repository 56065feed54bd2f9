package raftstore

import (
	"sync"

	"github.com/hashicorp/raft"
)

// Pipelines that end.
//
// hashicorp/raft (v1.7.2) replicates to a follower through a pipeline: one
// goroutine sends AppendEntries without waiting for their answers, and a
// second takes the answers the transport decodes. That second one returns
// at the first answer that is not a success (a follower of a newer term,
// one whose log does not match, a failed read), and the sender learns of
// it only between two sends. A send begun meanwhile waits for the
// transport's decoder to take it, while the decoder waits to hand on the
// answer before it to the goroutine that returned: both wait until the
// pipeline is closed, which only the sender does, when it returns. So
// replication to that follower stopped for good, and Raft's Shutdown, which
// waits for the sender, never returned: a leader deposed while it was
// paused (its followers answered with a newer term) could not stop.
//
// So the node hands each pipeline's answers on to Raft itself, and closes
// the pipeline as soon as it has handed on one that ends Raft's decoder:
// the send under way fails, and Raft goes back to single AppendEntries,
// and to a new pipeline later, as after a network error. Close closes
// every pipeline still open, so that no send waits for an answer once the
// node stops.

// pipelines are the node's open pipelines.
type pipelines struct {
	mu     sync.Mutex
	open   map[*endingPipeline]struct{}
	closed bool
}

// add wraps a pipeline the transport opened; after closeAll it closes it
// and refuses.
func (ps *pipelines) add(p raft.AppendPipeline) (raft.AppendPipeline, error) {
	ep := &endingPipeline{
		AppendPipeline: p,
		out:            make(chan raft.AppendFuture),
		quit:           make(chan struct{}),
		done:           make(chan struct{}),
		ps:             ps,
	}
	ps.mu.Lock()
	if ps.closed {
		ps.mu.Unlock()
		p.Close()
		return nil, raft.ErrTransportShutdown
	}
	if ps.open == nil {
		ps.open = make(map[*endingPipeline]struct{})
	}
	ps.open[ep] = struct{}{}
	ps.mu.Unlock()
	go ep.forward()
	return ep, nil
}

// closeAll closes every open pipeline, and every one opened from now on.
func (ps *pipelines) closeAll() {
	ps.mu.Lock()
	ps.closed = true
	open := make([]*endingPipeline, 0, len(ps.open))
	for ep := range ps.open {
		open = append(open, ep)
	}
	ps.mu.Unlock()
	for _, ep := range open {
		ep.Close()
	}
}

// endingPipeline is a transport's pipeline whose answers pass through
// forward on their way to Raft. It owns forward's goroutine: Close stops it.
type endingPipeline struct {
	raft.AppendPipeline
	out  chan raft.AppendFuture // unbuffered, as the transport's own
	quit chan struct{}
	done chan struct{}
	once sync.Once
	ps   *pipelines
}

// Consumer is what Raft takes the answers from.
func (ep *endingPipeline) Consumer() <-chan raft.AppendFuture { return ep.out }

// forward hands the transport's answers on to Raft until one ends Raft's
// decoder; then it closes the transport's pipeline.
func (ep *endingPipeline) forward() {
	defer close(ep.done)
	in := ep.AppendPipeline.Consumer()
	for {
		var f raft.AppendFuture
		select {
		case f = <-in:
		case <-ep.quit:
			return
		}
		select {
		case ep.out <- f:
		case <-ep.quit:
			return
		}
		if endsDecoder(f) {
			ep.AppendPipeline.Close()
			return
		}
	}
}

// endsDecoder reports whether Raft's decoder returns on taking f: an
// answer that failed, refused the entries, or names a newer term.
func endsDecoder(f raft.AppendFuture) bool {
	resp := f.Response()
	return f.Error() != nil || !resp.Success || resp.Term > f.Request().Term
}

// Close closes the transport's pipeline and waits for forward to stop.
func (ep *endingPipeline) Close() error {
	var err error
	ep.once.Do(func() {
		close(ep.quit)
		err = ep.AppendPipeline.Close()
		<-ep.done
		ep.ps.mu.Lock()
		delete(ep.ps.open, ep)
		ep.ps.mu.Unlock()
	})
	return err
}
