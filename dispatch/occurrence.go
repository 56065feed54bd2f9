package dispatch

import (
	"errors"
	"time"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/dispatch/recur"
	"github.com/natsdelay/natsdelay/keys"
)

// planOccurrences plans the successor of every occurrence of a recurring
// schedule in out that goes out for the first time, before it is published,
// and returns out without the occurrences that must not go out: gone from
// the store, failed to plan (delivered later), or skipped by the catch-up
// policy. See package recur for why this order keeps schedules whole across
// crashes.
//
// The plans of one pass are one synced commit, so a thousand schedules
// due at the same second cost one fsync, not a thousand.
func (d *Dispatcher) planOccurrences(out []outgoing, now int64) []outgoing {
	var plans []delaystore.Plan
	var at []int // index in out of each plan
	var overlapped []bool
	drop := make(map[int]bool)
	for i, o := range out {
		r := o.msg.GetRecurrence()
		if r == nil || r.Planned {
			continue
		}
		// An occurrence SCHEDULE.SKIP skips is deleted unsent, whatever
		// the one before it did.
		held := r.Skip == 0 && d.overlapHeld(r)
		if held && r.Overlap == delaystore.Overlap_OVERLAP_BUFFER_ONE {
			d.holdBehind(o.f, now)
			drop[i] = true
			continue
		}
		plans = append(plans, d.plan(o, now, held))
		at = append(at, i)
		overlapped = append(overlapped, held)
	}
	if len(plans) == 0 && len(drop) == 0 {
		return out
	}
	// Until the successors are told of, nothing is handed off (see
	// Committing).
	earliest := int64(never)
	for _, p := range plans {
		if p.Next != nil {
			earliest = min(earliest, p.Next.FireAtNs)
		}
	}
	defer d.endCommit(d.beginCommit(earliest, false))
	d.planning.RLock()
	res, err := d.repo.Advance(plans, delaystore.Sync)
	d.planning.RUnlock()
	for j, p := range plans {
		var r delaystore.Planned
		if err == nil {
			r = res[j]
		}
		if !d.applyPlan(&out[at[j]], p, r, err, now) {
			drop[at[j]] = true
			if err != nil || r.Err != nil {
				continue
			}
			switch {
			case out[at[j]].msg.GetRecurrence().GetSkip() > 0:
				d.happened(Skipped, p.Key, out[at[j]].msg, 0, "skip")
			case overlapped[j]:
				d.happened(Skipped, p.Key, out[at[j]].msg, 0, "overlap")
			}
		}
	}
	kept := out[:0]
	for i, o := range out {
		if !drop[i] {
			kept = append(kept, o)
		}
	}
	return kept
}

// applyPlan settles o after its plan p was committed (commitErr, the
// commit's error, or r.Err, the plan's own) and reports whether o goes out:
// planned, it goes out as rewritten; skipped by the catch-up policy, gone
// from the store or not planned, it does not, and one not planned is
// delivered later, when the store takes the plan.
func (d *Dispatcher) applyPlan(o *outgoing, p delaystore.Plan, r delaystore.Planned, commitErr error, now int64) bool {
	f := o.f
	if commitErr != nil {
		d.log.Warn("planning the next occurrences", "tag", f.key, "subject", o.msg.Subject, "err", commitErr)
	} else {
		switch err := r.Err; {
		case err == nil:
			d.stats.plannedOnDelivery.Add(1)
			if p.Next != nil {
				d.Notify(delaystore.Scheduled{Key: r.Next}, p.Next.FireAtNs)
			}
			if !p.Drop {
				o.msg = p.Cur
				return true
			}
			d.stats.skipped.Add(1)
			d.mu.Lock()
			if d.mu.flights.byKey[f.key] == f {
				d.forgetLocked(f)
			}
			// As for a replaced message in Notify: a scan under way
			// may have read it; the mark keeps it from going out.
			d.mu.flights.settledUncommitted(f.key)
			d.mu.Unlock()
			return false
		case errors.Is(err, delaystore.ErrPlanned):
			// Planned by an earlier pass whose copy this scan did not
			// see: deliver the stored one.
			if m, err := d.repo.Get(f.key); err == nil {
				o.msg = m
				return true
			}
			fallthrough
		case errors.Is(err, delaystore.ErrNotFound):
			// Canceled, replaced or settled since the scan read it.
			d.mu.Lock()
			if d.mu.flights.byKey[f.key] == f && f.state != stateSettling {
				d.forgetLocked(f)
			}
			d.mu.Unlock()
			return false
		default:
			d.log.Error("planning the next occurrence", "tag", f.key, "subject", o.msg.Subject, "err", err)
		}
	}
	// Not planned: deliver it later, when the store takes the plan.
	d.mu.Lock()
	if d.mu.flights.byKey[f.key] == f && f.state != stateSettling {
		d.unsendLocked(f)
		d.mu.subjects.block(f.topic, now)
	}
	d.mu.Unlock()
	return false
}

// plan is the plan of o's occurrence at now: the occurrence as rewritten
// (planned, with its Delay-Next time and its expiry), whether the catch-up
// policy skips it, and its successor, if any.
//
// skip says the overlap policy skips it: the occurrence before it is
// still unanswered (see overlapHeld).
func (d *Dispatcher) plan(o outgoing, now int64, skip bool) delaystore.Plan {
	r := o.msg.GetRecurrence()
	nowT := time.Unix(0, now)
	occ := time.Unix(0, r.OccurrenceNs)
	cur := o.msg.Derived()
	cur.Recurrence.Planned = true
	if cur.TtlNs > 0 {
		// NB: an occurrence's TTL counts from when it first goes out, so a
		// catch-up delivery after an outage is not born expired. Until it
		// is planned it has no expiry: expiring unplanned would end the
		// schedule.
		cur.ExpireAtNs = occurrenceExpiry(max(cur.FireAtNs, now), cur.TtlNs)
	}
	p := delaystore.Plan{Key: o.f.key, Cur: cur}
	sched, err := recur.Of(r)
	if err != nil {
		// Ingest accepted it, so only a zone database without the
		// zone (or a changed parser) gets here: deliver it as the last.
		d.log.Error("recurring schedule no longer parses: delivering its last occurrence", "tag", o.f.key, "subject", o.msg.Subject, "err", err)
		return p
	}
	skipped := r.Skip > 0 // by SCHEDULE.SKIP
	p.Drop = skip || skipped || sched.Skip(occ, nowT)
	seq := r.Seq
	if p.Drop {
		seq-- // a skipped occurrence does not count toward the limit
	}
	if at, behind, ok := sched.Next(occ, seq, r.Behind, nowT); ok {
		cur.Recurrence.NextNs = at.UnixNano()
		next := o.msg.Derived()
		next.FireAtNs, next.EnqueuedAtNs = sched.FireAt(at).UnixNano(), now
		next.Attempt, next.EventId, next.ExpireAtNs = 0, 0, 0
		nr := next.Recurrence
		nr.OccurrenceNs, nr.Seq, nr.Behind = at.UnixNano(), seq+1, behind
		nr.Planned, nr.NextNs = false, 0
		// Its successor's time as its own plan gives it when on time:
		// that plan leaves it unrewritten if it finds the same (see
		// delaystore's planned.go).
		if after, _, ok := sched.Next(at, nr.Seq, behind, at); ok {
			nr.NextNs = after.UnixNano()
		}
		if p.Drop {
			nr.Skipped++
		}
		if skipped {
			nr.Skip--
		}
		if r.Overlap != delaystore.Overlap_OVERLAP_ALLOW && !p.Drop {
			// The successor waits for this one's answer; one skipped
			// leaves it waiting for the one before.
			nr.Prev = o.f.key[:]
		}
		p.Next = next
	}
	return p
}

// overlapHeld reports whether the occurrence of r must not go out yet
// under its overlap policy: the occurrence delivered before it is still
// unanswered, pending in flight or waiting for a redelivery. An answer
// marks it settled at once, before its delete commits.
func (d *Dispatcher) overlapHeld(r *delaystore.Recurrence) bool {
	if r.Overlap == delaystore.Overlap_OVERLAP_ALLOW || len(r.Prev) != keys.Len {
		return false
	}
	prev := keys.Key(r.Prev)
	d.mu.Lock()
	settled := d.mu.flights.isCanceled(prev)
	d.mu.Unlock()
	if settled {
		return false
	}
	_, err := d.repo.Get(prev)
	return err == nil
}

// holdBehind puts f, an occurrence held by Delay-Overlap buffer-one, back
// as not sent and blocks its subject for a backoff, as for a delivery
// that reached no one: it is tried again then, and goes out once the
// occurrence before it is answered.
func (d *Dispatcher) holdBehind(f *flight, now int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.mu.flights.byKey[f.key] == f && f.state != stateSettling {
		d.unsendLocked(f)
		d.mu.subjects.block(f.topic, now)
	}
}

// occurrenceExpiry is the expiry of an occurrence that goes out at from
// with a TTL of ttl nanoseconds, at most delaystore.MaxTimeNs. NB: ingest
// checks the TTL against the first occurrence only; a later one, closer
// to the end of storable time, would otherwise overflow to a time in the
// past and expire at once.
func occurrenceExpiry(from, ttl int64) int64 {
	if ttl > delaystore.MaxTimeNs-from {
		return delaystore.MaxTimeNs
	}
	return from + ttl
}
