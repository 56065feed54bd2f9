package bridge

import (
	"sync/atomic"
	"time"
)

// LatenessBounds are the upper bounds of the buckets Totals counts fire
// lateness in: 1 ms to about 65 s, doubling; a last bucket holds the rest.
var LatenessBounds = func() []time.Duration {
	b := make([]time.Duration, latenessBounds)
	for i := range b {
		b[i] = time.Millisecond << i
	}
	return b
}()

const latenessBounds = 17

// Totals are the service's running totals since New: what a sampler of
// rates reads twice and subtracts. Each field is read atomically; together
// they are not a consistent snapshot.
type Totals struct {
	// Ingested counts messages durably stored by ingest.
	Ingested uint64
	// Delivered counts deliveries that reached a subscriber, first ones
	// and redeliveries; Acked the ACKs that settled a pending message.
	Delivered, Acked uint64
	// Late counts the deliveries that reached a subscriber by their fire
	// lateness, one count per bucket of LatenessBounds and one over the
	// last bound. Those held back by a limit or a pause are not in it:
	// their lateness is the limit's doing.
	Late []uint64
}

// totals are the counters behind Totals that the Stats of the dispatcher
// do not keep.
type totals struct {
	ingested atomic.Uint64
	folded   atomic.Uint64 // throttled publishes folded into a planned delivery
	late     [latenessBounds + 1]atomic.Uint64
}

func (t *totals) delivered(lateness time.Duration) {
	i := 0
	for i < len(LatenessBounds) && lateness > LatenessBounds[i] {
		i++
	}
	t.late[i].Add(1)
}

// Totals returns the running totals since New.
func (s *Service) Totals() Totals {
	st := s.Stats()
	t := Totals{
		Ingested:  s.m.totals.ingested.Load(),
		Delivered: st.Delivered + st.Redelivered,
		Acked:     st.Acked,
		Late:      make([]uint64, len(s.m.totals.late)),
	}
	for i := range s.m.totals.late {
		t.Late[i] = s.m.totals.late[i].Load()
	}
	return t
}
