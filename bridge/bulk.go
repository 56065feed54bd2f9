package bridge

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/natsdelay/natsdelay/bridge/events"
	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/keys"
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
	st, err := s.bulkStepOf(verb, r)
	if err != nil {
		return out, err
	}
	out.Op = st.cur.Op
	c := s.core.Load()
	now := c.Config().Now()
	var sel []picked
	keep := func(k keys.Key, m *delaystore.StoredMessage) bool {
		if st.moving && st.cur.Op != "" && m.MovedBy == st.cur.Op {
			out.Already++ // moved by an earlier step, or try, of this operation
			return true
		}
		if st.moving && (m.Recurrence != nil || c.InFlight(k)) {
			out.Skipped++
			return true
		}
		sel = append(sel, picked{k, m})
		return len(sel) < st.limit
	}
	next, done, err := s.selectMessages(st.f, st.cur.Subject, st.after, &out.Scanned, keep)
	if err != nil {
		return out, err
	}
	if !done {
		st.cur.Subject, st.cur.Tag = next.subject, next.key.Tag()
		out.Cursor = st.cur.encode()
	}
	if !r.DryRun {
		if sel, err = s.act(st, sel, now, &out); err != nil {
			return out, err
		}
	}
	out.Count = len(sel)
	for _, p := range sel[:min(len(sel), bulkSampleSize)] {
		out.Sample = append(out.Sample, wire.BulkSample{Tag: p.key.Tag(), Subject: p.msg.Subject, FireAt: formatTime(p.msg.FireAtNs)})
	}
	return out, nil
}

// bulkStep is one step of a bulk operation, as its request asks once
// checked.
type bulkStep struct {
	verb   string
	f      *filter
	limit  int
	moving bool // RESCHEDULE or FIRE: it moves messages to new keys
	// to is the new time of RESCHEDULE.
	to       moveTime
	replayTo string
	// cur is where the step starts (after, the key in it, nil at the
	// start) and, in cur.Op, the operation it belongs to.
	cur   bulkCursor
	after *keys.Key
}

// bulkStepOf checks the request of a step of BULK.<verb> and returns the
// step it asks for, or a bad request that says what is wrong.
func (s *Service) bulkStepOf(verb string, r wire.BulkRequest) (bulkStep, error) {
	st := bulkStep{verb: verb, limit: defaultBulkLimit, replayTo: r.ReplayTo, moving: verb == "RESCHEDULE" || verb == "FIRE"}
	v, ok := bulkVerbs[verb]
	if !ok {
		return st, badRequest("%q is not a bulk verb: want one of %s", keys.Clip(verb), strings.Join(wire.BulkVerbs, ", "))
	}
	var err error
	if st.f, err = compileFilter(r.Filter); err != nil {
		return st, err
	}
	if err := checkBulkFields(verb, v, st.f, r); err != nil {
		return st, err
	}
	if v.dead {
		st.f.state = stateDead
	}
	if r.Limit != nil {
		if *r.Limit < 1 || *r.Limit > maxBulkLimit {
			return st, badRequest(`"limit" %d: want 1 to %d`, *r.Limit, maxBulkLimit)
		}
		st.limit = *r.Limit
	}
	if verb == "RESCHEDULE" {
		if st.to, err = parseMoveTime(r.At, r.Shift); err != nil {
			return st, err
		}
	}
	if r.ReplayTo != "" {
		if err := checkTarget(r.ReplayTo, s.lim.reserved); err != nil {
			return st, err
		}
	}
	if r.Cursor != "" {
		if st.cur, st.after, err = decodeCursor(r.Cursor); err != nil {
			return st, err
		}
		if st.cur.Subject != "" && !st.f.matchSubject(st.cur.Subject) {
			return st, badRequest(`"cursor" is not one of this filter's`)
		}
	}
	st.cur.Op, err = bulkOp(r, st.cur.Op, st.moving)
	return st, err
}

// checkBulkFields refuses the fields of a bulk request that verb does not
// take.
func checkBulkFields(verb string, v bulkVerb, f *filter, r wire.BulkRequest) error {
	switch {
	case v.dead && r.State != "" && f.state != stateDead:
		return badRequest(`"state" %q: %s works on dead letters; leave it out or give "dead"`, r.State, verb)
	case !v.dead && f.state == stateDead:
		return badRequest(`"state" "dead": %s works on pending messages; REPLAY and DELETE work on dead letters`, verb)
	case verb != "RESCHEDULE" && (r.At != "" || r.Shift != ""):
		return badRequest(`"at" and "shift" are RESCHEDULE fields`)
	case verb != "REPLAY" && r.ReplayTo != "":
		return badRequest(`"replay_to" is a REPLAY field`)
	}
	return nil
}

// bulkOp is the operation of a step: the request's op, which must be
// the one its cursor names if that names one (cursorOp); else cursorOp;
// else, for a real step of RESCHEDULE or FIRE, a new one, which the reply
// tells. A client that chooses its op before the first step can send any
// step again, the first too, without moving a message twice.
func bulkOp(r wire.BulkRequest, cursorOp string, moving bool) (string, error) {
	switch {
	case r.Op != "":
		if err := wire.CheckBulkOp(r.Op); err != nil {
			return "", badRequest(`"op" %q: %v`, keys.Clip(r.Op), err)
		}
		if cursorOp != "" && cursorOp != r.Op {
			return "", badRequest(`"op" %q: the "cursor" is of operation %q; resume an operation with its own op`, r.Op, cursorOp)
		}
		return r.Op, nil
	case cursorOp != "" || !moving || r.DryRun:
		return cursorOp, nil
	}
	return wire.NewBulkOp(), nil
}

// act does the step's verb to the selected messages and returns those it
// changed. Its writes are durable when it returns: a step's reply, and
// the cursor in it, never runs ahead of what the store keeps.
func (s *Service) act(st bulkStep, sel []picked, now time.Time, out *wire.BulkReply) ([]picked, error) {
	switch st.verb {
	case "CANCEL":
		return s.cancelPicked(sel)
	case "RESCHEDULE", "FIRE":
		return s.movePicked(st, sel, now, out)
	case "REPLAY":
		return s.replayPicked(sel, st.replayTo, now, out)
	case "DELETE":
		return s.deletePicked(sel)
	}
	return nil, nil
}

// cancelPicked cancels the selected messages.
func (s *Service) cancelPicked(sel []picked) ([]picked, error) {
	c := s.core.Load()
	ctx, cancel := context.WithTimeout(context.Background(), bulkTimeout)
	defer cancel()
	var done []picked
	// NB: canceling an occurrence ends its schedule, which the single
	// CANCEL does; the others are canceled together.
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
	return done, c.Flush()
}

// movePicked moves the selected messages for the step's operation:
// RESCHEDULE to the step's time, FIRE to now. Its moves are committed
// without sync and flushed once at the end, also when one fails: their
// messages go out only once flushed (see dispatch.Dispatcher.Move).
func (s *Service) movePicked(st bulkStep, sel []picked, now time.Time, out *wire.BulkReply) (done []picked, err error) {
	c := s.core.Load()
	defer func() { err = errors.Join(err, c.Flush()) }()
	for _, p := range sel {
		to := fireNow(p.key, now)
		if st.verb == "RESCHEDULE" {
			to = st.to.of(p.key, now)
		}
		nk, moved, err := s.moveOne(p.key, to, st.cur.Op)
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
	return done, nil
}

// replayPicked replays the selected dead letters, to replayTo if set.
func (s *Service) replayPicked(sel []picked, replayTo string, now time.Time, out *wire.BulkReply) ([]picked, error) {
	var done []picked
	res, err := s.core.Load().Replay(keysOf(sel), replayTo, now.UnixNano())
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
	return done, nil
}

// deletePicked deletes the selected dead letters.
func (s *Service) deletePicked(sel []picked) ([]picked, error) {
	if _, err := s.core.Load().DeleteDead(keysOf(sel)); err != nil {
		return nil, err
	}
	return s.goneOf(sel, true)
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
