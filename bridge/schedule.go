package bridge

import (
	"errors"
	"math"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/dispatch/recur"
	"github.com/natsdelay/natsdelay/keys"
)

// maxFireAt is the latest fire or expiry time that can be stored: times are
// kept as int64 Unix nanoseconds, which end in 2262.
var maxFireAt = delaystore.MaxTime

const maxClientIDLen = 256

// scheduleLimits are the parts of the configuration that ingest checks.
type scheduleLimits struct {
	maxPayload int
	// serverMaxPayload is the server's max_payload, which a delivery or
	// dead letter with every header must fit; 0 does not check.
	serverMaxPayload int
	// maxControlLine is the server's max_control_line, which the protocol
	// line of a delivery must fit; 0 does not check.
	maxControlLine int
	// ackPrefix is the prefix of the reply subject of deliveries.
	ackPrefix string
	// deadLetter is the dead-letter subject, if any.
	deadLetter string
	// reserved are subject prefixes the service answers on itself; a target
	// inside them would loop back into the service.
	reserved []string
}

// controlValue returns the single value of the control header name, matched
// without regard to case, and whether it was present. Every control header
// is read through here: nats.Header.Get is case-sensitive.
func controlValue(h nats.Header, name string) (string, bool, error) {
	var vals []string
	for k, vs := range h {
		if strings.EqualFold(k, name) {
			vals = append(vals, vs...)
		}
	}
	switch len(vals) {
	case 0:
		return "", false, nil
	case 1:
		return strings.TrimSpace(vals[0]), true, nil
	default:
		return "", true, badRequest("%s given %d times: want at most one", name, len(vals))
	}
}

func isControl(name string) bool { return controlIndex(name) >= 0 }

// controlIndex is the index in controlHeaders of name, matched without
// regard to case, or -1.
func controlIndex(name string) int {
	// NB: every control header starts with the reserved word; most
	// publisher headers do not, and are told apart at once.
	if len(name) < len(wire.HeaderDelay) || !strings.EqualFold(name[:len(wire.HeaderDelay)], wire.HeaderDelay) {
		return -1
	}
	for i, c := range controlHeaders {
		if strings.EqualFold(name, c) {
			return i
		}
	}
	return -1
}

// controls are the control headers of one message, read in one pass over
// its header: reading each by a pass of its own was a large
// share of ingest's cost.
type controls struct {
	first [numControl]string // the first value of each
	count [numControl]int    // how many values each has, over every case of its name
	// given has bit i set when count[i] > 0.
	given uint32
}

const numControl = 18

func readControls(h nats.Header, c *controls) {
	for k, vs := range h {
		i := controlIndex(k)
		if i < 0 {
			continue
		}
		for _, v := range vs {
			if c.count[i] == 0 {
				c.first[i] = v
				c.given |= 1 << i
			}
			c.count[i]++
		}
	}
}

// value is controlValue of the control header name, which must be one of
// controlHeaders. It looks among the headers given only: ingest asks for
// every control header, and a message gives one or two, so searching
// controlHeaders for each name was most of the cost.
func (c *controls) value(name string) (string, bool, error) {
	for g := c.given; g != 0; g &= g - 1 {
		i := bits.TrailingZeros32(g)
		if controlHeaders[i] != name {
			continue
		}
		if c.count[i] > 1 {
			return "", true, badRequest("%s given %d times: want at most one", name, c.count[i])
		}
		return strings.TrimSpace(c.first[i]), true, nil
	}
	return "", false, nil
}

// parseSchedule turns an ingest message into the message to store, or an
// error wrapping wire.ErrBadRequest that says what arrived and what is accepted.
// It does not keep h; data becomes the stored payload.
func parseSchedule(target string, h nats.Header, data []byte, now time.Time, lim scheduleLimits) (*delaystore.StoredMessage, error) {
	if err := checkTarget(target, lim.reserved); err != nil {
		return nil, err
	}
	if lim.maxPayload > 0 && len(data) > lim.maxPayload {
		return nil, badRequest("payload is %d bytes: the limit is %d", len(data), lim.maxPayload)
	}
	var ctl controls
	readControls(h, &ctl)
	fireAt, given, err := parseFireAt(&ctl, now)
	if err != nil {
		return nil, err
	}
	msg := &delaystore.StoredMessage{
		Subject:      target,
		Payload:      data,
		EnqueuedAtNs: now.UnixNano(),
		FireAtNs:     fireAt.UnixNano(),
	}
	if err := parseTTL(&ctl, msg, fireAt); err != nil {
		return nil, err
	}
	if err := parseDelivery(&ctl, msg); err != nil {
		return nil, err
	}
	if err := parseRecurring(&ctl, msg, now, fireAt, given); err != nil {
		return nil, err
	}
	if err := parseDebounce(&ctl, msg, now, given); err != nil {
		return nil, err
	}
	if err := parseThrottle(&ctl, msg, now, given); err != nil {
		return nil, err
	}
	if msg.Headers, err = passedHeaders(h); err != nil {
		return nil, err
	}
	if err := checkDeliverable(msg, lim); err != nil {
		return nil, err
	}
	return msg, nil
}

// parseFireAt reads Delay or Delay-At: the fire time, now if neither was
// given (or Delay-At is past), and whether one was.
func parseFireAt(ctl *controls, now time.Time) (time.Time, bool, error) {
	delay, hasDelay, err := ctl.value(wire.HeaderDelay)
	if err != nil {
		return time.Time{}, false, err
	}
	at, hasAt, err := ctl.value(wire.HeaderAt)
	if err != nil {
		return time.Time{}, false, err
	}
	switch {
	case hasDelay && hasAt:
		return time.Time{}, false, badRequest("both %s and %s given: want one of them", wire.HeaderDelay, wire.HeaderAt)
	case hasDelay:
		d, err := parseDuration(wire.HeaderDelay, delay)
		if err != nil {
			return time.Time{}, false, err
		}
		if d > maxFireAt.Sub(now) {
			return time.Time{}, false, badRequest("%s %q: the fire time would be after %s, the latest that can be stored", wire.HeaderDelay, keys.Clip(delay), maxFireAt.Format(time.DateOnly))
		}
		return now.Add(d), true, nil
	case hasAt:
		t, err := parseAt(at)
		if err != nil {
			return time.Time{}, false, err
		}
		if t.After(now) {
			return t, true, nil
		}
		return now, true, nil
	}
	return now, false, nil
}

// parseTTL reads Delay-TTL into msg, which fires at fireAt.
func parseTTL(ctl *controls, msg *delaystore.StoredMessage, fireAt time.Time) error {
	v, ok, err := ctl.value(wire.HeaderTTL)
	if err != nil || !ok {
		return err
	}
	ttl, err := parseDuration(wire.HeaderTTL, v)
	if err != nil {
		return err
	}
	if ttl == 0 {
		return badRequest("%s %q: want a positive duration", wire.HeaderTTL, keys.Clip(v))
	}
	if ttl > maxFireAt.Sub(fireAt) {
		return badRequest("%s %q: the expiry would be after %s, the latest that can be stored", wire.HeaderTTL, keys.Clip(v), maxFireAt.Format(time.DateOnly))
	}
	msg.TtlNs = int64(ttl)
	msg.ExpireAtNs = fireAt.Add(ttl).UnixNano()
	return nil
}

// parseDelivery reads Delay-Id, Delay-Ack and Delay-Max-Deliver into msg.
func parseDelivery(ctl *controls, msg *delaystore.StoredMessage) error {
	if v, ok, err := ctl.value(wire.HeaderID); err != nil {
		return err
	} else if ok {
		if err := checkClientID(v); err != nil {
			return err
		}
		msg.ClientId = v
	}
	if v, ok, err := ctl.value(wire.HeaderAck); err != nil {
		return err
	} else if ok {
		switch strings.ToLower(v) {
		case "explicit":
			msg.AckPolicy = delaystore.AckPolicy_ACK_EXPLICIT
		case "none":
			msg.AckPolicy = delaystore.AckPolicy_ACK_NONE
		default:
			return badRequest("%s %q: want explicit or none", wire.HeaderAck, keys.Clip(v))
		}
	}
	if v, ok, err := ctl.value(wire.HeaderMaxDeliver); err != nil {
		return err
	} else if ok {
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil || n == 0 {
			return badRequest("%s %q: want a positive integer up to %d", wire.HeaderMaxDeliver, keys.Clip(v), uint32(math.MaxUint32))
		}
		msg.MaxDeliver = uint32(n)
	}
	return nil
}

// parseRecurring reads the headers of a recurring schedule into msg, if
// it is one: its first occurrence replaces the fire time. fireAt and
// given are parseFireAt's.
func parseRecurring(ctl *controls, msg *delaystore.StoredMessage, now, fireAt time.Time, given bool) error {
	r, err := parseRecurrence(ctl, now, fireAt, given)
	if err != nil || r == nil {
		return err
	}
	msg.Recurrence = r
	r.Id = msg.ClientId
	if r.JitterNs != 0 {
		r.JitterSeed = recur.Seed(msg.Subject, msg.ClientId, msg.EnqueuedAtNs)
	}
	msg.FireAtNs = recur.FireAtNs(r, r.OccurrenceNs)
	// An occurrence's expiry is set when it first goes out (see
	// package recur); until then it has none, so it cannot expire
	// before its successor is planned.
	msg.ExpireAtNs = 0
	if msg.TtlNs > maxFireAt.Sub(time.Unix(0, r.OccurrenceNs)).Nanoseconds() {
		return badRequest("%s: the first occurrence's expiry would be after %s, the latest that can be stored", wire.HeaderTTL, maxFireAt.Format(time.DateOnly))
	}
	return nil
}

// checkDeliverable refuses a message that could be stored but never
// published: a delivery whose protocol line would exceed the server's
// max_control_line makes the server close the service's connection, and
// one over max_payload is refused by nats.go on every attempt. It measures
// the delivery and the dead letter as the publisher builds them, with
// every header the service adds at its largest.
func checkDeliverable(msg *delaystore.StoredMessage, lim scheduleLimits) error {
	// A recurring schedule is measured with Delay-Next, which later
	// occurrences carry.
	next := msg.Recurrence != nil
	hl := deliveryHeaderLen(msg, maxAttempt, next)
	total := hl + len(msg.Payload)
	if lim.maxControlLine > 0 {
		replyLen := len(lim.ackPrefix) + 1 + keys.TagLen
		if n := controlLineLenOf(len(msg.Subject), replyLen, hl, total); n > lim.maxControlLine {
			return badRequest("target subject is %d bytes, too long to deliver: the delivery's protocol line (subject, reply subject %s.<tag>, header and total sizes) would be %d bytes, %d over the server's max_control_line of %d",
				len(msg.Subject), lim.ackPrefix, n, n-lim.maxControlLine, lim.maxControlLine)
		}
	}
	if lim.serverMaxPayload > 0 && total > lim.serverMaxPayload {
		return badRequest("payload of %d bytes: the delivery with its headers (%d bytes, the service's own included) would be %d bytes, %d over the server's max_payload of %d",
			len(msg.Payload), hl, total, total-lim.serverMaxPayload, lim.serverMaxPayload)
	}
	if lim.deadLetter == "" {
		return nil
	}
	hl += deadLetterExtraLen(msg.Subject, maxReasonLen)
	total = hl + len(msg.Payload)
	if lim.maxControlLine > 0 {
		if n := controlLineLenOf(len(lim.deadLetter), 0, hl, total); n > lim.maxControlLine {
			return badRequest("the dead letter's protocol line (subject %s, header and total sizes) would be %d bytes, %d over the server's max_control_line of %d",
				lim.deadLetter, n, n-lim.maxControlLine, lim.maxControlLine)
		}
	}
	if lim.serverMaxPayload > 0 && total > lim.serverMaxPayload {
		return badRequest("payload of %d bytes: the dead letter with its headers (%d bytes, the service's own and %s, %s included) would be %d bytes, %d over the server's max_payload of %d",
			len(msg.Payload), hl, wire.HeaderSubject, wire.HeaderReason, total, total-lim.serverMaxPayload, lim.serverMaxPayload)
	}
	return nil
}

// passedHeaders are the publisher's headers without the control headers, in
// name order so that what is stored does not depend on map order. Names in
// the reserved Delay- prefix that are not control headers are refused, so a
// typo (Delay-Ttl-Ms) is not passed on silently, and so are names nats.go
// cannot publish, which would make the message undeliverable.
//
// NB: headers are stored as protobuf strings, which must be valid UTF-8.
// One message that does not encode fails its whole group commit, so every
// publisher in the batch would get a 503; refuse it here with a 400
// instead.
func passedHeaders(h nats.Header) ([]*delaystore.Header, error) {
	// NB: the names of a message with few headers stay on the stack, and
	// its headers take one allocation, not one each.
	var buf [8]string
	names := buf[:0]
	for k := range h {
		if !isControl(k) {
			names = append(names, k)
		}
	}
	if len(names) == 0 {
		return nil, nil
	}
	slices.Sort(names)
	out := make([]*delaystore.Header, 0, len(names))
	hs := make([]delaystore.Header, len(names))
	for i, k := range names {
		if !utf8.ValidString(k) {
			return nil, badRequest("header name %q is not valid UTF-8: want UTF-8 header names", keys.Clip(k))
		}
		if !publishableName(k) {
			return nil, badRequest("header name %q: want printable ASCII without ':', or it cannot be delivered", keys.Clip(k))
		}
		if len(k) >= len(wire.ReservedPrefix) && strings.EqualFold(k[:len(wire.ReservedPrefix)], wire.ReservedPrefix) {
			return nil, badRequest("header %s: unknown in the reserved %s prefix: want one of %s (names match in any case)",
				keys.Clip(k), wire.ReservedPrefix, strings.Join(controlHeaders[:], ", "))
		}
		for _, v := range h[k] {
			if !utf8.ValidString(v) {
				return nil, badRequest("header %s value %q is not valid UTF-8: want UTF-8 header values", keys.Clip(k), keys.Clip(v))
			}
		}
		// NB: the values are the request's own, decoded for it alone
		// and read-only from here, so they are kept, not copied.
		hs[i].Name, hs[i].Values = k, h[k]
		out = append(out, &hs[i])
	}
	return out, nil
}

// publishableName reports whether nats.go publishes a header of this name:
// it reads any name but publishes only printable ASCII without a colon,
// and fails the whole publish otherwise.
func publishableName(k string) bool {
	for i := 0; i < len(k); i++ {
		if k[i] < '!' || k[i] > '~' || k[i] == ':' {
			return false
		}
	}
	return k != ""
}

// parseDuration reads a Go duration (90s, 1h30m) or integer milliseconds.
func parseDuration(name, v string) (time.Duration, error) {
	if v == "" {
		return 0, badRequest("%s is empty: want a Go duration such as 90s, whole days such as 7d or 1d12h, or integer milliseconds", name)
	}
	if isDigits(v) {
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil || ms > math.MaxInt64/int64(time.Millisecond) {
			return 0, badRequest("%s %q: too large: the maximum is %d milliseconds", name, keys.Clip(v), math.MaxInt64/int64(time.Millisecond))
		}
		return time.Duration(ms) * time.Millisecond, nil
	}
	if strings.HasSuffix(v, "y") && isDigits(strings.TrimSuffix(v, "y")) {
		return 0, badRequest("%s %q: years vary in length: give days, such as 365d", name, keys.Clip(v))
	}
	d, err := wire.ParseDays(v)
	if err != nil {
		if errors.Is(err, wire.ErrDurationTooLong) {
			return 0, badRequest("%s %q: too large: the maximum is %v", name, keys.Clip(v), time.Duration(math.MaxInt64))
		}
		return 0, badRequest("%s %q: want a Go duration such as 90s, whole days such as 7d or 1d12h, or integer milliseconds", name, keys.Clip(v))
	}
	if d < 0 {
		return 0, badRequest("%s %q: must not be negative", name, keys.Clip(v))
	}
	return d, nil
}

// parseAt reads Delay-At: RFC 3339 (fractions allowed) or Unix seconds
// (decimals allowed).
func parseAt(v string) (time.Time, error) { return parseTime(wire.HeaderAt, v) }

// parseTime reads the time header name: RFC 3339 (fractions allowed) or
// Unix seconds (decimals allowed).
func parseTime(name, v string) (time.Time, error) {
	const want = "want RFC 3339 such as 2026-12-24T18:00:00Z, or Unix seconds such as 1798135200.5"
	var t time.Time
	if sec, frac, ok := strings.Cut(v, "."); isDigits(sec) && (!ok || isDigits(frac)) {
		s, err := strconv.ParseInt(sec, 10, 64)
		if err != nil || len(frac) > 9 {
			return t, badRequest("%s %q: %s", name, keys.Clip(v), want)
		}
		ns, _ := strconv.ParseInt((frac + "000000000")[:9], 10, 64)
		if s > maxFireAt.Unix() {
			return t, badRequest("%s %q: after %s, the latest time that can be stored", name, keys.Clip(v), maxFireAt.Format(time.DateOnly))
		}
		t = time.Unix(s, ns)
	} else {
		var err error
		if t, err = time.Parse(time.RFC3339Nano, v); err != nil {
			return t, badRequest("%s %q: %s", name, keys.Clip(v), want)
		}
		// Time.Parse takes hours up to 24 and minutes up to 60 in
		// the offset; RFC 3339 allows 23 and 59.
		if off := v[len(v)-1:]; off != "Z" && off != "z" {
			off = v[len(v)-6:]
			if off[1:3] > "23" || off[4:6] > "59" {
				return t, badRequest("%s %q: zone offset %s: want -23:59 to +23:59", name, keys.Clip(v), off)
			}
		}
	}
	// Compare instants: the year of t is the year in its own offset.
	if t.Before(time.Unix(0, 0)) {
		return t, badRequest("%s %q: before 1970-01-01T00:00:00Z: %s", name, keys.Clip(v), want)
	}
	if !t.Before(maxFireAt) {
		return t, badRequest("%s %q: after %s, the latest time that can be stored", name, keys.Clip(v), maxFireAt.Format(time.DateOnly))
	}
	return t, nil
}

// isDigits reports whether s is one or more ASCII digits.
func isDigits(s string) bool { return s != "" && strings.Trim(s, "0123456789") == "" }

// checkTarget rejects subjects that cannot be delivered to: empty tokens,
// wildcards, white space and control characters, and the service's own
// subjects.
func checkTarget(subj string, reserved []string) error {
	if subj == "" {
		return badRequest("empty target subject: publish to <prefix>.<subject>")
	}
	if !utf8.ValidString(subj) {
		return badRequest("target subject %q is not valid UTF-8", keys.Clip(subj))
	}
	// One pass over the bytes, without splitting the subject into
	// tokens; ranging over the string decodes runes, as the checks need.
	tokStart := true
	for _, r := range subj {
		switch {
		case r == '.':
			if tokStart {
				return badRequest("target subject %q has an empty token", keys.Clip(subj))
			}
			tokStart = true
			continue
		case r == '*' || r == '>':
			return badRequest("target subject %q has a wildcard: want a concrete subject", keys.Clip(subj))
		case r <= ' ' || r == 0x7f:
			return badRequest("target subject %q contains white space or a control character", keys.Clip(subj))
		}
		tokStart = false
	}
	if tokStart {
		return badRequest("target subject %q has an empty token", keys.Clip(subj))
	}
	for _, p := range reserved {
		// Not HasPrefix(subj, p+"."), which allocates per message.
		if strings.HasPrefix(subj, p) && (len(subj) == len(p) || subj[len(p)] == '.') {
			return badRequest("target subject %q is inside the service's own prefix %q", keys.Clip(subj), p)
		}
	}
	return nil
}

func checkClientID(id string) error {
	if id == "" {
		return badRequest("%s is empty: want a non-empty id", wire.HeaderID)
	}
	if len(id) > maxClientIDLen {
		return badRequest("%s is %d bytes: the limit is %d", wire.HeaderID, len(id), maxClientIDLen)
	}
	if !utf8.ValidString(id) {
		return badRequest("%s %q is not valid UTF-8", wire.HeaderID, keys.Clip(id))
	}
	for _, r := range id {
		if r < ' ' || r == 0x7f {
			return badRequest("%s %q contains a control character", wire.HeaderID, keys.Clip(id))
		}
	}
	return nil
}

// controlHeaders are matched case-insensitively and never passed on.
var controlHeaders = [numControl]string{wire.HeaderDelay, wire.HeaderAt, wire.HeaderTTL, wire.HeaderID, wire.HeaderAck, wire.HeaderMaxDeliver,
	wire.HeaderEvery, wire.HeaderCron, wire.HeaderTZ, wire.HeaderUntil, wire.HeaderLimit, wire.HeaderCatchUp, wire.HeaderOverlap,
	wire.HeaderExclude, wire.HeaderJitter, wire.HeaderDebounce, wire.HeaderDebounceMax,
	wire.HeaderThrottle}

// ownHeaders are the headers the service sets on deliveries and dead
// letters; they replace publisher headers of the same name in any case.
var ownHeaders = []string{wire.HeaderTag, wire.HeaderAttempt, wire.HeaderFireAt, wire.HeaderEnqueuedAt, wire.HeaderID, wire.HeaderSubject, wire.HeaderReason,
	wire.HeaderSchedule, wire.HeaderOccurrence, wire.HeaderNext}

// parseRecurrence reads the headers of a recurring schedule (PROTOCOL.md
// section 6). It returns nil when the message is not recurring: neither
// Delay-Every nor Delay-Cron. at is the fire time from Delay or Delay-At,
// given says whether one was; the first occurrence is then at, else the
// first planned time after now.
func parseRecurrence(ctl *controls, now, at time.Time, given bool) (*delaystore.Recurrence, error) {
	var v [9]string
	var has [9]bool
	names := [9]string{wire.HeaderEvery, wire.HeaderCron, wire.HeaderTZ, wire.HeaderUntil, wire.HeaderLimit, wire.HeaderCatchUp, wire.HeaderOverlap,
		wire.HeaderExclude, wire.HeaderJitter}
	for i, name := range names {
		var err error
		if v[i], has[i], err = ctl.value(name); err != nil {
			return nil, err
		}
	}
	every, cron, tz, until, limit, catchUp := v[0], v[1], v[2], v[3], v[4], v[5]
	switch {
	case has[0] && has[1]:
		return nil, badRequest("both %s and %s given: want one of them", wire.HeaderEvery, wire.HeaderCron)
	case !has[0] && !has[1]:
		for i := 2; i < len(names); i++ {
			if has[i] {
				return nil, badRequest("%s without %s or %s: want it only on a recurring schedule", names[i], wire.HeaderEvery, wire.HeaderCron)
			}
		}
		return nil, nil
	case has[0] && has[2]:
		return nil, badRequest("%s with %s: a zone applies to %s only; an interval is the same in every zone", wire.HeaderTZ, wire.HeaderEvery, wire.HeaderCron)
	}

	r := &delaystore.Recurrence{}
	var p recur.Plan
	var err error
	if has[0] {
		err = parseEvery(r, &p, every)
	} else {
		err = parseCron(r, &p, cron, tz, has[2])
	}
	if err != nil {
		return nil, err
	}
	if err := parseRecurEnd(r, &p, until, limit, catchUp, has[3], has[4], has[5]); err != nil {
		return nil, err
	}
	if err := parseOverlap(r, v[6], has[6]); err != nil {
		return nil, err
	}
	if err := parseExclude(r, &p, v[7], has[7]); err != nil {
		return nil, err
	}
	first, ok := p.First(now, at, given)
	switch {
	case ok && !first.Before(maxFireAt):
		return nil, badRequest("the first occurrence would be after %s, the latest that can be stored", maxFireAt.Format(time.DateOnly))
	case ok:
	case given || !p.Until.IsZero():
		return nil, badRequest("%s %s is before the first occurrence: want an end after the start", wire.HeaderUntil, keys.Clip(until))
	default:
		return nil, badRequest("%s %q: the spec is well formed, but no date within five years matches it: check its day of month, month and day of week", wire.HeaderCron, keys.Clip(cron))
	}
	if err := parseJitter(r, &p, first, v[8], has[8]); err != nil {
		return nil, err
	}
	r.OccurrenceNs, r.Seq = first.UnixNano(), 1
	return r, nil
}

// parseExclude reads Delay-Exclude, if given, into r and p: stored as
// recur.Exclusions writes it, sorted and merged.
func parseExclude(r *delaystore.Recurrence, p *recur.Plan, exclude string, has bool) error {
	if !has {
		return nil
	}
	ex, err := recur.ParseExclude(exclude)
	if err != nil {
		return badRequest("%s %q: %s", wire.HeaderExclude, keys.Clip(exclude), strings.TrimPrefix(err.Error(), recur.ErrInvalid.Error()+": "))
	}
	p.Extras().Exclude, r.Exclude = ex, ex.String()
	return nil
}

// parseJitter reads Delay-Jitter, if given, into r and p: a positive
// duration under the shortest gap between the schedule's planned times
// from first on, so that no occurrence goes out after its successor's
// planned time. The seed is drawn by the caller, who knows the schedule.
func parseJitter(r *delaystore.Recurrence, p *recur.Plan, first time.Time, jitter string, has bool) error {
	if !has {
		return nil
	}
	d, err := parseDuration(wire.HeaderJitter, jitter)
	if err != nil {
		return err
	}
	if d == 0 {
		return badRequest("%s %q: want a positive duration such as 30s", wire.HeaderJitter, keys.Clip(jitter))
	}
	if gap := p.MinGap(first); gap > 0 && d >= gap {
		return badRequest("%s %q: occurrences of the schedule come as little as %v apart: want less than that", wire.HeaderJitter, keys.Clip(jitter), gap)
	}
	p.Extras().Jitter, r.JitterNs = d, int64(d)
	return nil
}

// parseEvery reads Delay-Every into r and p.
func parseEvery(r *delaystore.Recurrence, p *recur.Plan, every string) error {
	d, err := parseDuration(wire.HeaderEvery, every)
	if err != nil {
		return err
	}
	if p.Spec, err = recur.ParseEvery(d); err != nil {
		return badRequest("%s %q: %s", wire.HeaderEvery, keys.Clip(every), recur.EveryForm)
	}
	r.EveryNs = int64(d)
	return nil
}

// parseCron reads Delay-Cron, in the zone of Delay-TZ if hasTZ, into r
// and p.
func parseCron(r *delaystore.Recurrence, p *recur.Plan, cron, tz string, hasTZ bool) error {
	if hasTZ {
		if _, err := time.LoadLocation(tz); err != nil || tz == "" || strings.EqualFold(tz, "local") {
			return badRequest("%s %q: want an IANA zone name such as Europe/Berlin, America/New_York or UTC", wire.HeaderTZ, keys.Clip(tz))
		}
	}
	var err error
	if p.Spec, err = recur.ParseCron(cron, tz); err != nil {
		if errors.Is(err, recur.ErrNeverFires) {
			return badRequest("%s %q: matches no date, so it would never fire (such as day 30 of February): check the day-of-month and month fields", wire.HeaderCron, keys.Clip(cron))
		}
		return badRequest("%s %q: %s", wire.HeaderCron, keys.Clip(cron), recur.CronForm)
	}
	r.Cron, r.Zone = cron, tz
	return nil
}

// parseOverlap reads Delay-Overlap, if given, into r.
func parseOverlap(r *delaystore.Recurrence, overlap string, has bool) error {
	if !has {
		return nil
	}
	switch strings.ToLower(overlap) {
	case "allow":
		r.Overlap = delaystore.Overlap_OVERLAP_ALLOW
	case "skip":
		r.Overlap = delaystore.Overlap_OVERLAP_SKIP
	case "buffer-one":
		r.Overlap = delaystore.Overlap_OVERLAP_BUFFER_ONE
	default:
		return badRequest("%s %q: want allow, skip or buffer-one", wire.HeaderOverlap, keys.Clip(overlap))
	}
	return nil
}

// parseRecurEnd reads Delay-Until, Delay-Limit and Delay-Catch-Up, each
// if given, into r and p.
func parseRecurEnd(r *delaystore.Recurrence, p *recur.Plan, until, limit, catchUp string, hasUntil, hasLimit, hasCatchUp bool) error {
	if hasUntil {
		t, err := parseTime(wire.HeaderUntil, until)
		if err != nil {
			return err
		}
		p.Until, r.UntilNs = t, t.UnixNano()
	}
	if hasLimit {
		n, err := strconv.ParseUint(limit, 10, 64)
		if err != nil || n == 0 {
			return badRequest("%s %q: want a positive integer", wire.HeaderLimit, keys.Clip(limit))
		}
		p.Limit, r.Limit = n, n
	}
	if !hasCatchUp {
		return nil
	}
	switch strings.ToLower(catchUp) {
	case "one":
		r.CatchUp = recur.One
	case "all":
		r.CatchUp = recur.All
	case "none":
		r.CatchUp = recur.None
	default:
		return badRequest("%s %q: want one, all or none", wire.HeaderCatchUp, keys.Clip(catchUp))
	}
	return nil
}
