package delaystore

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/natsdelay/natsdelay/keys"
)

// Flow control set by users, per subject pattern, is kept in the store
// with the messages, so that it survives a restart and a cluster
// replicates it with everything else:
//
//	metadata/event-repo/limit/<pattern> -> JSON of Limit, without the pattern
const limitPrefix = "metadata/event-repo/limit/"

var _ [len(limitPrefix) - keys.Len - 1]struct{} // see repokeys.go

// Limit is the flow control of the subjects a pattern matches (a NATS
// subject filter: orders.>, tenant.*.mail, or one subject). Each matching
// subject has it on its own: MaxInFlight 100 lets each of them have 100
// deliveries in flight. A zero field sets nothing: MaxInFlight 0 leaves
// the default share, Rate 0 no rate.
type Limit struct {
	Pattern string `json:"-"`
	// MaxInFlight bounds each matching subject's deliveries not yet
	// settled.
	MaxInFlight int `json:"max_in_flight,omitempty"`
	// Rate bounds each matching subject's deliveries per second (a token
	// bucket), with Burst tokens at most.
	Rate  float64 `json:"rate,omitempty"`
	Burst int     `json:"burst,omitempty"`
	// Paused holds back every delivery of the matching subjects; they
	// keep accepting messages.
	Paused bool `json:"paused,omitempty"`
	// Whole makes MaxInFlight and Rate bound the matching subjects
	// together, as one group, instead of each of them.
	Whole bool `json:"whole,omitempty"`
	// KeyHeader makes MaxInFlight and Rate bound each value of that
	// header (a tenant), over all the matching subjects, instead of each
	// subject. Messages without the header are not bound by it.
	KeyHeader string `json:"key_header,omitempty"`
}

// Grouped reports whether l bounds a group of messages (Whole,
// KeyHeader) rather than each subject.
func (l Limit) Grouped() bool { return l.Whole || l.KeyHeader != "" }

// SetLimit stores l under its pattern, replacing what was there, in a
// synced commit.
func (r *Repository) SetLimit(l Limit) error {
	if l.Pattern == "" || strings.IndexByte(l.Pattern, 0) >= 0 {
		return fmt.Errorf("%w: limit pattern %q", ErrInvalidMessage, l.Pattern)
	}
	v, err := json.Marshal(l)
	if err != nil {
		return fmt.Errorf("delaystore: encode limit %q: %w", l.Pattern, err)
	}
	return r.writeLimit(l.Pattern, func(b Batch, k []byte) error { return b.Set(k, v) })
}

// DeleteLimit removes the limit of pattern, in a synced commit. It
// reports whether there was one.
func (r *Repository) DeleteLimit(pattern string) (bool, error) {
	_, err := r.s.Get([]byte(limitPrefix + pattern))
	switch {
	case errors.Is(err, ErrNotFound):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("delaystore: read limit %q: %w", pattern, err)
	}
	return true, r.writeLimit(pattern, func(b Batch, k []byte) error { return b.Delete(k) })
}

func (r *Repository) writeLimit(pattern string, op func(Batch, []byte) error) error {
	r.wmu.Lock()
	defer r.wmu.Unlock()
	if r.closed.Load() {
		return ErrClosed
	}
	b := r.s.NewBatch()
	defer b.Close()
	if err := op(b, []byte(limitPrefix+pattern)); err != nil {
		return fmt.Errorf("delaystore: write limit %q: %w", pattern, err)
	}
	if err := b.Commit(Sync); err != nil {
		return fmt.Errorf("delaystore: write limit %q: %w", pattern, err)
	}
	return nil
}

// Limits returns every stored limit, in pattern order.
func (r *Repository) Limits() ([]Limit, error) {
	var out []Limit
	var bad error
	err := r.s.Scan(IterOptions{LowerBound: []byte(limitPrefix), UpperBound: prefixEnd(limitPrefix)}, func(k, v []byte) bool {
		l := Limit{Pattern: string(k[len(limitPrefix):])}
		if err := json.Unmarshal(v, &l); err != nil {
			bad = fmt.Errorf("delaystore: decode limit %q: %w", l.Pattern, err)
			return false
		}
		out = append(out, l)
		return true
	})
	if err == nil {
		err = bad
	}
	if err != nil {
		return nil, fmt.Errorf("delaystore: read limits: %w", err)
	}
	return out, nil
}
