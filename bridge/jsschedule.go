package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/dispatch/recur"
	"github.com/natsdelay/natsdelay/keys"
)

// JetStream's message schedules (docs/protocol.md, "JetStream's schedule
// headers"). A publish on <JSSchedulePrefix>.<schedule subject> with
// Nats-Schedule is read as nats-server reads it from a stream's publisher,
// checked by the same rules with the same error codes, and taken in as
// one of the service's own recurring schedules: its Delay-Id is the
// schedule subject, so publishing again replaces it, and the first
// occurrence, the planning ahead, the catch-up (one: fire once, skip
// ahead), the store and the crash safety are those of section 6. Nothing
// here runs for a publish on the ingest prefix.

// jsCodeError is a refusal that nats-server gives with an err_code of its
// own; it is a 400.
type jsCodeError struct {
	errCode int
	desc    string
}

func (e *jsCodeError) Error() string { return wire.ErrBadRequest.Error() + ": " + e.desc }

func (e *jsCodeError) Is(target error) bool { return target == wire.ErrBadRequest }

// jsServerWords are nats-server's descriptions of the codes: an answer
// starts with them, as the server's does, and says more after a colon.
var jsServerWords = map[int]string{
	wire.JSErrSchedulePatternInvalid:   "message schedules pattern is invalid",
	wire.JSErrScheduleTargetInvalid:    "message schedules target is invalid",
	wire.JSErrScheduleTTLInvalid:       "message schedules invalid per-message TTL",
	wire.JSErrScheduleRollupInvalid:    "message schedules invalid rollup",
	wire.JSErrScheduleSourceInvalid:    "message schedules source is invalid",
	wire.JSErrScheduleSchedulerInvalid: "message schedules invalid scheduler",
	wire.JSErrScheduleTimeZoneInvalid:  "message schedules time zone is invalid",
}

func jsRefuse(code int, format string, args ...any) error {
	return &jsCodeError{errCode: code, desc: jsServerWords[code] + ": " + fmt.Sprintf(format, args...)}
}

// jsAnswer is the JSON of the PubAck for res, or of the API error for
// err when it is not nil.
func jsAnswer(res delaystore.Outcome, err error) []byte {
	a := wire.JSPubAck{Stream: wire.JSStreamName}
	switch {
	case err != nil:
		a.Error = jsAPIError(err)
	default:
		a.Seq, a.Duplicate = res.Key.EventID(), res.Duplicate
	}
	body, _ := json.Marshal(a)
	return body
}

func jsAPIError(err error) *wire.JSAPIError {
	var ce *jsCodeError
	if errors.As(err, &ce) {
		return &wire.JSAPIError{Code: 400, ErrCode: ce.errCode, Description: ce.desc}
	}
	se := wire.NewServiceError(err)
	return &wire.JSAPIError{Code: se.Code, Description: se.Description}
}

// jsCatchUp is the catch-up of nats-server's schedules: a schedule whose
// times passed while nothing fired fires once, then skips ahead.
const jsCatchUp = "one"

// jsAtEvery is the interval of the one-occurrence schedule an @at is
// taken in as: any will do, as Delay-Limit 1 ends it at its first.
const jsAtEvery = "24h"

// jsRequest is a publish on the schedule prefix, read.
type jsRequest struct {
	// subject is the schedule subject, the schedule's name.
	subject string
	// remove says the publish removes the schedule of removeName rather
	// than schedule one: it has no Nats-Schedule.
	remove     bool
	removeName string
	// pattern is Nats-Schedule as given; target is Nats-Schedule-Target.
	pattern, target string
	// h is the publish as the service's own ingest reads it: the schedule
	// in Delay- headers, and the headers each firing carries.
	h nats.Header
}

// jsHeader is the single value of the header name, matched exactly as
// nats-server matches it, and whether it was there.
func jsHeader(h nats.Header, name string) (string, bool) {
	vs, ok := h[name]
	if !ok || len(vs) == 0 {
		return "", false
	}
	return vs[0], true
}

// jsTakenOver are the Delay- headers the schedule's translation sets:
// a publish on the schedule prefix may not give them.
var jsTakenOver = []string{wire.HeaderDelay, wire.HeaderAt, wire.HeaderID, wire.HeaderEvery, wire.HeaderCron, wire.HeaderTZ,
	wire.HeaderLimit, wire.HeaderCatchUp, wire.HeaderDebounce, wire.HeaderDebounceMax}

// parseJSRequest reads a publish on the schedule prefix to the schedule
// subject subj, with the checks of nats-server in its order, each refusal
// with its err_code.
func parseJSRequest(subj string, h nats.Header, reserved []string) (*jsRequest, error) {
	if err := checkTarget(subj, reserved); err != nil {
		return nil, fmt.Errorf("schedule subject: %w", err)
	}
	tz, hasTZ := jsHeader(h, wire.HeaderJSScheduleTimeZone)
	var loc *time.Location
	if hasTZ {
		l, err := time.LoadLocation(tz)
		if tz == "" || err != nil || strings.EqualFold(tz, "local") {
			return nil, jsRefuse(wire.JSErrScheduleTimeZoneInvalid, "%s %q: want an IANA zone name such as Europe/Berlin or UTC", wire.HeaderJSScheduleTimeZone, keys.Clip(tz))
		}
		loc = l
	}
	pattern, _ := jsHeader(h, wire.HeaderJSSchedule)
	if pattern == "" {
		return parseJSRemove(subj, h)
	}
	r := &jsRequest{subject: subj, pattern: pattern, h: nats.Header{}}
	if err := jsTranslatePattern(r.h, pattern, tz, loc); err != nil {
		return nil, err
	}
	if err := jsCheckFiring(r, subj, h, reserved); err != nil {
		return nil, err
	}
	if len(subj) > maxClientIDLen {
		return nil, badRequest("schedule subject is %d bytes: the limit is %d, as it names the schedule (its %s)", len(subj), maxClientIDLen, wire.HeaderID)
	}
	r.h.Set(wire.HeaderID, subj)
	r.h.Set(wire.HeaderCatchUp, jsCatchUp)
	return r, jsPassHeaders(r.h, h)
}

// parseJSRemove reads a publish without Nats-Schedule: it removes the
// schedule of its subject, or, with Nats-Schedule-Next purge, the one its
// Nats-Scheduler names, as nats-server's stream purges it.
func parseJSRemove(subj string, h nats.Header) (*jsRequest, error) {
	next, hasNext := jsHeader(h, wire.HeaderJSScheduleNext)
	scheduler, hasScheduler := jsHeader(h, wire.HeaderJSScheduler)
	switch {
	case hasNext && next != wire.JSScheduleNextPurge:
		return nil, jsRefuse(wire.JSErrScheduleSchedulerInvalid, "%s %q from a publisher: want %s, with %s", wire.HeaderJSScheduleNext, keys.Clip(next), wire.JSScheduleNextPurge, wire.HeaderJSScheduler)
	case hasNext && (scheduler == "" || scheduler == subj || checkTarget(scheduler, nil) != nil):
		return nil, jsRefuse(wire.JSErrScheduleSchedulerInvalid, "%s %q: want the subject of the schedule to purge, not this one", wire.HeaderJSScheduler, keys.Clip(scheduler))
	case hasNext:
		return &jsRequest{subject: subj, remove: true, removeName: scheduler}, nil
	case hasScheduler:
		return nil, jsRefuse(wire.JSErrScheduleSchedulerInvalid, "%s from a publisher: only with %s %s", wire.HeaderJSScheduler, wire.HeaderJSScheduleNext, wire.JSScheduleNextPurge)
	}
	return &jsRequest{subject: subj, remove: true, removeName: subj}, nil
}

// jsCronShortcuts are nats-server's predefined cron schedules.
var jsCronShortcuts = map[string]string{
	"@yearly": "0 0 0 1 1 *", "@annually": "0 0 0 1 1 *", "@monthly": "0 0 0 1 * *",
	"@weekly": "0 0 0 * * 0", "@daily": "0 0 0 * * *", "@midnight": "0 0 0 * * *", "@hourly": "0 0 * * * *",
}

// jsTranslatePattern sets in h the Delay- headers of pattern, a
// Nats-Schedule, in the zone tz (loc): an @at is a schedule of one
// occurrence at its time, an @every an interval of at least a second, and
// anything else a cron spec of 6 fields, seconds first, or a shortcut.
func jsTranslatePattern(h nats.Header, pattern, tz string, loc *time.Location) error {
	const form = "want @at <RFC 3339 time>, @every <duration of 1s or more>, 6 cron fields with seconds first, or @yearly @annually @monthly @weekly @daily @midnight @hourly"
	switch {
	case strings.HasPrefix(pattern, "@at "):
		t, err := time.Parse(time.RFC3339, pattern[len("@at "):])
		switch {
		case loc != nil:
			return jsRefuse(wire.JSErrSchedulePatternInvalid, "%s %q: a time zone applies to a cron spec only", wire.HeaderJSSchedule, keys.Clip(pattern))
		case err != nil:
			return jsRefuse(wire.JSErrSchedulePatternInvalid, "%s %q: %s", wire.HeaderJSSchedule, keys.Clip(pattern), form)
		case t.Before(time.Unix(0, 0)) || !t.Before(maxFireAt):
			return jsRefuse(wire.JSErrSchedulePatternInvalid, "%s %q: want a time from 1970 to before %s", wire.HeaderJSSchedule, keys.Clip(pattern), maxFireAt.Format(time.DateOnly))
		}
		h.Set(wire.HeaderAt, t.UTC().Format(time.RFC3339Nano))
		h.Set(wire.HeaderEvery, jsAtEvery)
		h.Set(wire.HeaderLimit, "1")
		return nil
	case strings.HasPrefix(pattern, "@every "):
		d, err := time.ParseDuration(pattern[len("@every "):])
		switch {
		case loc != nil:
			return jsRefuse(wire.JSErrSchedulePatternInvalid, "%s %q: a time zone applies to a cron spec only", wire.HeaderJSSchedule, keys.Clip(pattern))
		case err != nil || d < time.Second:
			return jsRefuse(wire.JSErrSchedulePatternInvalid, "%s %q: %s", wire.HeaderJSSchedule, keys.Clip(pattern), form)
		}
		h.Set(wire.HeaderEvery, d.String())
		return nil
	}
	spec := pattern
	if s, ok := jsCronShortcuts[pattern]; ok {
		spec = s
	}
	if len(strings.Fields(spec)) != 6 {
		return jsRefuse(wire.JSErrSchedulePatternInvalid, "%s %q: %s", wire.HeaderJSSchedule, keys.Clip(pattern), form)
	}
	if _, err := recur.ParseCron(spec, tz); errors.Is(err, recur.ErrNeverFires) {
		return jsRefuse(wire.JSErrSchedulePatternInvalid, "%s %q: matches no date, so it would never fire", wire.HeaderJSSchedule, keys.Clip(pattern))
	} else if err != nil {
		return jsRefuse(wire.JSErrSchedulePatternInvalid, "%s %q: %s", wire.HeaderJSSchedule, keys.Clip(pattern), form)
	}
	h.Set(wire.HeaderCron, spec)
	if tz != "" {
		h.Set(wire.HeaderTZ, tz)
	}
	return nil
}

// jsCheckFiring checks what each firing of the schedule carries and
// where it goes: its TTL, rollup, target and source, as nats-server
// does, and sets what it carries in r.h.
func jsCheckFiring(r *jsRequest, subj string, h nats.Header, reserved []string) error {
	if ttl, _ := jsHeader(h, wire.HeaderJSScheduleTTL); ttl != "" {
		if !jsValidTTL(ttl) {
			return jsRefuse(wire.JSErrScheduleTTLInvalid, "%s %q: want never, a Go duration of 1s or more, or whole seconds", wire.HeaderJSScheduleTTL, keys.Clip(ttl))
		}
		r.h.Set(jsHeaderTTL, ttl)
	}
	if rollup, _ := jsHeader(h, wire.HeaderJSScheduleRollup); rollup != "" {
		if rollup != jsRollupSub {
			return jsRefuse(wire.JSErrScheduleRollupInvalid, "%s %q: want %s", wire.HeaderJSScheduleRollup, keys.Clip(rollup), jsRollupSub)
		}
		r.h.Set(jsHeaderRollup, rollup)
	}
	r.target, _ = jsHeader(h, wire.HeaderJSScheduleTarget)
	if r.target == "" {
		return jsRefuse(wire.JSErrScheduleTargetInvalid, "no %s: want the subject each firing is published to", wire.HeaderJSScheduleTarget)
	}
	if err := checkTarget(r.target, reserved); err != nil {
		return jsRefuse(wire.JSErrScheduleTargetInvalid, "%s: %s", wire.HeaderJSScheduleTarget, strings.TrimPrefix(err.Error(), wire.ErrBadRequest.Error()+": "))
	}
	if src, ok := jsHeader(h, wire.HeaderJSScheduleSource); ok && src != "" {
		if src == r.target || src == subj || checkTarget(src, nil) != nil {
			return jsRefuse(wire.JSErrScheduleSourceInvalid, "%s %q: want a subject other than the target and the schedule's", wire.HeaderJSScheduleSource, keys.Clip(src))
		}
		return jsRefuse(wire.JSErrScheduleSourceInvalid, "%s %q: natsdelay keeps no stream to read a subject's last message from: put the payload in the schedule", wire.HeaderJSScheduleSource, keys.Clip(src))
	}
	if rollup, ok := jsHeader(h, jsHeaderRollup); ok && rollup != jsRollupSub {
		return jsRefuse(wire.JSErrScheduleRollupInvalid, "%s %q on a schedule: want %s or none", jsHeaderRollup, keys.Clip(rollup), jsRollupSub)
	}
	_, hasNext := h[wire.HeaderJSScheduleNext]
	if _, hasScheduler := h[wire.HeaderJSScheduler]; hasNext || hasScheduler {
		return jsRefuse(wire.JSErrScheduleSchedulerInvalid, "%s and %s are set on firings, not by a schedule's publisher", wire.HeaderJSScheduler, wire.HeaderJSScheduleNext)
	}
	return nil
}

// Headers of JetStream that a firing carries, as nats-server sets them.
const (
	jsHeaderTTL    = "Nats-TTL"
	jsHeaderRollup = "Nats-Rollup"
	jsRollupSub    = "sub"
)

// jsValidTTL reports whether ttl is a TTL nats-server takes: never, a Go
// duration of at least a second, or whole seconds.
func jsValidTTL(ttl string) bool {
	if strings.EqualFold(ttl, "never") {
		return true
	}
	if d, err := time.ParseDuration(ttl); err == nil {
		return d >= time.Second
	}
	return isDigits(ttl)
}

// jsPassHeaders copies into dst the headers of the publish h that each
// firing carries: all but those of scheduling, as nats-server strips
// them (Nats-Schedule*, Nats-Scheduler, Nats-Expected-*, Nats-Msg-Id,
// Nats-TTL, Nats-Rollup). The service's own Delay- headers are kept
// (Delay-Max-Deliver gives a schedule dead letters), but not those the
// schedule sets.
func jsPassHeaders(dst, h nats.Header) error {
	for k, vs := range h {
		switch {
		case strings.HasPrefix(k, "Nats-Schedule"), strings.HasPrefix(k, "Nats-Expected-"),
			k == headerMsgID, k == jsHeaderTTL, k == jsHeaderRollup:
			continue
		case isControl(k):
			for _, t := range jsTakenOver {
				if strings.EqualFold(k, t) {
					return badRequest("header %s on a JetStream schedule: %s sets the schedule", k, wire.HeaderJSSchedule)
				}
			}
		}
		dst[k] = append(dst[k], vs...)
	}
	return nil
}

// handleJSSchedule takes a publish on the schedule prefix and answers it
// as a stream does: a PubAck once stored, or a JetStream API error.
func (s *Service) handleJSSchedule(req micro.Request) {
	if err := s.answering(); err != nil {
		s.m.ingest.WithLabelValues("unavailable").Inc()
		_ = req.Respond(jsAnswer(delaystore.Outcome{}, err))
		return
	}
	subj := strings.TrimPrefix(req.Subject(), s.cfg.JSSchedulePrefix+".")
	h := nats.Header(req.Headers())
	r, err := parseJSRequest(subj, h, s.lim.reserved)
	if err == nil && r.remove {
		err = s.removeJSSchedule(r.removeName, "")
		if err == nil {
			s.m.ingest.WithLabelValues("ok").Inc()
			_ = req.Respond(jsAnswer(delaystore.Outcome{}, nil))
			return
		}
	}
	var once delaystore.Once
	if err == nil {
		once, err = s.jsOnce(r, h, req.Data())
	}
	if err == nil {
		// A schedule moved to another target: the old one goes first.
		err = s.removeJSSchedule(r.subject, r.target)
	}
	if err != nil {
		s.m.ingest.WithLabelValues("invalid").Inc()
		s.refuseIngest(req, err, true)
		return
	}
	s.commitIngest(req, once, nil, true)
}

// jsOnce is the message to store for the schedule r, with the payload
// data and the Nats-Msg-Id of h for the duplicate window.
func (s *Service) jsOnce(r *jsRequest, h nats.Header, data []byte) (delaystore.Once, error) {
	lim := s.lim
	lim.serverMaxPayload = int(s.nc.MaxPayload())
	stream := s.streamCaptures(r.target)
	if !stream {
		// Measured as delivered: Nats-Scheduler and Nats-Schedule-Next
		// at its widest.
		r.h.Set(wire.HeaderJSScheduler, r.subject)
		r.h.Set(wire.HeaderJSScheduleNext, jsNextWidest)
	}
	msg, err := parseSchedule(r.target, r.h, data, s.cfg.Now(), lim)
	if err != nil {
		return delaystore.Once{}, err
	}
	msg.Headers = dropJSFiringHeaders(msg.Headers)
	rec := msg.Recurrence
	rec.JsSchedule, rec.JsScheduler, rec.JsStream = r.pattern, r.subject, stream
	once := delaystore.Once{Msg: msg}
	if s.cfg.DedupWindow >= 0 {
		if id, ok := jsHeader(h, headerMsgID); ok && id != "" {
			if err := checkMsgID(id); err != nil {
				return once, err
			}
			once.MsgID = id
		}
	}
	return once, nil
}

// jsNextWidest is the widest Nats-Schedule-Next: RFC 3339 with
// nanoseconds and a zone offset.
const jsNextWidest = "2006-01-02T15:04:05.999999999-07:00"

// dropJSFiringHeaders drops the Nats-Scheduler and Nats-Schedule-Next that
// jsOnce set for measuring: the publisher sets them on each firing.
func dropJSFiringHeaders(hs []*delaystore.Header) []*delaystore.Header {
	out := hs[:0]
	for _, kv := range hs {
		if kv.Name != wire.HeaderJSScheduler && kv.Name != wire.HeaderJSScheduleNext {
			out = append(out, kv)
		}
	}
	return out
}

// jsStreamLookup bounds the wait for JetStream's answer to which stream
// captures a target.
const jsStreamLookup = 2 * time.Second

// streamCaptures reports whether a JetStream stream of the service's
// account captures subject: its firings then leave out the headers a
// stream refuses from a client. No JetStream, or no answer, is no.
func (s *Service) streamCaptures(subject string) bool {
	body, _ := json.Marshal(map[string]string{"subject": subject})
	m, err := s.nc.Request("$JS.API.STREAM.NAMES", body, jsStreamLookup)
	if err != nil {
		return false
	}
	var names struct {
		Streams []string `json:"streams"`
	}
	return json.Unmarshal(m.Data, &names) == nil && len(names.Streams) > 0
}

// jsRemoveTimeout bounds the cancels of a removal.
const jsRemoveTimeout = 10 * time.Second

// removeJSSchedule cancels every schedule taken in on the schedule prefix
// under the schedule subject name, but the one whose target is keep (the
// new schedule replaces that one by its Delay-Id, in its own commit). It
// reads the whole schedule index: a schedule's name is in it under its
// target, which a removal does not give.
func (s *Service) removeJSSchedule(name, keep string) error {
	c := s.core.Load()
	var found []keys.Key
	var afterSubject, afterName string
	for {
		refs, err := c.ScheduleRefs("", afterSubject, afterName, 1000)
		if err != nil {
			return err
		}
		for _, ref := range refs {
			if ref.Name != name || ref.Subject == keep {
				continue
			}
			m, err := c.Get(ref.Key)
			if err == nil && m.GetRecurrence().GetJsScheduler() == name {
				found = append(found, ref.Key)
			}
		}
		if len(refs) < 1000 {
			break
		}
		afterSubject, afterName = refs[len(refs)-1].Subject, refs[len(refs)-1].Name
	}
	ctx, cancel := context.WithTimeout(context.Background(), jsRemoveTimeout)
	defer cancel()
	for _, k := range found {
		if err := c.Cancel(ctx, k); err != nil && !errors.Is(err, wire.ErrNotFound) {
			return err
		}
	}
	return nil
}
