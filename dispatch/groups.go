package dispatch

import (
	"bytes"
	"math"
	"strings"
	"time"

	"golang.org/x/time/rate"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/keys"
)

// Grouped limits (delaystore.Limit.Whole and KeyHeader) bound a group of
// messages over many subjects: the subjects of a pattern together, or
// each value of a header (a tenant) over the subjects of a pattern. A
// topic resolves, beside its own rule, the most specific grouped limit
// that matches its subject (rule.group); each message it is about to
// deliver then joins its group, which counts its flights and spends its
// rate's tokens. A message whose group is at its in-flight limit, or out
// of tokens, is left behind the cursor, and the scan goes on with the
// topic's later messages of other groups, so one tenant at its limit
// holds back none of another's; the topic itself then waits for the
// group: held, until one of the group's flights ends (in-flight), or in
// the due heap until the group's next token (rate).
//
// A message that arrives at a topic held for a group wakes it: it may be
// of another group. Topics and messages without a grouped limit never
// reach this file: the scan looks at rule.group and goes on.

// groupLimit is a grouped limit in force.
type groupLimit struct {
	pattern     string
	header      string // "" for the pattern as a whole
	maxInFlight int    // 0: no bound
	rate        rate.Limit
	burst       int
	paused      bool
}

// groupKey names one group: a limit's pattern and key header and, for a
// key header, its value. Not the limit itself: a reload of the same
// limits must find the same groups, with their flights.
type groupKey struct {
	pattern, header, value string
}

// group is one group's flow: its flights, its rate's tokens, and the
// topics held until it has room.
type group struct {
	key     groupKey
	lim     *groupLimit // as last resolved
	flights int
	bucket  *rate.Limiter
	waiting []*topic
}

// groupLimitsOf is the grouped limits of ls, most specific first, as ls.
func groupLimitsOf(ls []delaystore.Limit) ([]groupLimit, []string) {
	var gls []groupLimit
	var patterns []string
	for _, l := range ls {
		if !l.Grouped() {
			continue
		}
		gl := groupLimit{pattern: l.Pattern, maxInFlight: l.MaxInFlight, paused: l.Paused}
		if !l.Whole {
			gl.header = l.KeyHeader
		}
		if l.Rate > 0 {
			gl.rate, gl.burst = rate.Limit(l.Rate), DefaultBurst(l.Rate, l.Burst)
		}
		gls = append(gls, gl)
		patterns = append(patterns, l.Pattern)
	}
	return gls, patterns
}

// groupOf is the group of m under gl, made if it is new; nil when m has
// no value of gl's header.
func (st *subjectTable) groupOf(gl *groupLimit, m *delaystore.StoredMessage) *group {
	k := groupKey{pattern: gl.pattern, header: gl.header}
	if gl.header != "" {
		v, ok := headerValue(m, gl.header)
		if !ok {
			return nil
		}
		k.value = v
	}
	g := st.groups[k]
	if g == nil {
		if st.groups == nil {
			st.groups = make(map[groupKey]*group)
		}
		g = &group{key: k}
		st.groups[k] = g
	}
	if g.lim != gl {
		g.lim = gl
		if g.bucket != nil && gl.rate > 0 {
			g.bucket = keptBucket(g.bucket, rule{rate: gl.rate, burst: gl.burst}, st.now())
		} else if gl.rate > 0 {
			g.bucket = rate.NewLimiter(gl.rate, gl.burst)
		} else {
			g.bucket = nil
		}
	}
	return g
}

// headerValue is the first value of m's header name, matched without
// regard to case as NATS publishers spell headers differently.
func headerValue(m *delaystore.StoredMessage, name string) (string, bool) {
	for _, h := range m.Headers {
		if len(h.Values) > 0 && strings.EqualFold(h.Name, name) {
			return h.Values[0], true
		}
	}
	return "", false
}

// room reports whether g takes one more delivery at now, and if not, when
// it may again: never while it is at its in-flight limit (a flight's end
// says when), else when its rate has a token.
func (g *group) room(now int64) (bool, int64) {
	if g.lim.maxInFlight > 0 && g.flights >= g.lim.maxInFlight {
		return false, never
	}
	if g.bucket == nil {
		return true, 0
	}
	tok := g.bucket.TokensAt(time.Unix(0, now))
	if tok >= 1 {
		return true, 0
	}
	wait := time.Duration((1 - tok) / float64(g.bucket.Limit()) * float64(time.Second))
	return false, after(now, max(wait, time.Millisecond))
}

// groupWait is what a scan left for a group: the first group that was
// full, and until when; whether it found another full (mixed); and the
// last key the scan read (readTo).
type groupWait struct {
	g      *group
	at     int64
	mixed  bool
	readTo keys.Key
}

// groupRuleOf is the grouped limit of t, whose message m a scan read
// first: its subject is known from it if it was not.
func (st *subjectTable) groupRuleOf(t *topic, m *delaystore.StoredMessage) *groupLimit {
	if t.subject == "" {
		t.subject = m.Subject
	}
	return st.ruleOf(t).group
}

// admitToGroup lets m, due, join its group under gl: it returns the group (nil
// if m has none) and true, or false when the group is full, noting in w
// the first group found full.
func (st *subjectTable) admitToGroup(gl *groupLimit, m *delaystore.StoredMessage, now int64, w *groupWait) (*group, bool) {
	g := st.groupOf(gl, m)
	if g == nil {
		return nil, true
	}
	if ok, at := g.room(now); !ok {
		if w.g == nil {
			w.g, w.at = g, at
		} else if g != w.g {
			w.mixed = true
		}
		return g, false
	}
	g.flights++
	if g.bucket != nil {
		g.bucket.AllowN(time.Unix(0, now), 1)
	}
	return g, true
}

// unadmit takes back the admission of messages a scan does not take
// after all (its topic's own limits allow fewer).
func (st *subjectTable) unadmit(fs []found, now int64) {
	for _, f := range fs {
		if f.g != nil {
			st.groupLost(f.g, now)
		}
	}
}

// scannedGroups is told that a scan of t at now, with a grouped limit,
// left messages of the full group w.g behind (if not nil): t waits for
// it, unless more is to be read at once (more). A topic woken for room
// in a group that it did not fill passes the wake on.
func (st *subjectTable) scannedGroups(t *topic, w groupWait, more bool, now int64) {
	waited := t.wokenBy
	t.wokenBy = nil
	if w.g != nil && !more {
		st.waitGroup(t, w, now)
	}
	if waited != nil && waited != w.g {
		st.wakeGroup(waited, now)
	}
}

// waitGroup makes t, scanned at now, wait for what w names: held until a
// flight of the group ends, or due again at the group's next token. A
// topic held at its own limit already stays so.
func (st *subjectTable) waitGroup(t *topic, w groupWait, now int64) {
	t.groupReadTo = w.readTo
	if w.at != never {
		st.reschedule(t, w.at)
		return
	}
	if t.limited {
		return
	}
	if t.waitingOn != w.g {
		// NB: one waiting on it is in its list already (woken by an
		// arrival, it stays in it): once is enough.
		t.waitingOn = w.g
		w.g.waiting = append(w.g.waiting, t)
	}
	if t.idx >= 0 {
		// Due again when its next message not yet due is, for the
		// other groups' messages; room in the group wakes it sooner.
		return
	}
	t.limited, t.heldAt = true, now
	// NB: not when it left messages of another full group behind too:
	// it waits for the first only, so the other's room does not wake it,
	// and a wake by an arrival must read them again.
	t.groupResume = !w.mixed
	st.held[t] = struct{}{}
}

// groupResumeAt is where a scan of t should start instead of its cursor,
// nil for its cursor. Held for a full group, t is woken by messages
// committed or falling due after its scan (see arrivedLocked, admit):
// everything from its cursor to where that scan read (groupReadTo) is in
// flight, settled or of groups that were full then, and, since nothing
// woke it but those messages (no room in a group, no flight of its own
// ended), still full. So the scan reads on from there, or from the
// lowest message that arrived below it; its cursor stays where it was,
// at the first message left (see topic.moveCursor). It is asked once per
// wake. mu must be held.
func (t *topic) groupResumeAt() []byte {
	if !t.groupResume {
		return nil
	}
	t.groupResume = false
	if t.waitingOn == nil || t.wokenBy != nil || t.limited {
		return nil
	}
	at := t.groupReadTo.Successor()
	if t.rewind != nil && bytes.Compare(t.rewind, at) < 0 {
		at = t.rewind
	}
	return at
}

// resumedWait is what a scan that read on from where the last one of t
// read (see groupResumeAt) leaves t waiting for: what it found, or else
// what t waited for before, as the messages it did not read again are
// still of it; and the further of the two reads. mu must be held.
func resumedWait(t *topic, w groupWait) groupWait {
	switch {
	case t.waitingOn == nil || t.wokenBy != nil:
	case w.g == nil:
		w.g, w.at = t.waitingOn, never
	case w.g != t.waitingOn:
		// Its messages come first, behind the cursor.
		w.g, w.at, w.mixed = t.waitingOn, never, true
	}
	if bytes.Compare(w.readTo[:], t.groupReadTo[:]) < 0 {
		w.readTo = t.groupReadTo
	}
	return w
}

// groupHeld reports whether t is held for a group's room only, not at
// its own limit: a message that comes due on it may be of another group.
func (st *subjectTable) groupHeld(t *topic) bool {
	return t.waitingOn != nil && t.limited && st.roomOf(t) > 0
}

// groupRead reports whether the due-index entry k of t, held for a
// group's room, is of a message its last scan read: one left behind for a
// full group, or taken. Such an entry needs nothing; waking t for it would
// read its whole backlog again, as often as the frontier reads a share of
// the entries of a tenant with thousands due (see passed).
func groupRead(t *topic, k keys.Key) bool {
	return bytes.Compare(k[:], t.groupReadTo[:]) <= 0
}

// groupLost is told that a flight of g ended: its room goes to the topics
// waiting for it, as many as it has room for. It reports whether any was
// woken.
func (st *subjectTable) groupLost(g *group, now int64) bool {
	g.flights--
	return st.wakeGroup(g, now)
}

// wakeGroup puts back in the due heap, due at now, as many of the topics
// waiting for g as it has room for, the longest waiting first; each
// passes the wake on when its scan leaves room (see Dispatcher.scan).
func (st *subjectTable) wakeGroup(g *group, now int64) bool {
	room := math.MaxInt
	if m := g.lim.maxInFlight; m > 0 {
		room = m - g.flights
	}
	woke := false
	n := 0
	for n < len(g.waiting) && room > 0 {
		t := g.waiting[n]
		n++
		if t.waitingOn != g {
			continue // woken already, for another reason
		}
		t.waitingOn, t.wokenBy = nil, g
		room--
		if t.limited {
			st.unhold(t)
		}
		st.reschedule(t, now)
		woke = true
	}
	g.waiting = append(g.waiting[:0], g.waiting[n:]...)
	if g.flights == 0 && len(g.waiting) == 0 && st.groups[g.key] == g && (g.bucket == nil || g.bucket.TokensAt(time.Unix(0, now)) >= float64(g.bucket.Burst())) {
		// Nothing in it now that a new group would not have: memory
		// follows the groups with work, not every tenant ever seen.
		// NB: only if it is still the group of its name. A topic it
		// woke passes the wake on after its scan (scannedGroups), and
		// by then g may have been forgotten and its name taken by a
		// new group, with flights of its own: forgetting that one
		// would let a third start from none, over the bound.
		delete(st.groups, g.key)
	}
	return woke
}

// dropGroups clears the waits of every group, after a change of limits:
// the topics that waited for one are released with every held topic. The
// groups stay, with their flights: each takes its limit's new values at
// its next admission.
func (st *subjectTable) dropGroups() {
	for _, g := range st.groups {
		for _, t := range g.waiting {
			t.waitingOn, t.wokenBy = nil, nil
		}
		g.waiting = nil
	}
}
