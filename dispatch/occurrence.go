package dispatch

import (
	"errors"
	"time"

	"google.golang.org/protobuf/proto"

	"natsdelay/delaystore"
	"natsdelay/recur"
)

// planOccurrences plans the successor of every occurrence of a recurring
// schedule in out that goes out for the first time, before it is published,
// and returns out without the occurrences that must not go out: gone from
// the store, failed to plan (delivered later), or skipped by the catch-up
// policy. See package recur for why this order keeps schedules whole across
// crashes.
//
// NB: each plan is one synced commit. Occurrences are few next to one-off
// messages; a schedule fires at most every recur.MinEvery.
func (d *Dispatcher) planOccurrences(out []outgoing, now int64) []outgoing {
	kept := out[:0]
	for _, o := range out {
		if r := o.msg.GetRecurrence(); r == nil || r.Planned {
			kept = append(kept, o)
			continue
		}
		if msg, ok := d.planOccurrence(o, now); ok {
			o.msg = msg
			kept = append(kept, o)
		}
	}
	return kept
}

// planOccurrence stores the successor of o's occurrence, or none after the
// last, and returns the occurrence as rewritten (planned, with its
// Delay-Next time) and whether it is to go out.
func (d *Dispatcher) planOccurrence(o outgoing, now int64) (*delaystore.StoredMessage, bool) {
	f, r := o.f, o.msg.GetRecurrence()
	nowT := time.Unix(0, now)
	occ := time.Unix(0, r.OccurrenceNs)
	cur := proto.Clone(o.msg).(*delaystore.StoredMessage)
	cur.Recurrence.Planned = true
	if cur.TtlNs > 0 {
		// NB: an occurrence's TTL counts from when it first goes out, so a
		// catch-up delivery after an outage is not born expired. Until it
		// is planned it has no expiry: expiring unplanned would end the
		// schedule.
		cur.ExpireAtNs = max(cur.FireAtNs, now) + cur.TtlNs
	}

	var next *delaystore.StoredMessage
	drop := false
	p, err := recur.Of(r)
	if err != nil {
		// NB: ingest accepted it, so only a zone database without the
		// zone (or a changed parser) gets here: deliver it as the last.
		d.log.Error("recurring schedule no longer parses: delivering its last occurrence", "tag", f.key, "subject", o.msg.Subject, "err", err)
	} else {
		drop = p.Skip(occ, nowT)
		seq := r.Seq
		if drop {
			seq-- // a skipped occurrence does not count toward the limit
		}
		if at, behind, ok := p.Next(occ, seq, r.Behind, nowT); ok {
			cur.Recurrence.NextNs = at.UnixNano()
			next = proto.Clone(o.msg).(*delaystore.StoredMessage)
			next.FireAtNs, next.EnqueuedAtNs = at.UnixNano(), now
			next.Attempt, next.EventId, next.ExpireAtNs = 0, 0, 0
			nr := next.Recurrence
			nr.OccurrenceNs, nr.Seq, nr.Behind = at.UnixNano(), seq+1, behind
			nr.Planned, nr.NextNs = false, 0
			if drop {
				nr.Skipped++
			}
		}
	}

	s, err := d.repo.Advance(f.key, cur, drop, next, delaystore.Sync)
	switch {
	case errors.Is(err, delaystore.ErrPlanned):
		// Planned by an earlier pass whose copy this scan did not see:
		// deliver the stored one.
		if m, err := d.repo.Get(f.key); err == nil {
			return m, true
		}
		fallthrough
	case errors.Is(err, delaystore.ErrNotFound):
		// Canceled, replaced or settled since the scan read it.
		d.mu.Lock()
		if d.mu.flights[f.key] == f && f.state != stateSettling {
			d.forgetLocked(f)
		}
		d.mu.Unlock()
		return nil, false
	case err != nil:
		d.log.Warn("planning the next occurrence", "tag", f.key, "subject", o.msg.Subject, "err", err)
		d.mu.Lock()
		if d.mu.flights[f.key] == f && f.state != stateSettling {
			d.unsendLocked(f)
			d.blockLocked(f.topic, now)
		}
		d.mu.Unlock()
		return nil, false
	}
	if next != nil {
		d.Notify(s, next.FireAtNs)
	}
	if !drop {
		return cur, true
	}
	d.stats.skipped.Add(1)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.mu.flights[f.key] == f {
		d.forgetLocked(f)
	}
	// NB: as for a replaced message in Notify: a scan under way may have
	// read it; the mark keeps it from going out.
	d.mu.canceled[f.key] = struct{}{}
	d.mu.committed = append(d.mu.committed, f.key)
	return nil, false
}
