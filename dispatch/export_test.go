package dispatch

import "github.com/natsdelay/natsdelay/keys"

// Held is what a Dispatcher keeps in memory between passes, for tests of
// what a burst leaves behind: the most entries each map held since it was
// last copied, the capacity of each array, and the deleter's queue.
type Held struct {
	Topics, Flights, Unsent, Canceled   int // map peaks
	Due, Timers, Idle, Committed        int // array capacities
	DeleterOps, DeleterDue, DeleterWait int
}

// HeldForTest reports what d holds.
func (d *Dispatcher) HeldForTest() Held {
	d.mu.Lock()
	h := Held{
		Topics: d.mu.subjects.peak, Flights: d.mu.flights.peaks.byKey, Unsent: d.mu.flights.peaks.unsent, Canceled: d.mu.flights.peaks.canceled,
		Due: cap(d.mu.subjects.due), Timers: d.mu.flights.timers.capacity(), Idle: cap(d.mu.subjects.idle), Committed: cap(d.mu.flights.committed),
	}
	d.mu.Unlock()
	d.del.mu.Lock()
	h.DeleterOps, h.DeleterDue, h.DeleterWait = len(d.del.mu.ops), cap(d.del.mu.due), cap(d.del.mu.waiting)
	d.del.mu.Unlock()
	return h
}

// QueuedWriteForTest reports whether the deleter holds a write of k.
func (d *Dispatcher) QueuedWriteForTest(k keys.Key) bool {
	d.del.mu.Lock()
	defer d.del.mu.Unlock()
	return d.del.mu.ops[k] != nil
}

// BeforePublishWaitForTest makes f be called each time a settling of a
// message (Ack, +TERM, Cancel, Move, a replacing Notify) waits for the
// publish of that message under way. Set it before the settling starts.
func (d *Dispatcher) BeforePublishWaitForTest(f func()) { d.beforePublishWait = f }

// AfterReadDueForTest makes f be called by each scan with the expired
// keys it read, before the scan settles them. Set it before the
// dispatcher runs a pass.
func (d *Dispatcher) AfterReadDueForTest(f func(gone []keys.Key)) { d.afterReadDue = f }

// HandedOffForTest reports how many messages d handed off (see
// NotifyMessage).
func (d *Dispatcher) HandedOffForTest() uint64 { return d.stats.handedOff.Load() }

// DeletesHeldForTest reports how many times the deleter waited for a
// staged burst to go out (see burstHold).
func (d *Dispatcher) DeletesHeldForTest() uint64 { return d.burst.heldCount() }

// PlanRoundsForTest reports how many rounds the planner began.
func (d *Dispatcher) PlanRoundsForTest() uint64 { return d.planRounds.Load() }

// GaveWayForTest reports how many times the planner gave way to a pass
// that delivered (see giveWay).
func (d *Dispatcher) GaveWayForTest() uint64 { return d.gaveWay.Load() }

// AfterPlanCommitForTest makes f be called by the planner after each
// commit of plans made ahead, before it notes them, and beforeWait by a
// replace that waits for that noting. Set them before the planner runs.
func (d *Dispatcher) AfterPlanCommitForTest(f, beforeWait func()) {
	d.afterPlanCommit, d.beforeNotedWait = f, beforeWait
}
