package core

import "time"

// Under load, the group commit waits a moment for the hand-overs it
// expects before it commits: a caller that hands over as soon as its
// last answer came (a synchronous publisher, a router of a fleet with
// its next batch) arrives a few µs after the batch it missed was
// committed, and pays a commit of its own. The fleet's owners commit a
// router's batch and their own cell's burst apart that way, 6 to 9
// messages a commit against 12 and more on a lone node with the same
// load (performance.md, "The group commit waits for the hand-overs it
// expects").
const (
	// lingerFor bounds the wait of one batch.
	lingerFor = 200 * time.Microsecond
	// lingerUnder is the batch size from which the writer does not wait:
	// a commit's fixed cost is then small beside its messages'.
	lingerUnder = 16
	// busyWithin is how recent the last commit must be for the writer to
	// count itself under load.
	busyWithin = time.Millisecond
)

// commitPace is what the writer knows of the last commit, to decide
// whether to wait for more: when it ended and from how many hand-overs.
type commitPace struct {
	ended     time.Time
	handovers int
	timer     *time.Timer
}

// committed records a commit of handovers hand-overs that just ended.
func (p *commitPace) committed(handovers int) {
	p.ended = time.Now()
	p.handovers = handovers
}

// await waits, when the writer is under load and b holds fewer messages
// than lingerUnder from fewer hand-overs than the last commit had, up to
// lingerFor for as many hand-overs as that commit had, taking each into
// b. It returns what did not fit b and the hand-overs b now holds; the
// writer's next receive finds the hand-overs closed, if they are.
//
// NB: one caller alone (a synchronous publisher) never waits: its batch
// had one hand-over, and so has the next. Nor does a writer that has
// been idle for busyWithin: its callers are not waiting on a commit.
func (p *commitPace) await(w *writer, b *batchFill, handovers int) (handover, int) {
	if handovers >= p.handovers || len(b.reqs) >= lingerUnder || time.Since(p.ended) > busyWithin {
		return handover{}, handovers
	}
	if p.timer == nil {
		p.timer = time.NewTimer(lingerFor)
	} else {
		p.timer.Reset(lingerFor)
	}
	defer p.timer.Stop()
	for handovers < p.handovers && len(b.reqs) < lingerUnder {
		rs, ok, waited := p.next(w)
		if waited || !ok {
			return handover{}, handovers
		}
		handovers++
		if carry := b.take(rs); !carry.empty() {
			return carry, handovers
		}
	}
	return handover{}, handovers
}

// next is the next hand-over, or waited if lingerFor ran out first. One
// queued already is taken however late: taking it costs no wait, and a
// writer descheduled past the timer (a loaded machine) would otherwise
// leave it to a commit of its own.
func (p *commitPace) next(w *writer) (rs handover, ok, waited bool) {
	select {
	case rs, ok = <-w.reqs:
		return rs, ok, false
	default:
	}
	select {
	case rs, ok = <-w.reqs:
		return rs, ok, false
	case <-p.timer.C:
		return handover{}, false, true
	}
}
