package recur

import (
	"time"

	"github.com/natsdelay/natsdelay/delaystore"
)

// CatchUp is the Delay-Catch-Up policy: what becomes of occurrences missed
// while the service was down or behind.
type CatchUp = delaystore.CatchUp

// The catch-up policies.
const (
	// One delivers the late occurrence as the one catch-up for all those
	// missed, then goes back on the plan: the next is the first planned
	// time after now.
	One = delaystore.CatchUp_CATCH_UP_ONE
	// All delivers each missed occurrence, at most MaxCatchUp in a row.
	All = delaystore.CatchUp_CATCH_UP_ALL
	// None delivers no missed occurrence: the next is the first planned
	// time after now.
	None = delaystore.CatchUp_CATCH_UP_NONE
)

// Plan is a schedule: its spec, when it ends, and its catch-up policy.
type Plan struct {
	Spec
	// Until is the end: no occurrence after it. Zero means none.
	Until time.Time
	// Limit is the number of occurrences at most. Zero means none.
	Limit uint64
	// CatchUp is the catch-up policy.
	CatchUp CatchUp
	// Extra is what few schedules use, nil for none. NB: a pointer, so
	// that a plan without them is no larger to copy than before they
	// existed; the planner copies plans by value on every occurrence.
	*Extra
}

// Extra are the parts of a plan that few schedules use.
type Extra struct {
	// Exclude are the dates, in Loc, on which no occurrence is planned.
	Exclude Exclusions
	// Jitter, when not zero, makes each occurrence go out at its planned
	// time plus an offset in [0, Jitter) drawn from Seed and that time
	// (see FireAt).
	Jitter time.Duration
	Seed   uint64
}

// Extras returns p's Extra to set, made when p has none.
func (p *Plan) Extras() *Extra {
	if p.Extra == nil {
		p.Extra = &Extra{}
	}
	return p.Extra
}

// excludes reports whether p has exclusion dates.
func (p *Plan) excludes() bool { return p.Extra != nil && len(p.Exclude) > 0 }

// Of rebuilds the plan stored with an occurrence.
func Of(r *delaystore.Recurrence) (Plan, error) {
	var s Spec
	var err error
	if r.GetCron() != "" {
		s, err = ParseCron(r.GetCron(), r.GetZone())
	} else {
		s, err = ParseEvery(time.Duration(r.GetEveryNs()))
	}
	if err != nil {
		return Plan{}, err
	}
	p := Plan{Spec: s, Limit: r.GetLimit(), CatchUp: r.GetCatchUp()}
	if r.GetUntilNs() != 0 {
		p.Until = time.Unix(0, r.GetUntilNs())
	}
	if r.GetJitterNs() != 0 || r.GetExclude() != "" {
		x := p.Extras()
		x.Jitter, x.Seed = time.Duration(r.GetJitterNs()), r.GetJitterSeed()
		if r.GetExclude() != "" {
			if x.Exclude, err = ParseExclude(r.GetExclude()); err != nil {
				return Plan{}, err
			}
		}
	}
	return p, nil
}

// After is Spec.After without the excluded dates: the first planned time
// strictly after t that falls on no date of Exclude.
func (p Plan) After(prev, t time.Time) time.Time {
	next := p.Spec.After(prev, t)
	if p.excludes() {
		next = p.pastExcluded(prev, next)
	}
	return next
}

// pastExcluded is next, Spec.After's answer for prev, or when it falls on
// an excluded date the first planned time after that date that does not.
// NB: the planner's calls (Next, Missed) make the length check
// themselves, so a schedule without exclusions pays it and no call.
func (p *Plan) pastExcluded(prev, next time.Time) time.Time {
	// Each turn moves past one range, and the ranges are sorted, so this
	// ends in len(Exclude) turns; the bound only matters where clocks go back
	// over midnight, and a day read twice may then be met twice.
	for i := 0; p.excludes() && !next.IsZero(); i++ {
		last, ok := p.Exclude.covering(next, p.Loc)
		if !ok {
			break
		}
		if i > 2*len(p.Exclude)+2 {
			return time.Time{}
		}
		// The first planned time at or after the day that follows.
		from := dayStart(last+1, p.Loc).Add(-time.Nanosecond)
		next = p.Spec.After(prev, maxTime(from, next))
	}
	return next
}

// Excluded reports whether t falls on a date of Exclude.
func (p Plan) Excluded(t time.Time) bool {
	if !p.excludes() {
		return false
	}
	_, ok := p.Exclude.covering(t, p.Loc)
	return ok
}

// First is the first occurrence of a schedule created at now: at, when the
// publisher gave one (Delay or Delay-At), else the first planned time
// after now. ok is false when there is none before Until.
func (p Plan) First(now time.Time, at time.Time, given bool) (time.Time, bool) {
	first := at
	if !given {
		first = p.After(now, now)
	} else if p.Excluded(at) {
		// A given first time on an excluded date moves to the plan's
		// next time after it, which an interval counts from it.
		first = p.After(at, at)
	}
	if first.IsZero() || (!p.Until.IsZero() && first.After(p.Until)) {
		return time.Time{}, false
	}
	return first, true
}

// Missed reports whether the occurrence planned at occ, going out at now,
// was missed: its successor on the plan is due already.
func (p Plan) Missed(occ, now time.Time) bool {
	n := p.Spec.After(occ, occ)
	if p.excludes() {
		n = p.pastExcluded(occ, n)
	}
	return !n.IsZero() && !p.FireAt(n).After(now)
}

// Skip reports whether the occurrence planned at occ is not to be
// delivered at now: it was missed and the policy is None.
func (p Plan) Skip(occ, now time.Time) bool {
	return p.CatchUp == None && p.Missed(occ, now)
}

// Next plans the successor of occurrence number seq, planned at occ, which
// goes out (or is skipped) at now; behind is the number of catch-up
// deliveries in a row before it. It returns the successor's planned time
// and its behind count, and ok false when occ is the last.
//
// The successor is the next planned time after occ. When that is due
// already (occurrences were missed), policy One and None take the first
// planned time after now instead, and All keeps it, unless MaxCatchUp
// catch-up deliveries in a row went before: then it too takes the first
// planned time after now.
func (p Plan) Next(occ time.Time, seq uint64, behind uint32, now time.Time) (time.Time, uint32, bool) {
	if p.Limit != 0 && seq >= p.Limit {
		return time.Time{}, 0, false
	}
	next := p.Spec.After(occ, occ)
	if p.excludes() {
		next = p.pastExcluded(occ, next)
	}
	nb := uint32(0)
	if !next.IsZero() && !p.FireAt(next).After(now) {
		if p.CatchUp == All && behind+1 < MaxCatchUp {
			nb = behind + 1
		} else {
			next = p.After(occ, now)
		}
	}
	if next.IsZero() || (!p.Until.IsZero() && next.After(p.Until)) {
		return time.Time{}, 0, false
	}
	return next, nb, true
}

// Upcoming lists up to n planned times after occ, ending at Until and,
// counting from occurrence number seq, at Limit.
func (p Plan) Upcoming(occ time.Time, seq uint64, n int) []time.Time {
	var out []time.Time
	t := occ
	for len(out) < n && (p.Limit == 0 || seq+uint64(len(out)) < p.Limit) {
		t = p.After(occ, t)
		if t.IsZero() || (!p.Until.IsZero() && t.After(p.Until)) {
			break
		}
		out = append(out, t)
	}
	return out
}

// Preview lists when the next n occurrences go out, from occ on, occ
// itself first: occ is occurrence number seq, not yet delivered, and the
// first skip of them, occ included, are skipped (SCHEDULE.SKIP), which
// count toward neither the list nor Limit. Each time is FireAt of its
// planned time; the list ends at Until and at Limit.
func (p Plan) Preview(occ time.Time, seq, skip uint64, n int) []time.Time {
	var out []time.Time
	for t := occ; len(out) < n && (p.Limit == 0 || seq <= p.Limit); t = p.After(occ, t) {
		if t.IsZero() || (!p.Until.IsZero() && t.After(p.Until)) {
			break
		}
		if skip > 0 {
			skip--
			continue
		}
		out = append(out, p.FireAt(t))
		seq++
	}
	return out
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
