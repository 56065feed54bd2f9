package raftstore

import "sync"

// watcher delivers leadership changes to one callback, from its own
// goroutine, serially. It follows the node's state rather than queueing
// events: f sees the latest state, and a leadership lost and regained in
// between is reported as false then true, never hidden.
type watcher struct {
	n    *Node
	f    func(leader bool)
	wake chan struct{} // buffer 1: a pending wake-up is enough
	quit chan struct{}
	done chan struct{}
	once sync.Once
}

// WatchLeadership calls f(true) when this node becomes leader, once it has
// applied every entry committed before (a barrier), and f(false) as soon as
// it stops being leader, or closes. Calls are serial and alternate, starting
// with true. f runs on a goroutine of its own and may call the Node, but
// not cancel or Close. cancel stops the watch and waits for a call under
// way; it does not call f.
func (n *Node) WatchLeadership(f func(leader bool)) (cancel func()) {
	w := &watcher{n: n, f: f, wake: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
	n.mu.Lock()
	if n.mu.closed {
		n.mu.Unlock()
		return func() {}
	}
	n.mu.watchers[w] = struct{}{}
	n.mu.Unlock()
	w.wake <- struct{}{}
	go w.run()
	return func() {
		n.mu.Lock()
		delete(n.mu.watchers, w)
		n.mu.Unlock()
		w.cancel()
	}
}

// wakeWatchers tells every watcher the state changed. mu must be held.
func (n *Node) wakeWatchers() {
	for w := range n.mu.watchers {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

func (w *watcher) run() {
	defer close(w.done)
	told, toldEpoch := false, uint64(0)
	for {
		select {
		case <-w.quit:
			return
		case <-w.wake:
		}
		ready, epoch, closed := w.n.leadership()
		if told && (!ready || epoch != toldEpoch) {
			w.f(false)
			told = false
		}
		if closed {
			return
		}
		if ready && !told {
			w.f(true)
			told, toldEpoch = true, epoch
		}
	}
}

// stop ends the watch once it has caught up with the node's state: Close
// uses it, so a watcher told true hears false.
func (w *watcher) stop() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
	<-w.done
}

// cancel ends the watch without a last call.
func (w *watcher) cancel() {
	w.once.Do(func() { close(w.quit) })
	<-w.done
}
