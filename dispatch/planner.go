package dispatch

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/keys"
)

// aheadPlan is an occurrence the planner planned before it fell due and
// that this process has not published yet.
type aheadPlan struct {
	next   keys.Key // its successor, stored by the same commit
	fireAt int64    // the occurrence's planned time, Unix ns
}

// aheadTable is the occurrences the planner planned before they fell due,
// until they are first published (see planLoop and publish), with how far
// it has read the index of occurrences. Dispatcher.mu guards it.
type aheadTable struct {
	byKey map[keys.Key]aheadPlan
	// bySuccessor is each one's key by its successor's.
	bySuccessor map[keys.Key]keys.Key
	// readFrom is how far the planner has read the index of occurrences,
	// in the due index's order; nil before the first read.
	readFrom *keys.Key
	// dueMs counts the entries by their planned time, in Unix ms: how
	// many fall due together (see Dispatcher.staging).
	dueMs map[int64]int
	// peaks are the most entries each map held since it was last copied
	// (see shrunk).
	peaks struct{ byKey, bySuccessor, dueMs int }

	// begun and noted count the planner's rounds marked from before
	// their commit, and those that have since noted their plans here
	// (see Dispatcher.noting).
	begun, noted uint64
	// withdrawnBy is, by successor, each occurrence the planner withdrew
	// as it noted its plan because the successor was gone already, until
	// the occurrence's delete commits: the replace that took the
	// successor waits for that delete before it is answered.
	withdrawnBy map[keys.Key]keys.Key
}

func newAheadTable() aheadTable {
	return aheadTable{byKey: make(map[keys.Key]aheadPlan), bySuccessor: make(map[keys.Key]keys.Key), dueMs: make(map[int64]int), withdrawnBy: make(map[keys.Key]keys.Key)}
}

// add records that the occurrence under k, due at fireAt, was planned with
// its successor next.
func (at *aheadTable) add(k, next keys.Key, fireAt int64) {
	if a, ok := at.byKey[k]; ok {
		at.uncount(a.fireAt)
	}
	at.byKey[k] = aheadPlan{next: next, fireAt: fireAt}
	at.bySuccessor[next] = k
	at.dueMs[fireAt/int64(time.Millisecond)]++
}

// uncount takes one entry planned for fireAt off dueMs.
func (at *aheadTable) uncount(fireAt int64) {
	ms := fireAt / int64(time.Millisecond)
	if at.dueMs[ms] <= 1 {
		delete(at.dueMs, ms)
		return
	}
	at.dueMs[ms]--
}

// dueAt is how many entries are planned for the millisecond of t.
func (at *aheadTable) dueAt(t int64) int { return at.dueMs[t/int64(time.Millisecond)] }

// end is told that next, a pending occurrence, is canceled or replaced by
// (subject, Delay-Id): the schedule ends. If next is the successor of an
// occurrence planned ahead and not yet published, that occurrence is
// withdrawn: its entry goes and its key is returned, for the caller to
// mark settled and delete, before the CANCEL or the replace is answered:
// left to its pass, it stayed pending, to GET and LIST, until its planned
// time, and a restart, which forgets the entry, delivered it. A pass
// that takes it meanwhile finds it settling, and skips it.
func (at *aheadTable) end(next keys.Key) (keys.Key, bool) {
	x, ok := at.bySuccessor[next]
	if !ok {
		return keys.Key{}, false
	}
	if _, ok := at.byKey[x]; !ok {
		return keys.Key{}, false
	}
	at.take(x)
	return x, true
}

// moved is told that next, a pending occurrence, was rewritten under nk
// (see Dispatcher.Rewrite): the occurrence planned ahead whose successor
// it is, if any, now has nk as its successor.
func (at *aheadTable) moved(next, nk keys.Key) {
	x, ok := at.bySuccessor[next]
	if !ok || next == nk {
		return
	}
	delete(at.bySuccessor, next)
	at.bySuccessor[nk] = x
	if a, ok := at.byKey[x]; ok {
		a.next = nk
		at.byKey[x] = a
	}
}

// take forgets k's entry as an occurrence planned ahead, as it goes out.
func (at *aheadTable) take(k keys.Key) {
	a, ok := at.byKey[k]
	if !ok {
		return
	}
	delete(at.byKey, k)
	at.uncount(a.fireAt)
	if at.bySuccessor[a.next] == k {
		delete(at.bySuccessor, a.next)
	}
}

// dueBefore lists the occurrences whose planned time is before t.
func (at *aheadTable) dueBefore(t int64) []keys.Key {
	var ks []keys.Key
	for k, a := range at.byKey {
		if a.fireAt < t {
			ks = append(ks, k)
		}
	}
	return ks
}

// shrink gives back the memory a burst left in the maps.
func (at *aheadTable) shrink() {
	at.byKey = shrunk(at.byKey, &at.peaks.byKey)
	at.bySuccessor = shrunk(at.bySuccessor, &at.peaks.bySuccessor)
	at.dueMs = shrunk(at.dueMs, &at.peaks.dueMs)
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
	gw := giveWay{most: d.cfg.PlanAhead / 4}
	for {
		select {
		case <-d.done:
			return
		case <-timer.C:
		}
		timer.Reset(d.planAhead(&gw))
	}
}

// Planning gives way to passes that deliver: see giveWay.
const (
	// giveWayQuiet is how long after a pass published the passes count
	// as delivering still.
	giveWayQuiet = 5 * time.Millisecond
	// giveWayRetry is how long the planner waits, giving way, before it
	// looks again.
	giveWayRetry = 5 * time.Millisecond
)

// giveWay decides whether the planner waits for the passes. Occurrences
// of many schedules fall due together (every schedule on a whole
// second, a minute, an hour), and the planner, which reads every
// PlanAhead/2, would as often as not plan the next round while a pass
// publishes this one, taking the CPU that the round's lateness is made
// of. It reads an occurrence from PlanAhead/2 to PlanAhead before its
// time, so it can wait for the passes to fall quiet, up to most (a
// quarter of PlanAhead) in each round of reads, and still plan ahead;
// after that it plans whatever the passes do, as it did before. One it
// then reaches too late, a pass plans as it goes out.
// Only the planner's goroutine uses it.
type giveWay struct {
	most time.Duration
	// since is when the planner first gave way in this round of reads,
	// zero if it has not.
	since time.Time
	// spent is whether it gave way for most in this round already.
	spent bool
}

// wait reports how long the planner should wait before planning, at
// now, while delivering says a pass publishes or messages are due that
// none has, and deliveredAt is when one last published (zero for
// never); 0 says plan.
func (g *giveWay) wait(now time.Time, delivering bool, deliveredAt time.Time) time.Duration {
	busy := delivering || (!deliveredAt.IsZero() && now.Sub(deliveredAt) < giveWayQuiet)
	if g.spent || !busy {
		return 0
	}
	if g.since.IsZero() {
		g.since = now
	}
	if now.Sub(g.since) >= g.most {
		g.spent = true
		return 0
	}
	return giveWayRetry
}

// caughtUp starts a new round of reads: the planner has planned all it
// found within the look-ahead.
func (g *giveWay) caughtUp() { *g = giveWay{most: g.most} }

// givingWay is how long the planner waits for the passes now (see
// giveWay), 0 for none.
func (d *Dispatcher) givingWay(gw *giveWay) time.Duration {
	var last time.Time
	if at := d.deliveredAt.Load(); at != 0 {
		last = d.started.Add(time.Duration(at))
	}
	w := gw.wait(time.Now(), d.delivering.Load() || d.stagingNow.Load() || d.dueNow(), last)
	if w > 0 {
		d.gaveWay.Add(1)
	}
	return w
}

// dueNow reports whether messages are due that no pass has published
// yet: the due index not read up to now, or subjects due, or messages
// handed off.
func (d *Dispatcher) dueNow() bool {
	now := d.nowNs()
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.mu.frontier.next <= now || d.mu.subjects.dueBy(now) || len(d.mu.handed) > 0
}

// planAhead plans the unplanned occurrences due within the look-ahead
// that the planner has not read yet, and returns how long to wait before
// reading again.
func (d *Dispatcher) planAhead(gw *giveWay) time.Duration {
	ahead := d.cfg.PlanAhead
	// Read again when half the window has passed, so each occurrence
	// is read between PlanAhead/2 and PlanAhead before its time, and
	// planned at least PlanAhead/4 before it (see giveWay).
	wait := ahead / 2
	d.planRounds.Add(1)
	if d.repo.Schedules() == 0 {
		// Nothing to plan: no index to read and no pass to give way
		// to, which under one-shot traffic woke the planner every
		// giveWayRetry.
		d.pruneAhead(d.nowNs())
		gw.caughtUp()
		return wait
	}
	// NB: before the read, not after: a read of a round's worth of the
	// index every giveWayRetry would take the CPU the wait gives up.
	if w := d.givingWay(gw); w > 0 {
		return w
	}
	now := d.nowNs()
	horizon := after(now, ahead)
	d.pruneAhead(now)

	found, full, err := d.occurrencesToPlan(now, horizon)
	if err != nil {
		d.log.Warn("reading the index of occurrences to plan them ahead", "err", err)
		return wait
	}
	if len(found) == 0 {
		gw.caughtUp()
		return wait
	}
	if full {
		wait = 0 // more within the window: read on at once
	} else {
		gw.caughtUp()
	}
	last := found[len(found)-1]
	d.mu.Lock()
	d.mu.ahead.readFrom = &last
	d.mu.Unlock()

	// AdvanceEach reads each occurrence once, to plan and to write it.
	d.planning.RLock()
	defer d.planning.RUnlock()
	// Until the successors are told of, nothing is handed off (see
	// Committing). Each is due after its occurrence.
	defer d.endCommit(d.beginCommit(d.earliestStart(found), false))
	defer d.noting()()
	plans, res, err := d.repo.AdvanceEach(found, func(k keys.Key, m *delaystore.StoredMessage) (delaystore.Plan, bool) {
		if m.GetRecurrence() == nil || m.FireAtNs < now || m.FireAtNs > horizon || m.TtlNs > 0 || m.Recurrence.Overlap != delaystore.Overlap_OVERLAP_ALLOW {
			// NB: one due already is being delivered by a pass, which
			// plans it with the catch-up policy; one beyond the horizon
			// (a coarse time bucket) is planned on delivery. So is one
			// with a TTL: planning sets its expiry, which counts from
			// when it first goes out, and a pass late by more than the
			// TTL must not find it expired unsent. And one with an
			// overlap policy, which only the answer of the one before,
			// when it falls due, decides.
			return delaystore.Plan{}, false
		}
		p := d.plan(outgoing{f: &flight{key: k}, msg: m}, now, false)
		// A catch-up skip is not possible for one in the future; if
		// it were, the pass that delivers it decides.
		return p, !p.Drop
	}, delaystore.Sync)
	if err != nil {
		// Nothing stored: the passes plan them on delivery.
		d.log.Warn("planning occurrences ahead", "occurrences", len(found), "err", err)
		return wait
	}
	if d.afterPlanCommit != nil {
		d.afterPlanCommit()
	}
	d.notePlannedAhead(plans, res)
	return wait
}

// noting marks a round of the planner under way, from before its commit
// until it noted what it stored, and returns what ends the mark. A replace
// by Delay-Id that finds no occurrence planned ahead of the one it
// replaced waits for the marks to end: the occurrence may be planned in a
// commit this round has not noted yet (see withdrawnWhileNotingLocked).
// NB: rounds run one after another on planLoop's goroutine, so they note
// in the order they began: once noted reaches a count of begun, every
// round begun by then has noted.
func (d *Dispatcher) noting() (end func()) {
	d.mu.Lock()
	d.mu.ahead.begun++
	d.mu.Unlock()
	return func() {
		d.mu.Lock()
		d.mu.ahead.noted++
		d.mu.noted.Broadcast()
		d.mu.Unlock()
	}
}

// withdrawGone deletes x, an occurrence planned ahead whose successor next
// was found gone as the plan was noted, and keeps x as withdrawn by next
// until the delete commits.
func (d *Dispatcher) withdrawGone(x, next keys.Key) {
	d.stats.withdrawn.Add(1)
	d.mu.Lock()
	d.mu.ahead.withdrawnBy[next] = x
	d.mu.Unlock()
	d.DeleteWithdrawn(x, func(error) {
		d.mu.Lock()
		if d.mu.ahead.withdrawnBy[next] == x {
			delete(d.mu.ahead.withdrawnBy, next)
		}
		d.mu.Unlock()
	})
}

// withdrawnWhileNotingLocked is what a replace of k by Delay-Id that
// found no occurrence planned ahead of k must withdraw still: the planner
// may have committed k as a successor, before the replace's commit, and
// not yet noted it. It waits for the planner's rounds under way to note
// their plans (not for rounds begun later: they read the store after the
// replace), then returns the occurrence planned ahead of k, withdrawn and
// marked settled, if there is one, or the one the planner withdrew
// itself, if its delete has not committed yet. mu must be held.
func (d *Dispatcher) withdrawnWhileNotingLocked(k keys.Key) (keys.Key, bool) {
	for begun := d.mu.ahead.begun; d.mu.ahead.noted < begun; {
		if d.beforeNotedWait != nil {
			d.beforeNotedWait()
		}
		d.mu.noted.Wait()
	}
	if x, ok := d.mu.ahead.end(k); ok {
		d.mu.flights.markSettling(x)
		d.stats.withdrawn.Add(1)
		return x, true
	}
	x, ok := d.mu.ahead.withdrawnBy[k]
	return x, ok
}

// occurrencesToPlan reads, from where the last read ended, the keys of the
// occurrences due by horizon, at most a pass's worth; full says there are
// more.
func (d *Dispatcher) occurrencesToPlan(now, horizon int64) (found []keys.Key, full bool, err error) {
	maxBucket := keys.Bucket(horizon/int64(time.Millisecond), d.bucketMs)
	d.mu.Lock()
	from := d.mu.ahead.readFrom
	d.mu.Unlock()
	if from == nil {
		// What is due already is the passes' to plan, as they deliver
		// it; the planner starts at the current bucket, so a backlog after
		// an outage costs it nothing.
		k := keys.New(0, keys.Bucket(now/int64(time.Millisecond), d.bucketMs), 0)
		from = &k
	}
	limit := d.cfg.PassLimit
	// The index of occurrences holds only occurrences still to plan,
	// so the planner reads them and not the one-shot messages due with
	// them: each message it reads, it reads under the repository's write
	// lock, which ingest and deletes wait for.
	err = d.repo.ScanOccurrences(from, maxBucket, func(k keys.Key) bool {
		if len(found) == limit {
			full = true
			return false
		}
		if d.cfg.Frozen != nil && d.cfg.Frozen(k.TopicHash()) {
			// Held still: planned, if it must be, as it goes out once
			// thawed, as what is due already is.
			return true
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
	// The successor is where Delay-Id points from the commit on, so a
	// CANCEL or a replace by id may have taken it already. One whose mark
	// came before the entry is seen in canceled here; one whose delete
	// committed before the read below is seen by the read; any later one
	// finds the entry (aheadTable.end). The pass then needs no read. The
	// occurrence of a successor gone is deleted now, not at its time: it
	// would stay pending, to GET and LIST, until then.
	type withdrawal struct{ x, next keys.Key }
	var gone []withdrawal
	added := false
	d.mu.Lock()
	for j, p := range plans {
		if res[j].Err != nil || p.Next == nil {
			continue // planned meanwhile, gone, or the last
		}
		next := res[j].Next
		if next.EventID() > 0 && dueBefore(next, *d.mu.ahead.readFrom) {
			// A successor within the range read (an interval shorter
			// than the look-ahead): read again from it, so it too is
			// planned ahead.
			from := keys.New(next.TopicHash(), next.Bucket(), next.EventID()-1)
			d.mu.ahead.readFrom = &from
		}
		if d.mu.flights.isCanceled(next) {
			d.mu.flights.markSettling(p.Key)
			gone = append(gone, withdrawal{p.Key, next})
			continue
		}
		d.mu.ahead.add(p.Key, next, p.Cur.FireAtNs)
		added = true
	}
	d.mu.Unlock()
	if added && d.cfg.StageAhead > 0 {
		// The loop may sleep until a burst just planned falls due:
		// it wakes StageAhead before it instead, to stage it.
		d.signal()
	}
	for _, w := range gone {
		d.withdrawGone(w.x, w.next)
	}
	for j, p := range plans {
		if res[j].Err != nil || p.Next == nil {
			continue
		}
		// NB: Has, not Get: whether it is gone is all that is asked,
		// and decoding the successor just written was a read of every
		// occurrence for nothing.
		if ok, err := d.repo.Has(res[j].Next); err == nil && !ok {
			d.mu.Lock()
			x, withdrawing := d.mu.ahead.end(res[j].Next)
			if withdrawing {
				d.mu.flights.markSettling(x)
			}
			d.mu.Unlock()
			if withdrawing {
				d.withdrawGone(x, res[j].Next)
			}
			continue
		}
		d.Notify(delaystore.Scheduled{Key: res[j].Next}, p.Next.FireAtNs)
	}
}

// pruneAhead forgets occurrences planned ahead long ago that are gone from
// the store (canceled by tag, expired): nothing will publish them.
func (d *Dispatcher) pruneAhead(now int64) {
	old := now - int64(aheadPruneAfter)
	d.mu.Lock()
	stale := d.mu.ahead.dueBefore(old)
	d.mu.Unlock()
	for _, k := range stale {
		if _, err := d.repo.Get(k); errors.Is(err, delaystore.ErrNotFound) {
			d.mu.Lock()
			d.mu.ahead.take(k)
			d.mu.Unlock()
		}
	}
	d.mu.Lock()
	d.mu.ahead.shrink()
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

// cancelSchedule cancels the occurrence m under k and, if it was planned,
// the schedule's newest occurrence, when that descends from m: a CANCEL
// answered "canceled" must not leave the schedule on. It holds the
// planner's lock exclusively, so no occurrence is planned meanwhile: the
// newest occurrence it finds stays the newest until it is canceled.
//
// m was read before the lock. The dispatcher may have planned it since,
// storing its successor, and the successor may have gone out and been
// planned in turn; whatever m says, the newest occurrence is the one to
// cancel while it descends from m.
func (d *Dispatcher) cancelSchedule(ctx context.Context, k keys.Key, m *delaystore.StoredMessage) (bool, error) {
	d.planning.Lock()
	defer d.planning.Unlock()
	ok, err := d.cancel(ctx, k)
	if err != nil {
		return false, err
	}
	nk, found, err := d.descendant(k, m)
	if err != nil || !found {
		return ok, err
	}
	okNext, err := d.cancel(ctx, nk)
	if err != nil {
		return false, fmt.Errorf("dispatch: cancel %s, a later occurrence of %s: %w", nk, k, err)
	}
	return ok || okNext, nil
}

// descendant finds the schedule's newest occurrence if it descends from m,
// the occurrence that was under k: the same schedule further on. It does
// not report a schedule scheduled again under the same Delay-Id since,
// which is another schedule and goes on. The planner's lock must be held:
// the newest occurrence is then one not planned yet, which cannot go out,
// or the schedule's last, whose absence means nothing is left to cancel.
func (d *Dispatcher) descendant(k keys.Key, m *delaystore.StoredMessage) (keys.Key, bool, error) {
	r := m.GetRecurrence()
	if r.GetPlanned() && r.GetNextNs() == 0 {
		return keys.Key{}, false, nil // the last
	}
	nk, err := d.repo.LookupSchedule(m.Subject, r.GetName())
	if errors.Is(err, delaystore.ErrNotFound) || (err == nil && nk == k) {
		return keys.Key{}, false, nil // ended already, or m itself
	}
	if err != nil {
		return keys.Key{}, false, fmt.Errorf("dispatch: look up the schedule of %s: %w", k, err)
	}
	nm, err := d.repo.Get(nk)
	if errors.Is(err, delaystore.ErrNotFound) {
		return keys.Key{}, false, nil
	}
	if err != nil {
		return keys.Key{}, false, fmt.Errorf("dispatch: read %s, the newest occurrence of %s: %w", nk, k, err)
	}
	nr := nm.GetRecurrence()
	// Each occurrence planned counts one more, toward Delay-Limit or,
	// skipped by the catch-up policy, as skipped; a schedule scheduled
	// again starts from 1.
	later := nr.GetSeq()+nr.GetSkipped() > r.GetSeq()+r.GetSkipped() && nr.GetOccurrenceNs() > r.GetOccurrenceNs()
	if !later || !sameSchedule(r, nr) || (r.GetPlanned() && nr.GetOccurrenceNs() < r.GetNextNs()) {
		return keys.Key{}, false, nil
	}
	return nk, true, nil
}

// sameSchedule reports whether two occurrences carry the same schedule.
func sameSchedule(a, b *delaystore.Recurrence) bool {
	return a.GetCron() == b.GetCron() && a.GetEveryNs() == b.GetEveryNs() && a.GetZone() == b.GetZone() &&
		a.GetUntilNs() == b.GetUntilNs() && a.GetLimit() == b.GetLimit() && a.GetCatchUp() == b.GetCatchUp() && a.GetId() == b.GetId()
}
