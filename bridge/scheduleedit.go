package bridge

import (
	"cmp"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/dispatch/recur"
)

func (s *Service) apiScheduleEdit(req micro.Request) (any, error) {
	var r wire.ScheduleEditRequest
	if err := decodeRequest(req.Data(), &r); err != nil {
		return nil, err
	}
	return s.EditSchedule(r)
}

// EditSchedule is SCHEDULE.EDIT: it changes the schedule r names in
// place, in one synced commit (see delaystore.Repository.Rewrite), and
// answers it as GET shows it. Its name, Delay-Id, occurrence count,
// skipped count and pause stay.
//
// With the spec unchanged the next occurrence keeps its planned time. A
// new spec plans the next occurrence as the first time of the new spec
// after now plus the dispatcher's look-ahead: an occurrence of the old
// spec planned ahead of its time (at most that far ahead) may still go
// out, and the new one never comes before it, never at the same time, and
// never before now. An interval counts from that instant.
//
// What r gives is checked as ingest checks its headers, and a bad value
// is a 400 that changes nothing.
func (s *Service) EditSchedule(r wire.ScheduleEditRequest) (wire.MessageInfo, error) {
	if err := s.answering(); err != nil {
		return wire.MessageInfo{}, err
	}
	c := s.core.Load()
	now := c.Config().Now()
	from := now.Add(c.Config().Delivery.PlanAhead)
	lim := s.lim
	lim.serverMaxPayload = int(s.nc.MaxPayload())
	ref := wire.MessageRef{Tag: r.Tag, Subject: r.Subject, ID: r.ID}
	k, m, err := s.rewriteSchedule(ref, func(m *delaystore.StoredMessage) error {
		return editOccurrence(m, r, from, lim)
	})
	if err != nil {
		return wire.MessageInfo{}, err
	}
	return messageInfo(k, m, false), nil
}

// editOccurrence changes m, a schedule's occurrence still to plan, as r
// says; a new spec plans from from on.
func editOccurrence(m *delaystore.StoredMessage, r wire.ScheduleEditRequest, from time.Time, lim scheduleLimits) error {
	old := m.Recurrence
	h, specChanged := editHeaders(old, r)
	var ctl controls
	readControls(h, &ctl)
	nr, err := parseRecurrence(&ctl, from, time.Unix(0, old.OccurrenceNs), !specChanged)
	if err != nil {
		return err
	}
	if nr.Limit != 0 && nr.Limit < old.Seq {
		return badRequest("%s %d: the schedule's next occurrence is number %d: want at least %d, or 0 for no limit", wire.HeaderLimit, nr.Limit, old.Seq, old.Seq)
	}
	if r.Payload != nil {
		m.Payload = r.Payload
	}
	if r.Headers != nil {
		if m.Headers, err = passedHeaders(nats.Header(r.Headers)); err != nil {
			return err
		}
	}
	nr.Id, nr.Name, nr.Seq, nr.Skipped, nr.Paused, nr.Prev = old.Id, old.Name, old.Seq, old.Skipped, old.Paused, old.Prev
	nr.Skip, nr.JitterSeed = old.Skip, old.JitterSeed
	nr.JsScheduler, nr.JsStream = old.JsScheduler, old.JsStream
	if !specChanged {
		nr.JsSchedule = old.JsSchedule
	}
	if nr.JitterNs != 0 && nr.JitterSeed == 0 {
		// A jitter added by an edit: the schedule's name tells it
		// from the others on its subject.
		nr.JitterSeed = recur.Seed(m.Subject, old.Name, 0)
	}
	m.Recurrence = nr
	if !nr.Paused {
		m.FireAtNs = recur.FireAtNs(nr, nr.OccurrenceNs)
	}
	if lim.maxPayload > 0 && len(m.Payload) > lim.maxPayload {
		return badRequest("payload is %d bytes: the limit is %d", len(m.Payload), lim.maxPayload)
	}
	return checkDeliverable(m, lim)
}

// editHeaders are the recurrence headers of old with r's changes, as
// ingest would read them, and whether the spec changed.
func editHeaders(old *delaystore.Recurrence, r wire.ScheduleEditRequest) (nats.Header, bool) {
	h := nats.Header{}
	specChanged := r.Every != "" || r.Cron != "" || (r.Zone != "" && r.Zone != old.Zone)
	switch {
	case r.Every != "" || r.Cron != "":
		if r.Every != "" {
			h.Set(wire.HeaderEvery, r.Every)
		}
		if r.Cron != "" {
			h.Set(wire.HeaderCron, r.Cron)
		}
		if r.Zone != "" {
			h.Set(wire.HeaderTZ, r.Zone)
		}
	case old.Cron != "":
		h.Set(wire.HeaderCron, old.Cron)
		if zone := cmp.Or(r.Zone, old.Zone); zone != "" {
			h.Set(wire.HeaderTZ, zone)
		}
	default:
		h.Set(wire.HeaderEvery, time.Duration(old.EveryNs).String())
		if r.Zone != "" {
			h.Set(wire.HeaderTZ, r.Zone) // refused: a zone with an interval
		}
	}
	switch {
	case r.Until == "none":
	case r.Until != "":
		h.Set(wire.HeaderUntil, r.Until)
	case old.UntilNs != 0:
		h.Set(wire.HeaderUntil, time.Unix(0, old.UntilNs).UTC().Format(time.RFC3339Nano))
	}
	switch {
	case r.Limit != nil && *r.Limit != 0:
		h.Set(wire.HeaderLimit, strconv.FormatUint(*r.Limit, 10))
	case r.Limit == nil && old.Limit != 0:
		h.Set(wire.HeaderLimit, strconv.FormatUint(old.Limit, 10))
	}
	h.Set(wire.HeaderCatchUp, cmp.Or(r.CatchUp, catchUpName(old.CatchUp)))
	h.Set(wire.HeaderOverlap, cmp.Or(r.Overlap, overlapName(old.Overlap)))
	if v := cmp.Or(r.Exclude, old.Exclude); v != "" && v != "none" {
		h.Set(wire.HeaderExclude, v)
	}
	switch {
	case r.Jitter == "none":
	case r.Jitter != "":
		h.Set(wire.HeaderJitter, r.Jitter)
	case old.JitterNs != 0:
		h.Set(wire.HeaderJitter, time.Duration(old.JitterNs).String())
	}
	return h, specChanged
}

// overlapName is the Delay-Overlap value of o: allow, skip or buffer-one.
func overlapName(o delaystore.Overlap) string {
	return strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(o.String(), "OVERLAP_")), "_", "-")
}

// catchUpName is the Delay-Catch-Up value of c: one, all or none.
func catchUpName(c delaystore.CatchUp) string {
	return strings.ToLower(strings.TrimPrefix(c.String(), "CATCH_UP_"))
}
