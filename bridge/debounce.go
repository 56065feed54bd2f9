package bridge

import (
	"slices"
	"time"

	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/keys"
)

// The places of the debounce headers in controlHeaders.
var (
	debounceIndex    = slices.Index(controlHeaders[:], wire.HeaderDebounce)
	debounceMaxIndex = slices.Index(controlHeaders[:], wire.HeaderDebounceMax)
)

// parseDebounce reads Delay-Debounce and Delay-Debounce-Max into msg, if
// it is debounced: its fire time is then now plus the debounce, and the
// repository carries the burst over from the pending message it replaces
// (see delaystore's Repository.resolveDebounce). given says whether
// Delay or Delay-At was.
func parseDebounce(ctl *controls, msg *delaystore.StoredMessage, now time.Time, given bool) error {
	if ctl.count[debounceIndex] == 0 && ctl.count[debounceMaxIndex] == 0 {
		return nil // most messages: no search of controlHeaders by name
	}
	v, ok, err := ctl.value(wire.HeaderDebounce)
	if err != nil {
		return err
	}
	maxV, hasMax, err := ctl.value(wire.HeaderDebounceMax)
	if err != nil {
		return err
	}
	switch {
	case !ok && hasMax:
		return badRequest("%s without %s: want it only on a debounced message", wire.HeaderDebounceMax, wire.HeaderDebounce)
	case !ok:
		return nil
	case msg.ClientId == "":
		return badRequest("%s without %s: the id names what is debounced", wire.HeaderDebounce, wire.HeaderID)
	case given:
		return badRequest("%s with %s or %s: the debounce sets the fire time, want neither", wire.HeaderDebounce, wire.HeaderDelay, wire.HeaderAt)
	case msg.Recurrence != nil:
		return badRequest("%s on a recurring schedule: want one or the other", wire.HeaderDebounce)
	}
	d, err := positiveDuration(wire.HeaderDebounce, v, maxFireAt.Sub(now))
	if err != nil {
		return err
	}
	msg.FireAtNs = now.Add(d).UnixNano()
	msg.DebounceFirstNs = now.UnixNano()
	if hasMax {
		m, err := positiveDuration(wire.HeaderDebounceMax, maxV, maxFireAt.Sub(now))
		if err != nil {
			return err
		}
		if m < d {
			return badRequest("%s %q is shorter than %s %q: want at least the debounce", wire.HeaderDebounceMax, keys.Clip(maxV), wire.HeaderDebounce, keys.Clip(v))
		}
		msg.DebounceMaxNs = int64(m)
	}
	if msg.TtlNs == 0 {
		return nil
	}
	if time.Duration(msg.TtlNs) > maxFireAt.Sub(time.Unix(0, msg.FireAtNs)) {
		return badRequest("%s: the expiry would be after %s, the latest that can be stored", wire.HeaderTTL, maxFireAt.Format(time.DateOnly))
	}
	msg.ExpireAtNs = msg.FireAtNs + msg.TtlNs
	return nil
}

// positiveDuration parses the duration v of the header name: more than
// zero and at most limit.
func positiveDuration(name, v string, limit time.Duration) (time.Duration, error) {
	d, err := parseDuration(name, v)
	if err != nil {
		return 0, err
	}
	if d == 0 {
		return 0, badRequest("%s %q: want a positive duration", name, keys.Clip(v))
	}
	if d > limit {
		return 0, badRequest("%s %q: the fire time would be after %s, the latest that can be stored", name, keys.Clip(v), maxFireAt.Format(time.DateOnly))
	}
	return d, nil
}

// The place of Delay-Throttle in controlHeaders.
var throttleIndex = slices.Index(controlHeaders[:], wire.HeaderThrottle)

// parseThrottle reads Delay-Throttle into msg, if it is throttled: it is
// then due now, and the repository holds it back to the end of the window
// of the last delivery of its (subject, id), or folds it into the one
// held (see delaystore's throttle.go). given says whether Delay or
// Delay-At was.
func parseThrottle(ctl *controls, msg *delaystore.StoredMessage, now time.Time, given bool) error {
	if ctl.count[throttleIndex] == 0 {
		return nil // most messages: no search of controlHeaders by name
	}
	v, _, err := ctl.value(wire.HeaderThrottle)
	if err != nil {
		return err
	}
	switch {
	case msg.ClientId == "":
		return badRequest("%s without %s: the id names what is throttled", wire.HeaderThrottle, wire.HeaderID)
	case given:
		return badRequest("%s with %s or %s: the throttle sets the fire time, want neither", wire.HeaderThrottle, wire.HeaderDelay, wire.HeaderAt)
	case msg.Recurrence != nil:
		return badRequest("%s on a recurring schedule: want one or the other", wire.HeaderThrottle)
	case msg.DebounceFirstNs != 0:
		return badRequest("%s with %s: want one or the other", wire.HeaderThrottle, wire.HeaderDebounce)
	}
	d, err := positiveDuration(wire.HeaderThrottle, v, maxFireAt.Sub(now))
	if err != nil {
		return err
	}
	if msg.TtlNs != 0 && time.Duration(msg.TtlNs) > maxFireAt.Sub(now.Add(d)) {
		// The window may hold the message back that long.
		return badRequest("%s: the expiry would be after %s, the latest that can be stored", wire.HeaderTTL, maxFireAt.Format(time.DateOnly))
	}
	msg.ThrottleNs = int64(d)
	return nil
}
