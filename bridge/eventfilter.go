package bridge

import (
	"fmt"
	"slices"
	"strings"

	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/keys"
)

// ErrEventsOff is returned by EventSubject when the service publishes no
// lifecycle events (Config.Events is off). It wraps wire.ErrUnavailable:
// the service cannot answer it until it runs with events on.
var ErrEventsOff = fmt.Errorf("%w: lifecycle events are off: start serve with --events (events: true in the config file, or NATSDELAY_EVENTS=true)", wire.ErrUnavailable)

// EventSubject is the subject to subscribe to for the lifecycle events of
// kind (one of wire.EventKinds; "" for every kind) about messages whose
// subject matches filter (a NATS subject filter, as SUBJECTS takes; ""
// for every subject): <EventPrefix>.<kind or *>.<filter or >>. A bad
// filter or kind is a 400; ErrEventsOff when events are off. It answers
// on every node of a cluster: the leader publishes, and every node's
// NATS connection hears it.
func (s *Service) EventSubject(filter, kind string) (string, error) {
	if !s.cfg.Events {
		return "", ErrEventsOff
	}
	if filter == "" {
		filter = ">"
	} else if err := checkFilter(filter); err != nil {
		return "", err
	}
	switch {
	case kind == "":
		kind = "*"
	case !slices.Contains(wire.EventKinds(), kind):
		return "", badRequest(`event kind %q: want one of %s, or none for every kind`, keys.Clip(kind), strings.Join(wire.EventKinds(), ", "))
	}
	return s.cfg.EventPrefix + "." + kind + "." + filter, nil
}
