package dispatch

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"golang.org/x/time/rate"

	"github.com/natsdelay/natsdelay/delaystore"
)

// Limits set by users, per subject pattern (see delaystore.Limit), on top
// of the default share of the window (fairness.go). A topic resolves its
// rule from the table once it knows its subject (from its first scan) and
// again after each change of the table; the rule of the most specific
// pattern that matches wins whole (see MoreSpecific), and a field it
// leaves unset takes the default, not another pattern's value.

// limitTable is the limits in force, most specific pattern first. gen
// counts its changes, so a topic knows when its rule is stale.
type limitTable struct {
	gen    uint64
	limits []delaystore.Limit
	// groups are the grouped limits, most specific first, and
	// groupPatterns their patterns (see groups.go).
	groups        []groupLimit
	groupPatterns []string
}

// rule is the flow control of one topic.
type rule struct {
	maxInFlight int
	paused      bool
	rate        rate.Limit // 0: no rate
	burst       int
	// group is the most specific grouped limit that matches, if any.
	group *groupLimit
}

// ReloadLimits reads the limits from the repository and puts them in
// force: each topic resolves its rule again before its next scan, and
// those held at a limit or paused are looked at again at once. Call it
// after a change to the stored limits.
func (d *Dispatcher) ReloadLimits() error {
	ls, err := d.repo.Limits()
	if err != nil {
		return fmt.Errorf("dispatch: %w", err)
	}
	slices.SortStableFunc(ls, func(a, b delaystore.Limit) int { return MoreSpecific(a.Pattern, b.Pattern) })
	now := d.nowNs()
	d.mu.Lock()
	defer d.mu.Unlock()
	d.mu.subjects.setLimits(ls)
	d.mu.flights.resumePaused(now)
	if d.mu.passStart != 0 {
		d.mu.reloadPass = d.mu.pass
	}
	d.signal()
	return nil
}

// setLimits puts the limits ls, most specific first, in force: each
// topic resolves its rule again before its next scan, and those held at
// a limit or paused are released, to be looked at again.
func (st *subjectTable) setLimits(ls []delaystore.Limit) {
	gls, patterns := groupLimitsOf(ls)
	st.limits = limitTable{gen: st.limits.gen + 1, limits: ls, groups: gls, groupPatterns: patterns}
	st.dropGroups()
	for t := range st.held {
		st.unhold(t)
		st.release(t)
	}
}

// ruleOf is t's rule, resolved again if the table changed since.
func (st *subjectTable) ruleOf(t *topic) rule {
	if t.ruleGen == st.limits.gen || t.subject == "" {
		return t.rule
	}
	t.ruleGen = st.limits.gen
	r := rule{maxInFlight: st.maxInFlight}
	for _, l := range st.limits.limits {
		if l.Grouped() || !SubjectMatches(l.Pattern, t.subject) {
			continue
		}
		if l.MaxInFlight > 0 {
			r.maxInFlight = l.MaxInFlight
		}
		r.paused = l.Paused
		if l.Rate > 0 {
			r.rate, r.burst = rate.Limit(l.Rate), DefaultBurst(l.Rate, l.Burst)
		}
		break
	}
	for i, p := range st.limits.groupPatterns {
		if SubjectMatches(p, t.subject) {
			r.group = &st.limits.groups[i]
			r.paused = r.paused || r.group.paused
			break
		}
	}
	if st.frozen != nil && st.frozen(t.hash) {
		r.paused = true
	}
	t.rule = r
	t.bucket = keptBucket(t.bucket, r, st.now())
	return r
}

// keptBucket is the bucket of a topic whose rule is now r, after b: b
// itself, its tokens kept, set to r's rate and burst; a new one, full, if
// the topic had none; none if r has no rate. A bucket starts full once,
// when a rate first applies to its subject: resolving the rule again
// after a change to any limit, or making the topic again after it was
// dropped (see subjectTable.spent), must not hand out a second burst.
func keptBucket(b *rate.Limiter, r rule, now int64) *rate.Limiter {
	switch {
	case r.rate <= 0:
		return nil
	case b == nil:
		return rate.NewLimiter(r.rate, r.burst)
	}
	at := time.Unix(0, now)
	if b.Limit() != r.rate {
		b.SetLimitAt(at, r.rate)
	}
	if b.Burst() != r.burst {
		b.SetBurstAt(at, r.burst)
	}
	return b
}

// DefaultBurst is the burst of a rate set without one: a tenth of a
// second's worth, at least 1, so a pass that wakes a little late still
// finds the tokens that accrued meanwhile.
func DefaultBurst(r float64, burst int) int {
	if burst > 0 {
		return burst
	}
	return max(1, int(math.Ceil(r/10)))
}

// tokens is how many deliveries t's rate allows now, and if none, when
// the next is allowed. A topic without a rate has no bound (math.MaxInt).
func (st *subjectTable) tokens(t *topic, now int64) (int, int64) {
	st.ruleOf(t)
	if t.bucket == nil {
		return math.MaxInt, 0
	}
	at := time.Unix(0, now)
	tok := t.bucket.TokensAt(at)
	if tok >= 1 {
		return int(tok), 0
	}
	// The topic waits for a hundredth of a second's worth of tokens
	// (at most its burst), not for one: woken for each token, a subject at
	// 1,000/s cost a pass, and a read of its messages, every millisecond.
	// The rate is the same; its deliveries go out in small groups.
	r := float64(t.bucket.Limit())
	want := min(float64(t.bucket.Burst()), max(1, r/rateWakesPerSecond))
	wait := time.Duration((want - tok) / r * float64(time.Second))
	return 0, after(now, max(wait, time.Millisecond))
}

// rateWakesPerSecond bounds how often a topic held by its rate is woken.
const rateWakesPerSecond = 100

// allow is how many first deliveries t may have now, by its in-flight
// limit, its pause and its rate.
func (st *subjectTable) allow(t *topic, now int64) int {
	tokens, _ := st.tokens(t, now)
	return max(0, min(st.roomOf(t), tokens))
}

// spend takes n tokens of t's rate, for n deliveries taken now.
func (st *subjectTable) spend(t *topic, now int64, n int) {
	if t.bucket != nil && n > 0 {
		t.bucket.AllowN(time.Unix(0, now), n)
	}
}

// MoreSpecific orders subject patterns, most specific first: it is
// negative when a is more specific than b. The rule, in order: more
// literal tokens; then without > before with it; then the longer run of
// literal tokens before the first wildcard; then byte order, so that the
// order is total. orders.eu.paid beats orders.eu.*, which beats
// orders.*.paid, which beats orders.>, which beats >.
func MoreSpecific(a, b string) int {
	la, gta, pa := patternShape(a)
	lb, gtb, pb := patternShape(b)
	switch {
	case la != lb:
		return cmp.Compare(lb, la)
	case gta != gtb:
		if gta {
			return 1
		}
		return -1
	case pa != pb:
		return cmp.Compare(pb, pa)
	}
	return strings.Compare(a, b)
}

// patternShape is what MoreSpecific compares of pattern p: its literal
// tokens, whether it ends in >, and the literal tokens before its first
// wildcard.
func patternShape(p string) (literals int, gt bool, prefix int) {
	wild := false
	for tok := range strings.SplitSeq(p, ".") {
		switch tok {
		case ">":
			gt, wild = true, true
		case "*":
			wild = true
		default:
			literals++
			if !wild {
				prefix++
			}
		}
	}
	return literals, gt, prefix
}

// SubjectMatches reports whether the subject subj matches the NATS
// subject filter f.
func SubjectMatches(f, subj string) bool {
	for {
		ft, frest, fmore := strings.Cut(f, ".")
		st, srest, smore := strings.Cut(subj, ".")
		switch {
		case ft == ">":
			return true
		case ft != "*" && ft != st:
			return false
		case !fmore || !smore:
			return fmore == smore
		}
		f, subj = frest, srest
	}
}
