package delaystore

import (
	"errors"
	"fmt"
	"slices"

	"github.com/natsdelay/natsdelay/keys"
)

// Debouncing (Delay-Debounce): a message with DebounceFirstNs set is one
// publish of a burst. Its caller sets its fire time to the publish time
// plus the debounce, and DebounceFirstNs to the publish time; when it
// replaces a pending message of the same (subject, client id) that is
// itself debounced, the burst goes on: the message keeps that one's
// DebounceFirstNs, and its fire time is cut to DebounceFirstNs +
// DebounceMaxNs when that is earlier, so a steady stream of publishes
// cannot hold the message back for longer than the maximum. The pending
// message is read here, under wmu and before the keys are made from the
// fire times, and replaced in the same batch as every other client id
// replacement, so a crash leaves the burst as it was before the publish or
// after it.

// resolveDebounce carries the burst of each debounced message of msgs
// over from the message it replaces, an earlier one of msgs or a pending
// one, and sets its fire time. Messages without DebounceFirstNs cost one
// look at that field. wmu must be held.
func (r *Repository) resolveDebounce(msgs []*StoredMessage) error {
	if !slices.ContainsFunc(msgs, func(m *StoredMessage) bool { return m.DebounceFirstNs != 0 }) {
		return nil
	}
	latest := make(map[string]*StoredMessage) // client id index key -> the last of msgs with it
	for i, m := range msgs {
		if m.ClientId == "" {
			continue
		}
		ck := string(appendClientIDKey(r.w.key[:0], m.Subject, m.ClientId))
		if m.DebounceFirstNs != 0 {
			prev, ok := latest[ck]
			if !ok {
				var err error
				if prev, err = r.pendingOf([]byte(ck)); err != nil {
					return fmt.Errorf("delaystore: schedule message %d of %d: debounce client id %q of %q: %w", i+1, len(msgs), keys.Clip(m.ClientId), keys.Clip(m.Subject), err)
				}
			}
			continueBurst(m, prev)
		}
		latest[ck] = m
	}
	return nil
}

// continueBurst makes m, a debounced message, the next publish of prev's
// burst when prev (the message it replaces, or nil) is debounced.
func continueBurst(m, prev *StoredMessage) {
	if prev != nil && prev.DebounceFirstNs != 0 {
		m.DebounceFirstNs = prev.DebounceFirstNs
	}
	if m.DebounceMaxNs == 0 {
		return
	}
	deadline := m.DebounceFirstNs + m.DebounceMaxNs
	if m.FireAtNs <= deadline {
		return
	}
	// Past the deadline the message is due at once: a fire time is never
	// before the publish that set it.
	m.FireAtNs = max(deadline, m.EnqueuedAtNs)
	if m.TtlNs != 0 {
		m.ExpireAtNs = m.FireAtNs + m.TtlNs
	}
}

// pendingOf returns the pending message indexed under the client id key
// ck, or nil when there is none. wmu must be held.
func (r *Repository) pendingOf(ck []byte) (*StoredMessage, error) {
	v, err := r.s.Get(ck)
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read index: %w", err)
	}
	k, err := keys.Decode(v)
	if err != nil {
		return nil, fmt.Errorf("index entry: %w: %w", ErrCorrupt, err)
	}
	m, err := r.get(k)
	if errors.Is(err, ErrNotFound) {
		// replacePending warns of it and replaces nothing; neither does
		// the burst go on.
		return nil, nil
	}
	return m, err
}
