package bridge

import (
	"fmt"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/natsdelay/natsdelay/bridge/events"
	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/keys"
)

// errRecurring refuses to move an occurrence of a recurring schedule: its
// schedule plans the occurrences, from their planned times.
func errRecurring(k keys.Key) error {
	return fmt.Errorf("%w: %s is an occurrence of a recurring schedule, which its schedule times; cancel the schedule and schedule it again to change it", wire.ErrConflict, k)
}

// moveTo is the MoveFunc of a RESCHEDULE (at or shift given) at now:
// never before now, so a time that passed means due now.
func moveTo(k keys.Key, at time.Time, shift time.Duration, hasAt bool, now time.Time) delaystore.MoveFunc {
	return func(m *delaystore.StoredMessage) (int64, error) {
		if m.Recurrence != nil {
			return 0, errRecurring(k)
		}
		target := m.FireAtNs + int64(shift)
		if hasAt {
			target = at.UnixNano()
		}
		if target > maxFireAt.UnixNano() || (shift > 0 && target < m.FireAtNs) {
			return 0, badRequest("the new fire time is after %s, the latest time that can be stored", maxFireAt.Format(time.DateOnly))
		}
		return max(target, now.UnixNano()), nil
	}
}

// fireNow is the MoveFunc of a FIRE at now: due now, or as it is when it
// was due already, so it keeps its place among the messages due.
func fireNow(k keys.Key, now time.Time) delaystore.MoveFunc {
	return func(m *delaystore.StoredMessage) (int64, error) {
		if m.Recurrence != nil {
			return 0, errRecurring(k)
		}
		return min(m.FireAtNs, now.UnixNano()), nil
	}
}

func (s *Service) apiReschedule(req micro.Request) (any, error) {
	var r wire.RescheduleRequest
	if err := decodeRequest(req.Data(), &r); err != nil {
		return nil, err
	}
	return s.Reschedule(r)
}

// Reschedule is RESCHEDULE: it moves the pending message r names to its
// new fire time, At or Shift, never before now. An occurrence of a
// recurring schedule, or a message in flight, is a wire.ErrConflict.
func (s *Service) Reschedule(r wire.RescheduleRequest) (wire.RescheduleReply, error) {
	if err := s.answering(); err != nil {
		return wire.RescheduleReply{}, err
	}
	to, err := parseMoveTime(r.At, r.Shift)
	if err != nil {
		return wire.RescheduleReply{}, err
	}
	k, err := s.resolve(wire.MessageRef{Tag: r.Tag, Subject: r.Subject, ID: r.ID})
	if err != nil {
		return wire.RescheduleReply{}, err
	}
	c := s.core.Load()
	return s.move(k, to.of(k, c.Config().Now()))
}

// moveTime is the new time of a RESCHEDULE: at, or the fire time plus
// shift.
type moveTime struct {
	at    time.Time
	shift time.Duration
	hasAt bool
}

// parseMoveTime reads the "at" and "shift" of a RESCHEDULE, one of which
// must be given.
func parseMoveTime(at, shift string) (moveTime, error) {
	var t moveTime
	var err error
	switch {
	case (at == "") == (shift == ""):
		return t, badRequest(`give one of "at" (a time) and "shift" (a duration)`)
	case at != "":
		t.hasAt = true
		if t.at, err = parseTime(`"at"`, at); err != nil {
			return t, err
		}
	default:
		if t.shift, err = time.ParseDuration(shift); err != nil {
			return t, badRequest(`"shift" %q: want a Go duration such as 1h or -30m`, keys.Clip(shift))
		}
	}
	return t, nil
}

// of is the MoveFunc that moves the message under k to t at now.
func (t moveTime) of(k keys.Key, now time.Time) delaystore.MoveFunc {
	return moveTo(k, t.at, t.shift, t.hasAt, now)
}

func (s *Service) apiFire(req micro.Request) (any, error) {
	var ref wire.MessageRef
	if err := decodeRequest(req.Data(), &ref); err != nil {
		return nil, err
	}
	return s.Fire(ref)
}

// Fire is FIRE: the pending message ref names becomes due now. An
// occurrence of a recurring schedule, or a message in flight, is a
// wire.ErrConflict.
func (s *Service) Fire(ref wire.MessageRef) (wire.RescheduleReply, error) {
	if err := s.answering(); err != nil {
		return wire.RescheduleReply{}, err
	}
	if ref.Payload {
		return wire.RescheduleReply{}, badRequest(`"payload" is not a FIRE field`)
	}
	k, err := s.resolve(ref)
	if err != nil {
		return wire.RescheduleReply{}, err
	}
	return s.move(k, fireNow(k, s.core.Load().Config().Now()))
}

func (s *Service) move(k keys.Key, to delaystore.MoveFunc) (wire.RescheduleReply, error) {
	nk, m, err := s.moveOne(k, to, "")
	if err != nil {
		return wire.RescheduleReply{}, err
	}
	return wire.RescheduleReply{Tag: nk.Tag(), Subject: m.Subject, FireAt: formatTime(m.FireAtNs)}, nil
}

// moveOne moves the message under k to the fire time to chooses (for the
// bulk operation op, if any), tells it as a rescheduled event, and
// returns its new key and what events and replies show of it: subject,
// id and new fire time.
func (s *Service) moveOne(k keys.Key, to delaystore.MoveFunc, op string) (keys.Key, *delaystore.StoredMessage, error) {
	// A single move is synced before its reply; the moves of a bulk step
	// are not, and the step flushes them all before its reply (see act):
	// one fsync a step instead of one a message.
	sync := delaystore.Sync
	if op != "" {
		sync = delaystore.NoSync
	}
	var was delaystore.StoredMessage
	var traceID [16]byte
	nk, fireAtNs, err := s.core.Load().Move(k, func(m *delaystore.StoredMessage) (int64, error) {
		was.Subject, was.ClientId, was.FireAtNs, was.Attempt = m.Subject, m.ClientId, m.FireAtNs, m.Attempt
		if s.events != nil {
			traceID = m.TraceID()
		}
		return to(m)
	}, op, sync)
	if err != nil {
		return keys.Key{}, nil, err
	}
	moved := &delaystore.StoredMessage{Subject: was.Subject, ClientId: was.ClientId, FireAtNs: fireAtNs}
	if ev := s.Events(); ev != nil {
		e := events.Of(events.Rescheduled, nk, moved, was.Attempt)
		e.PreviousFireAt = time.Unix(0, was.FireAtNs)
		e.TraceID = traceID
		ev.Emit(e)
	}
	return nk, moved, nil
}
