package recur

import (
	"encoding/binary"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/natsdelay/natsdelay/delaystore"
)

// MaxJitterSample is how many planned times ingest reads to find the
// shortest gap between two occurrences, which a Delay-Jitter must be
// under (see MinGap).
const MaxJitterSample = 100

// offset is the jitter of the occurrence planned at t: in [0, jitter),
// drawn from seed and t alone, so the same planned time of the same
// schedule gets the same offset however often it is planned (after a
// crash, a replan, an edit that keeps the jitter).
func offset(seed uint64, jitter time.Duration, t time.Time) time.Duration {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], seed)
	binary.BigEndian.PutUint64(b[8:], uint64(t.UnixNano()))
	return time.Duration(xxhash.Sum64(b[:]) % uint64(jitter))
}

// FireAt is when the occurrence planned at t goes out: t, or with a
// jitter t plus its offset, never after delaystore.MaxTime.
func (p Plan) FireAt(t time.Time) time.Time {
	// NB: small enough to inline: without a jitter, one comparison.
	if p.Extra == nil || p.Jitter == 0 {
		return t
	}
	return jittered(p.Seed, p.Jitter, t)
}

// jittered is t plus its offset, at most delaystore.MaxTime.
func jittered(seed uint64, jitter time.Duration, t time.Time) time.Time {
	at := t.Add(offset(seed, jitter, t))
	if at.After(delaystore.MaxTime) {
		return delaystore.MaxTime
	}
	return at
}

// FireAtNs is FireAt for the schedule r, on Unix nanoseconds, with no
// plan to rebuild: for ingest, an edit and a resume.
func FireAtNs(r *delaystore.Recurrence, t int64) int64 {
	if r.GetJitterNs() == 0 {
		return t
	}
	return jittered(r.JitterSeed, time.Duration(r.JitterNs), time.Unix(0, t)).UnixNano()
}

// Seed is a jitter seed for a schedule taken in on subject, with id (its
// Delay-Id, if any), at nowNs: schedules on one subject taken in at
// different times draw different offsets.
func Seed(subject, id string, nowNs int64) uint64 {
	d := xxhash.New()
	_, _ = d.WriteString(subject)
	_, _ = d.Write([]byte{0})
	_, _ = d.WriteString(id)
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(nowNs))
	_, _ = d.Write(b[:])
	return d.Sum64()
}

// MinGap is the shortest time between two of the first MaxJitterSample
// planned times of the spec after first, ignoring exclusions (which only
// lengthen gaps); zero when there are fewer than two. A jitter as long
// would let an occurrence go out after its successor's time. NB: a first
// occurrence given off the cron spec's times (Delay, Delay-At) is not
// counted: its gap to the spec's first time is no property of the spec.
func (p Plan) MinGap(first time.Time) time.Duration {
	if p.Cron == "" {
		return p.Every
	}
	var gap time.Duration
	t := p.Spec.After(first, first)
	for range MaxJitterSample {
		if t.IsZero() {
			break
		}
		n := p.Spec.After(first, t)
		if n.IsZero() {
			break
		}
		if d := n.Sub(t); gap == 0 || d < gap {
			gap = d
		}
		t = n
	}
	return gap
}
