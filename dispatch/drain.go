package dispatch

// Draining topics, for a cell of a fleet about to hand them to another
// cell: the caller holds their deliveries back through Config.Frozen
// (which makes a topic it names paused) and calls ReloadLimits, then asks
// Unsettled until none of their deliveries is out unanswered or settling.
// Nothing here runs in a pass: Unsettled costs its caller one look at the
// flights, under the lock, each time it asks.

// Unsettled counts the flights of the topics keep accepts, by hash, that
// a move of their messages would undo: deliveries out and waiting for an
// answer, or going out, and those answered whose deletes have not
// committed yet. A flight waiting to be delivered again (NAKed, its ack
// wait run out, parked) is not counted: its delivery is unanswered, and
// at-least-once delivers it again wherever its message is.
//
// sure is false while a pass that began before the last ReloadLimits is
// still under way: it may yet send deliveries of topics held back since,
// so a count of 0 says nothing yet.
func (d *Dispatcher) Unsettled(keep func(topicHash uint64) bool) (n int, sure bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, f := range d.mu.flights.byKey {
		if !keep(f.topic.hash) {
			continue
		}
		switch {
		case f.state == stateSent, f.state == stateSettling:
			n++
		case f.state == stateRetry && !f.waiting():
			n++ // taken by a pass, to go out
		}
	}
	return n, d.mu.passStart == 0 || d.mu.pass != d.mu.reloadPass
}
