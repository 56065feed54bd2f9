package bridge

import (
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/micro"
	"google.golang.org/protobuf/proto"

	"github.com/natsdelay/natsdelay/bridge/internal/core"
	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/dispatch/recur"
	"github.com/natsdelay/natsdelay/keys"
)

// scheduleEndpoints are the verbs that act on one recurring schedule.
func (s *Service) scheduleEndpoints() []apiEndpoint {
	return []apiEndpoint{
		{wire.VerbSchedulePause, s.apiSchedulePause, ""},
		{wire.VerbScheduleResume, s.apiScheduleResume, ""},
		{wire.VerbScheduleTrigger, s.apiScheduleTrigger, ""},
		{wire.VerbScheduleEdit, s.apiScheduleEdit, ""},
		{wire.VerbScheduleSkip, s.apiScheduleSkip, ""},
	}
}

func (s *Service) apiSchedulePause(req micro.Request) (any, error) {
	var ref wire.MessageRef
	if err := decodeRequest(req.Data(), &ref); err != nil {
		return nil, err
	}
	return s.PauseSchedule(ref, true)
}

func (s *Service) apiScheduleResume(req micro.Request) (any, error) {
	var ref wire.MessageRef
	if err := decodeRequest(req.Data(), &ref); err != nil {
		return nil, err
	}
	return s.PauseSchedule(ref, false)
}

// PauseSchedule is SCHEDULE.PAUSE (pause true) and SCHEDULE.RESUME: it
// pauses or resumes the recurring schedule ref names and answers it as
// GET shows it. Pausing a paused schedule, or resuming one that runs,
// changes nothing.
//
// A paused schedule's occurrence still to plan waits at the latest time
// that can be stored, so no pass reads it and the planner plans nothing
// of it; it keeps its planned time. Resumed, it is due at that time, or
// now when that passed: it then goes out as after an outage, and the
// schedule's Delay-Catch-Up decides what the pause missed.
func (s *Service) PauseSchedule(ref wire.MessageRef, pause bool) (wire.MessageInfo, error) {
	if err := s.answering(); err != nil {
		return wire.MessageInfo{}, err
	}
	if ref.Payload {
		return wire.MessageInfo{}, badRequest(`"payload" is not a field of this verb`)
	}
	c := s.core.Load()
	nowNs := c.Config().Now().UnixNano()
	k, m, err := s.rewriteSchedule(ref, func(m *delaystore.StoredMessage) error {
		r := m.Recurrence
		switch {
		case r.Paused == pause:
		case pause:
			r.Paused, m.FireAtNs = true, delaystore.MaxTimeNs
		default:
			r.Paused, m.FireAtNs = false, max(recur.FireAtNs(r, r.OccurrenceNs), nowNs)
		}
		return nil
	})
	if err != nil {
		return wire.MessageInfo{}, err
	}
	return messageInfo(k, m, false), nil
}

func (s *Service) apiScheduleSkip(req micro.Request) (any, error) {
	var r wire.ScheduleSkipRequest
	if err := decodeRequest(req.Data(), &r); err != nil {
		return nil, err
	}
	return s.SkipSchedule(r)
}

// SkipSchedule is SCHEDULE.SKIP: the next r.Count occurrences of the
// schedule r names are deleted unsent as each falls due, and counted as
// skipped. The count is kept with the schedule's occurrence still to plan,
// rewritten in one synced commit, and each occurrence skipped passes one
// less to its successor in the commit that plans it (package recur): a
// crash neither delivers a skipped occurrence nor skips one more.
// Skips add up, to at most wire.MaxSkip waiting.
func (s *Service) SkipSchedule(r wire.ScheduleSkipRequest) (wire.MessageInfo, error) {
	if err := s.answering(); err != nil {
		return wire.MessageInfo{}, err
	}
	if r.Count == 0 || r.Count > wire.MaxSkip {
		return wire.MessageInfo{}, badRequest(`"count" %d: want 1 to %d occurrences to skip`, r.Count, wire.MaxSkip)
	}
	ref := wire.MessageRef{Tag: r.Tag, Subject: r.Subject, ID: r.ID}
	k, m, err := s.rewriteSchedule(ref, func(m *delaystore.StoredMessage) error {
		rec := m.Recurrence
		if rec.Skip+r.Count > wire.MaxSkip {
			return badRequest(`"count" %d: %d occurrences wait to be skipped already, and at most %d may`, r.Count, rec.Skip, wire.MaxSkip)
		}
		rec.Skip += r.Count
		return nil
	})
	if err != nil {
		return wire.MessageInfo{}, err
	}
	return messageInfo(k, m, false), nil
}

// rewriteAttempts bounds how often rewriteSchedule looks the schedule up
// again because its occurrence went out meanwhile, rewriteRetry apart: an
// occurrence being delivered is planned within a commit, after which the
// schedule's newest occurrence is its successor.
const (
	rewriteAttempts = 100
	rewriteRetry    = 10 * time.Millisecond
)

// rewriteSchedule rewrites the occurrence still to plan of the schedule
// ref names with edit, and returns its key and the occurrence as
// rewritten.
func (s *Service) rewriteSchedule(ref wire.MessageRef, edit delaystore.RewriteFunc) (keys.Key, *delaystore.StoredMessage, error) {
	c := s.core.Load()
	for range rewriteAttempts {
		k, err := s.resolveSchedule(ref)
		if err != nil {
			return keys.Key{}, nil, err
		}
		var out *delaystore.StoredMessage
		nk, _, err := c.Rewrite(k, func(m *delaystore.StoredMessage) error {
			if err := edit(m); err != nil {
				return err
			}
			out = proto.Clone(m).(*delaystore.StoredMessage)
			return nil
		})
		if err == nil {
			return nk, out, nil
		}
		if !errors.Is(err, core.ErrScheduleMoved) {
			return keys.Key{}, nil, err
		}
		// NB: the occurrence is out for delivery, its successor being
		// planned under the planner's lock; look the schedule up again
		// once that commit is made.
		time.Sleep(rewriteRetry)
	}
	return keys.Key{}, nil, fmt.Errorf("%w: the schedule kept moving on to its next occurrence; try again", wire.ErrConflict)
}

// resolveSchedule finds the occurrence still to plan of the schedule ref
// names: by subject and name, or by the tag of any of its occurrences.
func (s *Service) resolveSchedule(ref wire.MessageRef) (keys.Key, error) {
	c := s.core.Load()
	if ref.Tag == "" {
		if ref.Subject == "" || ref.ID == "" {
			return keys.Key{}, badRequest(`give "tag", or "subject" and "id"`)
		}
		if err := checkTarget(ref.Subject, nil); err != nil {
			return keys.Key{}, err
		}
		k, err := c.LookupSchedule(ref.Subject, ref.ID)
		if err == nil {
			err = s.frozenKey(k)
		}
		return k, err
	}
	k, err := s.resolve(ref)
	if err != nil {
		return keys.Key{}, err
	}
	m, err := c.Get(k)
	if err != nil {
		return keys.Key{}, err
	}
	if m.Recurrence == nil {
		return keys.Key{}, fmt.Errorf("%w: %s is not an occurrence of a recurring schedule", wire.ErrConflict, k)
	}
	return c.LookupSchedule(m.Subject, m.Recurrence.Name)
}

func (s *Service) apiScheduleTrigger(req micro.Request) (any, error) {
	var ref wire.MessageRef
	if err := decodeRequest(req.Data(), &ref); err != nil {
		return nil, err
	}
	return s.TriggerSchedule(ref)
}

// TriggerSchedule is SCHEDULE.TRIGGER: one extra occurrence of the
// schedule ref names, due now, stored in one synced commit before the
// answer. The schedule's planned times, its count of occurrences and its
// Delay-Limit are unchanged, and a paused schedule stays paused.
//
// The extra occurrence is an ordinary delivery with the schedule's
// payload and headers, Delay-Schedule, and Delay-Occurrence of now; it
// is stored as planned and without a successor, so neither its answer nor
// a CANCEL of its tag touches the schedule, and it has no Delay-Next.
func (s *Service) TriggerSchedule(ref wire.MessageRef) (wire.TriggerReply, error) {
	if err := s.answering(); err != nil {
		return wire.TriggerReply{}, err
	}
	if ref.Payload {
		return wire.TriggerReply{}, badRequest(`"payload" is not a field of this verb`)
	}
	k, err := s.resolveSchedule(ref)
	if err != nil {
		return wire.TriggerReply{}, err
	}
	c := s.core.Load()
	m, err := c.Get(k)
	if err != nil {
		return wire.TriggerReply{}, err
	}
	now := c.Config().Now().UnixNano()
	extra := triggered(m, now)
	done := make(chan error, 1)
	var nk keys.Key
	if err := c.Schedule(extra, func(k keys.Key, err error) { nk = k; done <- err }); err != nil {
		return wire.TriggerReply{}, err
	}
	if err := <-done; err != nil {
		return wire.TriggerReply{}, err
	}
	return wire.TriggerReply{Tag: nk.Tag(), Subject: extra.Subject, Name: extra.Recurrence.Name, FireAt: formatTime(now)}, nil
}

// triggered is the extra occurrence, due at now, of the schedule whose
// occurrence still to plan is m.
func triggered(m *delaystore.StoredMessage, now int64) *delaystore.StoredMessage {
	x := proto.Clone(m).(*delaystore.StoredMessage)
	// NB: without the client id it replaces nothing and is not the
	// schedule's newest occurrence; planned and without a successor, it
	// is never planned, and a CANCEL of its tag finds no successor.
	x.ClientId, x.EventId, x.Attempt, x.MovedBy = "", 0, 0, ""
	x.EnqueuedAtNs, x.FireAtNs, x.ExpireAtNs = now, now, 0
	if x.TtlNs > 0 {
		x.ExpireAtNs = min(now, delaystore.MaxTimeNs-x.TtlNs) + x.TtlNs
	}
	r := x.Recurrence
	r.Planned, r.NextNs, r.Paused, r.Behind = true, 0, false, 0
	r.OccurrenceNs = now
	// A JetStream schedule's extra firing names no next one: without
	// Nats-Scheduler and Nats-Schedule-Next, rather than a purge that is
	// not one.
	r.JsScheduler = ""
	return x
}
