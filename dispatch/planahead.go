package dispatch

import (
	"errors"
	"time"

	"natsdelay/delaystore"
	"natsdelay/keys"
)

// aheadPlan is an occurrence the planner planned before it fell due and
// that this process has not published yet.
type aheadPlan struct {
	next   keys.Key // its successor, stored by the same commit
	fireAt int64    // the occurrence's planned time, Unix ns
	// withdrawn is set once the successor is canceled or replaced by
	// (subject, Delay-Id): the schedule ended before the occurrence fell
	// due, so it must not go out (see withdrawAheadLocked).
	withdrawn bool
}

// aheadPruneAfter is how long past its time an occurrence planned ahead
// and still not published (its subject backing off, say) keeps its entry
// before the planner checks whether it is gone from the store.
const aheadPruneAfter = time.Minute

// planLoop plans, ahead of time, the occurrences of recurring schedules
// that fall due within Config.PlanAhead, so that a pass publishes them
// with no commit before them: the planning fsync, which would otherwise
// come between an occurrence falling due and its publish, happens up to
// PlanAhead earlier, in one batch for all of them.
//
// It is only a head start. What it does not plan (a schedule taken in
// after its read, a successor planned inside the window, a failed commit)
// the pass plans before publishing, and the two meet in
// Advance, which plans an occurrence once (ErrPlanned for the other).
func (d *Dispatcher) planLoop() {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-d.done:
			return
		case <-timer.C:
		}
		timer.Reset(d.planAhead())
	}
}

// planAhead plans the unplanned occurrences due within the look-ahead
// that the planner has not read yet, and returns how long to wait before
// reading again.
func (d *Dispatcher) planAhead() time.Duration {
	ahead := d.cfg.PlanAhead
	// NB: read again when half the window has passed, so each occurrence
	// is planned between PlanAhead/2 and PlanAhead before its time.
	wait := ahead / 2
	now := d.nowNs()
	horizon := after(now, ahead)
	d.pruneAhead(now)

	found, full, err := d.occurrencesToPlan(now, horizon)
	if err != nil {
		d.log.Warn("reading the index of occurrences to plan them ahead", "err", err)
		return wait
	}
	if len(found) == 0 {
		return wait
	}
	if full {
		wait = 0 // more within the window: read on at once
	}
	last := found[len(found)-1]
	d.mu.Lock()
	d.mu.planFrom = &last
	d.mu.Unlock()

	// NB: AdvanceEach reads each occurrence once, to plan and to write it.
	plans, res, err := d.repo.AdvanceEach(found, func(k keys.Key, m *delaystore.StoredMessage) (delaystore.Plan, bool) {
		if m.GetRecurrence() == nil || m.FireAtNs < now || m.FireAtNs > horizon || m.TtlNs > 0 {
			// NB: one due already is being delivered by a pass, which
			// plans it with the catch-up policy; one beyond the horizon
			// (a coarse time bucket) is planned on delivery. So is one
			// with a TTL: planning sets its expiry, which counts from
			// when it first goes out, and a pass late by more than the
			// TTL must not find it expired unsent.
			return delaystore.Plan{}, false
		}
		p := d.plan(outgoing{f: &flight{key: k}, msg: m}, now)
		// NB: a catch-up skip is not possible for one in the future; if
		// it were, the pass that delivers it decides.
		return p, !p.Drop
	}, delaystore.Sync)
	if err != nil {
		// Nothing stored: the passes plan them on delivery.
		d.log.Warn("planning occurrences ahead", "occurrences", len(found), "err", err)
		return wait
	}
	d.notePlannedAhead(plans, res)
	return wait
}

// occurrencesToPlan reads, from where the last read ended, the keys of the
// occurrences due by horizon, at most a pass's worth; full says there are
// more.
func (d *Dispatcher) occurrencesToPlan(now, horizon int64) (found []keys.Key, full bool, err error) {
	maxBucket := keys.Bucket(horizon/int64(time.Millisecond), d.bucketMs)
	d.mu.Lock()
	from := d.mu.planFrom
	d.mu.Unlock()
	if from == nil {
		// NB: what is due already is the passes' to plan, as they deliver
		// it; the planner starts at the current bucket, so a backlog after
		// an outage costs it nothing.
		k := keys.New(0, keys.Bucket(now/int64(time.Millisecond), d.bucketMs), 0)
		from = &k
	}
	limit := d.cfg.PassLimit
	// NB: the index of occurrences holds only occurrences still to plan,
	// so the planner reads them and not the one-shot messages due with
	// them: each message it reads, it reads under the repository's write
	// lock, which ingest and deletes wait for.
	err = d.repo.ScanOccurrences(from, maxBucket, func(k keys.Key) bool {
		if len(found) == limit {
			full = true
			return false
		}
		found = append(found, k)
		return true
	})
	return found, full, err
}

// notePlannedAhead records the successors that plans stored (res says
// which), so that a pass publishes their occurrences with no read, and
// tells the loop about each successor still pending.
func (d *Dispatcher) notePlannedAhead(plans []delaystore.Plan, res []delaystore.Planned) {
	for _, r := range res {
		if r.Err == nil {
			d.stats.plannedAhead.Add(1)
		} else {
			d.log.Error("planning an occurrence ahead", "err", r.Err)
		}
	}
	// NB: the successor is where Delay-Id points from the commit on, so a
	// CANCEL or a replace by id may have taken it already. One whose mark
	// came before the entry is seen in canceled here; one whose delete
	// committed before the read below is seen by the read; any later one
	// finds the entry (withdrawAheadLocked). The pass then needs no read.
	d.mu.Lock()
	for j, p := range plans {
		if res[j].Err != nil || p.Next == nil {
			continue // planned meanwhile, gone, or the last
		}
		next := res[j].Next
		if next.EventID() > 0 && dueBefore(next, *d.mu.planFrom) {
			// A successor within the range read (an interval shorter
			// than the look-ahead): read again from it, so it too is
			// planned ahead.
			from := keys.New(next.TopicHash(), next.Bucket(), next.EventID()-1)
			d.mu.planFrom = &from
		}
		_, canceled := d.mu.canceled[next]
		d.mu.ahead[p.Key] = aheadPlan{next: next, fireAt: p.Cur.FireAtNs, withdrawn: canceled}
		d.mu.aheadNext[next] = p.Key
	}
	d.mu.Unlock()
	for j, p := range plans {
		if res[j].Err != nil || p.Next == nil {
			continue
		}
		if _, err := d.repo.Get(res[j].Next); errors.Is(err, delaystore.ErrNotFound) {
			d.mu.Lock()
			d.withdrawAheadLocked(res[j].Next)
			d.mu.Unlock()
			continue
		}
		d.Notify(delaystore.Scheduled{Key: res[j].Next}, p.Next.FireAtNs)
	}
}

// withdrawAheadLocked is told that next, a pending occurrence, is canceled
// or replaced. If it is the successor of an occurrence planned ahead and
// not yet published, that occurrence is withdrawn: the pass that takes it
// deletes it unsent. mu must be held.
func (d *Dispatcher) withdrawAheadLocked(next keys.Key) {
	x, ok := d.mu.aheadNext[next]
	if !ok {
		return
	}
	if a, ok := d.mu.ahead[x]; ok {
		a.withdrawn = true
		d.mu.ahead[x] = a
	}
}

// takeAheadLocked forgets k's entry as an occurrence planned ahead, as it
// goes out, and reports whether it was withdrawn. mu must be held.
func (d *Dispatcher) takeAheadLocked(k keys.Key) (withdrawn bool) {
	a, ok := d.mu.ahead[k]
	if !ok {
		return false
	}
	delete(d.mu.ahead, k)
	if d.mu.aheadNext[a.next] == k {
		delete(d.mu.aheadNext, a.next)
	}
	return a.withdrawn
}

// pruneAhead forgets occurrences planned ahead long ago that are gone from
// the store (canceled by tag, expired): nothing will publish them.
func (d *Dispatcher) pruneAhead(now int64) {
	old := now - int64(aheadPruneAfter)
	var stale []keys.Key
	d.mu.Lock()
	for k, a := range d.mu.ahead {
		if a.fireAt < old {
			stale = append(stale, k)
		}
	}
	d.mu.Unlock()
	for _, k := range stale {
		if _, err := d.repo.Get(k); errors.Is(err, delaystore.ErrNotFound) {
			d.mu.Lock()
			d.takeAheadLocked(k)
			d.mu.Unlock()
		}
	}
	d.mu.Lock()
	d.mu.ahead = shrunk(d.mu.ahead, &d.mu.peaks.ahead)
	d.mu.aheadNext = shrunk(d.mu.aheadNext, &d.mu.peaks.aheadNext)
	d.mu.Unlock()
}

// dueBefore reports whether a comes before b in the due index's order:
// time bucket, then topic hash, then event ID.
func dueBefore(a, b keys.Key) bool {
	if a.Bucket() != b.Bucket() {
		return a.Bucket() < b.Bucket()
	}
	if a.TopicHash() != b.TopicHash() {
		return a.TopicHash() < b.TopicHash()
	}
	return a.EventID() < b.EventID()
}
