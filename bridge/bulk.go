package bridge

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"math"
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
	bulkSampleSize   = 10
	bulkTimeout      = time.Minute
)

// bulkCursor is where a bulk operation stands: a position in the store,
// so any process (a restarted service, a new leader) can resume from it.
// It travels base64 encoded, opaque to users.
type bulkCursor struct {
	// Subject is the subject being read when the filter has wildcards.
	Subject string `json:"s,omitempty"`
	// Tag is the last key read: of the subject's messages, of the due
	// index, or of the dead letters.
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
	if err != nil {
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
	var plain []keys.Key
	for _, p := range sel {
		if p.msg.Recurrence != nil {
			if err := c.Cancel(ctx, p.key); err != nil && !errors.Is(err, wire.ErrNotFound) {
				return done, err
			} else if err == nil {
				done = append(done, p)
			}
			continue
		}
		plain = append(plain, p.key)
	}
	if _, err := c.CancelMany(ctx, plain); err != nil {
		return done, err
	}
	for _, p := range sel {
		if p.msg.Recurrence == nil && !s.pending(p.key) {
			done = append(done, p)
		}
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
	res, err := s.core.Load().Replay(pickedKeys(sel), replayTo, now.UnixNano())
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
	c := s.core.Load()
	var done []picked
	if _, err := c.DeleteDead(pickedKeys(sel)); err != nil {
		return done, err
	}
	for _, p := range sel {
		if _, err := c.GetDead(p.key); errors.Is(err, wire.ErrNotFound) {
			done = append(done, p)
		}
	}
	return done, nil
}

func pickedKeys(sel []picked) []keys.Key {
	ks := make([]keys.Key, len(sel))
	for i, p := range sel {
		ks[i] = p.key
	}
	return ks
}

// pending reports whether a message is still pending under k.
func (s *Service) pending(k keys.Key) bool {
	_, err := s.core.Load().Repository().Get(k)
	return err == nil
}

// position is where a selection stopped: the subject being read (filters
// with wildcards) and the last key read.
type position struct {
	subject string
	key     keys.Key
}

// selectMessages reads the messages the filter selects, after the
// position (subject, after), calling keep for each until it returns false
// or maxScanned entries were read, and returns the position of the last
// entry read and whether the selection is done. It reads through the
// store's indexes:
//
//   - dead letters: the dead keyspace, of one subject when it has no
//     wildcard, in key order;
//   - a subject without wildcards: that subject's messages, in key order,
//     from the fire time "from" to "to";
//   - the filter ">" (every subject): the due index, in time order, from
//     "from" to "to", and each entry's message;
//   - another filter with wildcards: the subject registry from the
//     filter's literal start, and each matching subject's messages as for
//     one subject.
func (s *Service) selectMessages(f *filter, subject string, after *keys.Key, scanned *int, keep func(keys.Key, *delaystore.StoredMessage) bool) (position, bool, error) {
	c := s.core.Load()
	bucketMs := c.Config().Repository.TimeBucket.Milliseconds()
	var last position
	stopped := false
	visit := func(k keys.Key, m *delaystore.StoredMessage, attempt uint32) bool {
		if *scanned == maxScanned {
			stopped = true
			return false
		}
		*scanned++
		last.key = k
		if !f.match(m, attempt) {
			return true
		}
		if f.state == stateInFlight && !c.InFlight(k) {
			return true
		}
		if !keep(k, m) {
			stopped = true
			return false
		}
		return true
	}
	loBucket := keys.Bucket(f.fromNs/1e6, bucketMs)
	hiBucket := uint64(math.MaxUint64)
	if f.toNs != math.MaxInt64 {
		hiBucket = keys.Bucket(keys.FireAtMs(f.toNs), bucketMs)
	}
	topicRange := func(hash uint64, after *keys.Key) (from, upper []byte) {
		from = keys.New(hash, loBucket, 0).Bytes()
		if after != nil && string(after.Successor()) > string(from) {
			from = after.Successor()
		}
		if hiBucket != math.MaxUint64 {
			upper = keys.New(hash, hiBucket+1, 0).Bytes()
		}
		return from, upper
	}

	switch {
	case f.tag != nil && after == nil:
		// One message: read it, and the selection is done.
		if f.state == stateDead {
			dl, err := c.GetDead(*f.tag)
			if err == nil && dl.GetMessage() != nil {
				visit(*f.tag, dl.GetMessage(), dl.Attempts)
			} else if err != nil && !errors.Is(err, wire.ErrNotFound) {
				return last, false, err
			}
			return last, true, nil
		}
		m, err := c.Get(*f.tag)
		if err == nil {
			visit(*f.tag, m, m.Attempt)
		} else if !errors.Is(err, wire.ErrNotFound) {
			return last, false, err
		}
		return last, true, nil
	case f.tag != nil:
		return last, true, nil

	case f.state == stateDead:
		err := c.ScanDead(keys.TopicHash(f.subject), f.literal, after, func(k keys.Key, dl *delaystore.DeadLetter) bool {
			m := dl.GetMessage()
			if m == nil {
				m = &delaystore.StoredMessage{}
			}
			return visit(k, m, dl.Attempts)
		})
		return last, !stopped, err

	case f.literal:
		from, upper := topicRange(keys.TopicHash(f.subject), after)
		err := c.ScanTopic(keys.TopicHash(f.subject), from, upper, func(k keys.Key, m *delaystore.StoredMessage) bool {
			return visit(k, m, m.Attempt)
		})
		return last, !stopped, err

	case f.subject == ">":
		start := after
		if start == nil && loBucket > 0 {
			k := keys.New(math.MaxUint64, loBucket-1, math.MaxUint64)
			start = &k
		}
		var readErr error
		err := c.ScanDue(start, hiBucket, func(k keys.Key) bool {
			m, err := c.Get(k)
			if errors.Is(err, wire.ErrNotFound) {
				return true // settled since the index was read
			}
			if err != nil {
				readErr = err
				return false
			}
			return visit(k, m, m.Attempt)
		})
		if err == nil {
			err = readErr
		}
		return last, !stopped, err
	}

	prefix := literalPrefix(f.subject)
	from := prefix
	if subject != "" {
		from = subject
	}
	var inner error
	err := c.ScanTopics(from, func(t delaystore.Topic) bool {
		if !strings.HasPrefix(t.Subject, prefix) {
			return false
		}
		if !f.matchSubject(t.Subject) {
			return true
		}
		subj := t.Subject
		var start *keys.Key
		if subj == subject {
			start = after
		}
		last.subject = subj
		lo, upper := topicRange(t.Hash, start)
		inner = c.ScanTopic(t.Hash, lo, upper, func(k keys.Key, m *delaystore.StoredMessage) bool {
			if m.Subject != subj {
				return true // another subject with the same hash
			}
			return visit(k, m, m.Attempt)
		})
		if inner != nil || stopped {
			return false
		}
		// NB: the cursor of a subject read to its end is its last
		// possible key, so a resume starts at the next subject.
		last.key = keys.New(t.Hash, math.MaxUint64, math.MaxUint64)
		return true
	})
	if err == nil {
		err = inner
	}
	return last, !stopped, err
}
