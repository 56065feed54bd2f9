package bridge

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/nats-io/nats.go/micro"

	"natsdelay/bridge/events"
	"natsdelay/bridge/wire"
	"natsdelay/delaystore"
	"natsdelay/keys"
)

const (
	defaultBulkLimit = 1000
	maxBulkLimit     = 10_000
	bulkTimeout      = time.Minute
)

// bulkSampleSize bounds the sample of a step's reply. A variable so that a
// test can see every message a step selected.
var bulkSampleSize = 10

// bulkCursor is where a bulk operation stands: a position in the store,
// so any process (a restarted service, a new leader) can resume from it.
// It travels base64 encoded, opaque to users.
type bulkCursor struct {
	// Subject is the subject being read when the step read subjects'
	// messages (a filter on subjects); empty for the due index and the
	// dead letters.
	Subject string `json:"s,omitempty"`
	// Tag is the last key read: of the subject's messages (always a key
	// of Subject when Subject is set), of the due index, or of the dead
	// letters. A step resumes at the entry after it.
	Tag string `json:"k,omitempty"`
	// Op names a RESCHEDULE or FIRE, stored in each message it moves, so
	// that a later step that meets a moved message again skips it.
	Op string `json:"op,omitempty"`
}

func (c bulkCursor) encode() string {
	b, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeCursor(s string) (bulkCursor, *keys.Key, error) {
	var c bulkCursor
	bad := func() error {
		return badRequest(`"cursor" %q: want the "cursor" of the previous step's reply`, keys.Clip(s))
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return c, nil, bad()
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if dec.Decode(&c) != nil || c.Tag == "" {
		return c, nil, bad()
	}
	k, err := keys.ParseTag(c.Tag)
	if err != nil || (c.Subject != "" && k.TopicHash() != keys.TopicHash(c.Subject)) {
		return c, nil, bad()
	}
	return c, &k, nil
}

// bulkVerb is one BULK verb: whether it works on dead letters, and what a
// step does to the keys it selected (act), or nil for a dry run.
type bulkVerb struct {
	dead bool
}

var bulkVerbs = map[string]bulkVerb{
	"CANCEL": {}, "RESCHEDULE": {}, "FIRE": {},
	"REPLAY": {dead: true}, "DELETE": {dead: true},
}

// picked is one message a step selected.
type picked struct {
	key keys.Key
	msg *delaystore.StoredMessage
}

// apiBulk runs one step of BULK.<verb>: it selects up to limit messages
// matching the filter after the cursor, reading at most maxScanned
// entries, acts on them unless it is a dry run, and answers the count, a
// sample and the cursor to go on from.
func (s *Service) apiBulk(verb string) func(micro.Request) (any, error) {
	return func(req micro.Request) (any, error) {
		var r wire.BulkRequest
		if err := decodeRequest(req.Data(), &r); err != nil {
			return nil, err
		}
		return s.Bulk(verb, r)
	}
}

// Bulk is one step of BULK.<verb>, verb one of wire.BulkVerbs: see
// apiBulk.
func (s *Service) Bulk(verb string, r wire.BulkRequest) (wire.BulkReply, error) {
	out := wire.BulkReply{Verb: verb, DryRun: r.DryRun, Sample: []wire.BulkSample{}}
	if err := s.answering(); err != nil {
		return out, err
	}
	v, ok := bulkVerbs[verb]
	if !ok {
		return out, badRequest("%q is not a bulk verb: want one of %s", keys.Clip(verb), strings.Join(wire.BulkVerbs, ", "))
	}
	f, err := compileFilter(r.Filter)
	if err != nil {
		return out, err
	}
	switch {
	case v.dead && r.State != "" && f.state != stateDead:
		return out, badRequest(`"state" %q: %s works on dead letters; leave it out or give "dead"`, r.State, verb)
	case !v.dead && f.state == stateDead:
		return out, badRequest(`"state" "dead": %s works on pending messages; REPLAY and DELETE work on dead letters`, verb)
	case verb != "RESCHEDULE" && (r.At != "" || r.Shift != ""):
		return out, badRequest(`"at" and "shift" are RESCHEDULE fields`)
	case verb != "REPLAY" && r.ReplayTo != "":
		return out, badRequest(`"replay_to" is a REPLAY field`)
	}
	if v.dead {
		f.state = stateDead
	}
	limit := defaultBulkLimit
	if r.Limit != nil {
		if *r.Limit < 1 || *r.Limit > maxBulkLimit {
			return out, badRequest(`"limit" %d: want 1 to %d`, *r.Limit, maxBulkLimit)
		}
		limit = *r.Limit
	}
	var at time.Time
	var shift time.Duration
	if verb == "RESCHEDULE" {
		switch {
		case (r.At == "") == (r.Shift == ""):
			return out, badRequest(`give one of "at" (a time) and "shift" (a duration)`)
		case r.At != "":
			if at, err = parseTime(`"at"`, r.At); err != nil {
				return out, err
			}
		default:
			if shift, err = time.ParseDuration(r.Shift); err != nil {
				return out, badRequest(`"shift" %q: want a Go duration such as 1h or -30m`, keys.Clip(r.Shift))
			}
		}
	}
	if r.ReplayTo != "" {
		if err := checkTarget(r.ReplayTo, s.lim.reserved); err != nil {
			return out, err
		}
	}
	var cur bulkCursor
	var after *keys.Key
	if r.Cursor != "" {
		if cur, after, err = decodeCursor(r.Cursor); err != nil {
			return out, err
		}
		if cur.Subject != "" && !f.matchSubject(cur.Subject) {
			return out, badRequest(`"cursor" is not one of this filter's`)
		}
	}
	moving := verb == "RESCHEDULE" || verb == "FIRE"
	if moving && !r.DryRun && cur.Op == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		cur.Op = hex.EncodeToString(b[:])
	}

	c := s.core.Load()
	now := c.Config().Now()
	var sel []picked
	keep := func(k keys.Key, m *delaystore.StoredMessage) bool {
		if moving && cur.Op != "" && m.MovedBy == cur.Op {
			return true // moved by an earlier step of this operation
		}
		if moving && (m.Recurrence != nil || c.InFlight(k)) {
			out.Skipped++
			return true
		}
		sel = append(sel, picked{k, m})
		return len(sel) < limit
	}
	next, done, err := s.selectMessages(f, cur.Subject, after, &out.Scanned, keep)
	if err != nil {
		return out, err
	}
	if !done {
		cur.Subject, cur.Tag = next.subject, next.key.Tag()
		out.Cursor = cur.encode()
	}
	if !r.DryRun {
		if sel, err = s.act(verb, sel, now, at, shift, r.At != "", r.ReplayTo, cur.Op, &out); err != nil {
			return out, err
		}
	}
	out.Count = len(sel)
	for _, p := range sel[:min(len(sel), bulkSampleSize)] {
		out.Sample = append(out.Sample, wire.BulkSample{Tag: p.key.Tag(), Subject: p.msg.Subject, FireAt: formatTime(p.msg.FireAtNs)})
	}
	return out, nil
}

// act does verb to the selected messages and returns those it changed.
// Its writes are durable when it returns: a step's reply, and the cursor
// in it, never runs ahead of what the store keeps.
func (s *Service) act(verb string, sel []picked, now, at time.Time, shift time.Duration, hasAt bool, replayTo, op string, out *wire.BulkReply) ([]picked, error) {
	c := s.core.Load()
	ctx, cancel := context.WithTimeout(context.Background(), bulkTimeout)
	defer cancel()
	ks := make([]keys.Key, len(sel))
	for i, p := range sel {
		ks[i] = p.key
	}
	var done []picked
	switch verb {
	case "CANCEL":
		// NB: canceling an occurrence ends its schedule, which the
		// single CANCEL does; the others are canceled together.
		var plain []picked
		for _, p := range sel {
			if p.msg.Recurrence != nil {
				if err := c.Cancel(ctx, p.key); err != nil && !errors.Is(err, wire.ErrNotFound) {
					return done, err
				} else if err == nil {
					done = append(done, p)
				}
				continue
			}
			plain = append(plain, p)
		}
		if _, err := c.CancelMany(ctx, keysOf(plain)); err != nil {
			return done, err
		}
		gone, err := s.goneOf(plain, false)
		if done = append(done, gone...); err != nil {
			return done, err
		}
		if err := c.Flush(); err != nil {
			return done, err
		}
	case "RESCHEDULE", "FIRE":
		for _, p := range sel {
			to := fireNow(p.key, now)
			if verb == "RESCHEDULE" {
				to = moveTo(p.key, at, shift, hasAt, now)
			}
			nk, moved, err := s.moveOne(p.key, to, op)
			switch {
			case errors.Is(err, wire.ErrConflict):
				out.Skipped++
				continue
			case errors.Is(err, wire.ErrNotFound):
				continue
			case err != nil:
				return done, err
			}
			done = append(done, picked{nk, moved})
		}
		if err := c.Flush(); err != nil {
			return done, err
		}
	case "REPLAY":
		res, err := c.Replay(ks, replayTo, now.UnixNano())
		if err != nil {
			return done, err
		}
		for _, r := range res {
			switch {
			case r.Done:
				done = append(done, picked{r.Scheduled.Key, r.Msg})
				if ev := s.Events(); ev != nil {
					e := events.Of(events.Replayed, r.Scheduled.Key, r.Msg, r.Dead.Attempts)
					e.To = replayTo
					ev.Emit(e)
				}
			case r.Held:
				out.Skipped++
			}
		}
	case "DELETE":
		if _, err := c.DeleteDead(ks); err != nil {
			return done, err
		}
		gone, err := s.goneOf(sel, true)
		if done = append(done, gone...); err != nil {
			return done, err
		}
	}
	return done, nil
}

// goneOf returns those of sel under whose keys no pending message (or
// dead letter, when dead) is left. Only a read that finds none says so: a
// read that fails says nothing, and is the error, with those found gone
// before it.
func (s *Service) goneOf(sel []picked, dead bool) ([]picked, error) {
	c := s.core.Load()
	var gone []picked
	for _, p := range sel {
		var err error
		if dead {
			_, err = c.GetDead(p.key)
		} else {
			_, err = c.Get(p.key)
		}
		switch {
		case errors.Is(err, wire.ErrNotFound):
			gone = append(gone, p)
		case err != nil:
			return gone, err
		}
	}
	return gone, nil
}

// keysOf returns the keys of sel.
func keysOf(sel []picked) []keys.Key {
	ks := make([]keys.Key, len(sel))
	for i, p := range sel {
		ks[i] = p.key
	}
	return ks
}
