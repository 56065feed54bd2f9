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
}

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
	return p, nil
}

// First is the first occurrence of a schedule created at now: at, when the
// publisher gave one (Delay or Delay-At), else the first planned time
// after now. ok is false when there is none before Until.
func (p Plan) First(now time.Time, at time.Time, given bool) (time.Time, bool) {
	first := at
	if !given {
		first = p.After(now, now)
	}
	if first.IsZero() || (!p.Until.IsZero() && first.After(p.Until)) {
		return time.Time{}, false
	}
	return first, true
}

// Missed reports whether the occurrence planned at occ, going out at now,
// was missed: its successor on the plan is due already.
func (p Plan) Missed(occ, now time.Time) bool {
	n := p.After(occ, occ)
	return !n.IsZero() && !n.After(now)
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
	next := p.After(occ, occ)
	nb := uint32(0)
	if !next.IsZero() && !next.After(now) {
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
