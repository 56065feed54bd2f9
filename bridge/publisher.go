package bridge

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"

	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/dispatch"
	"github.com/natsdelay/natsdelay/dispatch/recur"
	"github.com/natsdelay/natsdelay/keys"
)

// publisher adapts a *nats.Conn to dispatch.Publisher. Deliveries carry the
// reply subject <ack prefix>.<tag> and go out on the connection that holds
// the plain subscription on <ack prefix>.>, so the server answers a delivery
// that reached nobody with a 503 on that subscription.
type publisher struct {
	nc        *nats.Conn
	ackPrefix string
	// maxControlLine is the server's max_control_line.
	maxControlLine int
	// markerPrefix is the subject of flush markers, under the ack prefix so
	// they arrive on the ack subscription after every 503 sent before them.
	markerPrefix string

	// fence, if set, reports whether a dead letter may go out now (see
	// dispatch.Config.Fence, which guards deliveries).
	fence func() bool
	// tracer, if set, records the spans of traced deliveries; nil costs
	// a delivery one check.
	tracer *tracer

	seq     atomic.Uint64
	mu      sync.Mutex
	waiting map[uint64]chan struct{}

	// deliverMu guards what Deliver reuses from one delivery to the next:
	// nats.go has written a message to its buffer when PublishMsg returns,
	// so the header map and the message need not outlive the call.
	deliverMu sync.Mutex
	header    nats.Header
	vals      ownValues
	msg       nats.Msg

	// jsStreams are the targets of JetStream schedules that a stream
	// turned out to capture, after the schedule was taken in: it refused
	// a firing's Nats-Scheduler (see learnStream).
	jsStreams streamTargets
}

var _ dispatch.Publisher = (*publisher)(nil)

func newPublisher(nc *nats.Conn, ackPrefix string, maxControlLine int) *publisher {
	return &publisher{
		nc:             nc,
		ackPrefix:      ackPrefix,
		maxControlLine: maxControlLine,
		markerPrefix:   ackPrefix + ".flush." + nats.NewInbox()[len(nats.InboxPrefix):] + ".",
		waiting:        make(map[uint64]chan struct{}),
	}
}

// errFenced refuses a dead letter while this node does not hold its
// leadership lease: the message stays pending and is tried again.
var errFenced = errors.New("not the verified cluster leader: publishing nothing until the leadership lease is held again")

func formatTime(ns int64) string { return string(appendTime(nil, ns)) }

// timeLen is the length of every time formatTime writes: the service's
// times are from 1970 to 2262, four-digit years.
const timeLen = len("2006-01-02T15:04:05.000Z")

// ownSlots is how many of the service's own headers one delivery or dead
// letter carries at most.
const ownSlots = 13

// smallHeader is the most entries a Go map holds in one group of slots,
// without a table.
const smallHeader = 8

// ownValues hold the one-value slices of the service's own headers, so a
// reused header map needs no new slice per header.
type ownValues [ownSlots][1]string

// deliveryHeader rebuilds the stored headers and adds the delivery
// headers. The service's own headers replace stored ones of the same name
// in any case, which ingest refuses now but older versions stored.
func deliveryHeader(key keys.Key, msg *delaystore.StoredMessage, attempt uint32, extra int) nats.Header {
	h := make(nats.Header, len(msg.Headers)+8+extra)
	fillDeliveryHeader(h, new(ownValues), key.Tag(), msg, attempt)
	return h
}

// fillDeliveryHeader sets in h, which is empty, what deliveryHeader
// returns, with the tag given and the own headers' values in vals. It
// returns headerLen(h), counted as it sets each header: measuring the
// delivery by a second walk of the map was a share of its cost.
// TestFillDeliveryHeader_LenAsHeaderLen holds the two to the same size.
func fillDeliveryHeader(h nats.Header, vals *ownValues, tag string, msg *delaystore.StoredMessage, attempt uint32) int {
	size := len("NATS/1.0\r\n\r\n")
	count := func(name string, vs []string) {
		for _, v := range vs {
			size += len(name) + len(textproto.TrimString(v)) + len(": \r\n")
		}
	}
	ownID := keepsMsgID(msg)
	replaced := false
	for _, kv := range msg.Headers {
		if isOwnHeader(kv.Name) || (!ownID && kv.Name == headerMsgID) {
			continue
		}
		n := len(h)
		h[kv.Name] = kv.Values
		// A name stored twice (no version stores one so) replaces its
		// first values, which were counted already.
		replaced = replaced || len(h) == n
		count(kv.Name, kv.Values)
	}
	// One string holds every time of the delivery (an occurrence's own
	// and its next as well), so they cost one allocation; ends[i] is
	// where the i-th ends in it.
	r := msg.GetRecurrence()
	var buf [4 * timeLen]byte
	var ends [4]int
	b := appendTime(buf[:0], msg.FireAtNs)
	ends[0] = len(b)
	b = appendTime(b, msg.EnqueuedAtNs)
	ends[1] = len(b)
	if r != nil {
		b = appendTime(b, r.OccurrenceNs)
		ends[2] = len(b)
		if r.Planned && r.NextNs != 0 {
			b = appendTime(b, r.NextNs)
			ends[3] = len(b)
		}
	}
	times := string(b)
	fire, enq := times[:ends[0]], times[ends[0]:ends[1]]
	n := 0
	set := func(name, v string) {
		vals[n][0] = v
		h[name] = vals[n][:]
		count(name, vals[n][:])
		n++
	}
	set(wire.HeaderTag, tag)
	if !ownID {
		set(headerMsgID, tag)
	}
	set(wire.HeaderAttempt, strconv.FormatUint(uint64(attempt), 10))
	set(wire.HeaderFireAt, fire)
	set(wire.HeaderEnqueuedAt, enq)
	id := msg.ClientId
	if r != nil && r.Id != "" {
		id = r.Id
	}
	if id != "" {
		set(wire.HeaderID, id)
	}
	if r != nil {
		set(wire.HeaderSchedule, scheduleSpec(r))
		set(wire.HeaderOccurrence, times[ends[1]:ends[2]])
		if ends[3] != 0 {
			set(wire.HeaderNext, times[ends[2]:ends[3]])
		}
		if r.JsScheduler != "" && !r.JsStream {
			set(wire.HeaderJSScheduler, r.JsScheduler)
			set(wire.HeaderJSScheduleNext, jsScheduleNext(r))
		}
	}
	if replaced {
		return headerLen(h)
	}
	return size
}

// jsScheduleNext is the Nats-Schedule-Next of an occurrence of a
// JetStream schedule, as nats-server writes it: the next planned time,
// RFC 3339 with nanoseconds in the cron spec's zone, or purge on the
// last.
func jsScheduleNext(r *delaystore.Recurrence) string {
	if !r.Planned || r.NextNs == 0 {
		return wire.JSScheduleNextPurge
	}
	loc := time.UTC
	if r.Zone != "" && r.Cron != "" {
		// Kept parsed: no zone is loaded per delivery.
		if spec, err := recur.ParseCron(r.Cron, r.Zone); err == nil {
			loc = spec.Loc
		}
	}
	return time.Unix(0, r.NextNs).In(loc).Format(time.RFC3339Nano)
}

// deliveryHeaderLen is headerLen(deliveryHeader(key, msg, attempt, 0)),
// the size a delivery's header takes on the wire, computed without
// building it: ingest checks every message's size, and building the
// delivery for that was a large share of ingest's cost. With next, it
// counts Delay-Next, which later occurrences of a recurring schedule
// carry. TestDeliveryHeaderLen_AsBuilt holds it to headerLen.
func deliveryHeaderLen(msg *delaystore.StoredMessage, attempt uint32, next bool) int {
	n := len("NATS/1.0\r\n\r\n")
	add := func(name string, vlen int) { n += len(name) + vlen + len(": \r\n") }
	ownID := keepsMsgID(msg)
	for _, kv := range msg.Headers {
		if isOwnHeader(kv.Name) || (!ownID && kv.Name == headerMsgID) {
			continue
		}
		for _, v := range kv.Values {
			add(kv.Name, len(textproto.TrimString(v)))
		}
	}
	add(wire.HeaderTag, keys.TagLen)
	if !ownID {
		add(headerMsgID, keys.TagLen)
	}
	add(wire.HeaderAttempt, decimalLen(uint64(attempt)))
	add(wire.HeaderFireAt, timeLen)
	add(wire.HeaderEnqueuedAt, timeLen)
	id := msg.ClientId
	r := msg.GetRecurrence()
	if r != nil && r.Id != "" {
		id = r.Id
	}
	if id != "" {
		add(wire.HeaderID, len(textproto.TrimString(id)))
	}
	if r != nil {
		add(wire.HeaderSchedule, len(textproto.TrimString(scheduleSpec(r))))
		add(wire.HeaderOccurrence, timeLen)
		if next || (r.Planned && r.NextNs != 0) {
			add(wire.HeaderNext, timeLen)
		}
		if r.JsScheduler != "" && !r.JsStream {
			add(wire.HeaderJSScheduler, len(textproto.TrimString(r.JsScheduler)))
			add(wire.HeaderJSScheduleNext, len(jsScheduleNext(r)))
		}
	}
	return n
}

// decimalLen is the number of decimal digits of v.
func decimalLen(v uint64) int {
	n := 1
	for v >= 10 {
		v /= 10
		n++
	}
	return n
}

// scheduleSpec is the Delay-Schedule of an occurrence: the cron spec as
// given, or @every and the interval.
func scheduleSpec(r *delaystore.Recurrence) string {
	if r.JsSchedule != "" {
		return r.JsSchedule
	}
	if r.Cron != "" {
		return r.Cron
	}
	return everySpec(r.EveryNs)
}

// everySpecs keeps the Delay-Schedule value of the intervals delivered,
// so that an occurrence of an interval schedule adds no allocation to
// its delivery: the schedules of a service share few intervals, and each
// delivery of one formatted it again. Past maxEverySpecs it starts over.
var everySpecs struct {
	sync.Mutex
	m map[int64]string
}

const maxEverySpecs = 1024

// everySpec is the Delay-Schedule value of an interval of ns: "@every "
// and the duration as time.Duration writes it.
func everySpec(ns int64) string {
	everySpecs.Lock()
	defer everySpecs.Unlock()
	if s, ok := everySpecs.m[ns]; ok {
		return s
	}
	if everySpecs.m == nil || len(everySpecs.m) >= maxEverySpecs {
		everySpecs.m = make(map[int64]string)
	}
	s := "@every " + time.Duration(ns).String()
	everySpecs.m[ns] = s
	return s
}

// headerMsgID is JetStream's de-duplication header, matched in this case
// alone, as nats-server reads it. Every delivery
// carries it, set to the delivery's tag unless the message came with one
// of its own: a stream that captures the subject then stores a message
// once within its duplicate window, however many times a lost PubAck, a
// crash or a leader change make the service deliver it. A recurring
// schedule's occurrences are messages of their own, each with its tag.
const headerMsgID = "Nats-Msg-Id"

// keepsMsgID reports whether msg's deliveries carry the Nats-Msg-Id it
// came with: a one-off message's stands, as the publisher chose what a
// duplicate is. A recurring schedule's does not: the same id on every
// occurrence would make a stream drop each after the first within its
// duplicate window, so each occurrence carries its own tag.
func keepsMsgID(msg *delaystore.StoredMessage) bool {
	if msg.GetRecurrence() != nil {
		return false
	}
	for _, kv := range msg.Headers {
		if kv.Name == headerMsgID {
			return true
		}
	}
	return false
}

// isOwnHeader reports whether name is, in any case, a header the service
// sets on deliveries or dead letters.
func isOwnHeader(name string) bool {
	if len(name) < len(wire.HeaderTag) || !strings.EqualFold(name[:len(wire.ReservedPrefix)], wire.ReservedPrefix) {
		return false
	}
	for _, o := range ownHeaders {
		if strings.EqualFold(name, o) {
			return true
		}
	}
	return false
}

// deliveryMsg is attempt number attempt of msg, stored under key.
func deliveryMsg(ackPrefix string, key keys.Key, msg *delaystore.StoredMessage, attempt uint32) *nats.Msg {
	return &nats.Msg{
		Subject: msg.Subject,
		Reply:   ackPrefix + "." + key.Tag(),
		Header:  deliveryHeader(key, msg, attempt, 0),
		Data:    msg.Payload,
	}
}

// deadLetterMsg is the dead letter of msg. A reason longer than
// maxReasonLen is cut, so that ingest can bound the dead letter's size.
func deadLetterMsg(subject string, key keys.Key, msg *delaystore.StoredMessage, attempt uint32, reason string) *nats.Msg {
	if len(reason) > maxReasonLen {
		cut := maxReasonLen
		for cut > 0 && !utf8.RuneStart(reason[cut]) {
			cut--
		}
		reason = reason[:cut]
	}
	h := deliveryHeader(key, msg, attempt, 2)
	h[wire.HeaderSubject] = []string{msg.Subject}
	h[wire.HeaderReason] = []string{reason}
	// The dead letter's own id: a stream that captures both the subject and
	// the dead-letter subject would otherwise drop it as a duplicate of the
	// delivery it had stored.
	if id := h[headerMsgID]; len(id) > 0 {
		h[headerMsgID] = append([]string{id[0] + deadLetterIDSuffix}, id[1:]...)
	}
	return &nats.Msg{Subject: subject, Header: h, Data: msg.Payload}
}

// deadLetterIDSuffix ends a dead letter's Nats-Msg-Id: its delivery's id
// and the suffix, stable across tries to publish it.
const deadLetterIDSuffix = ".dead"

const (
	// DefaultMaxControlLine is nats-server's default max_control_line.
	DefaultMaxControlLine = 4096
	// maxAttempt is the widest Delay-Attempt.
	maxAttempt = math.MaxUint32
	// maxReasonLen bounds a dead letter's Delay-Reason.
	maxReasonLen = 128
)

// headerLen is the size of h on the wire, as nats.go writes it:
// "NATS/1.0\r\n", "name: value\r\n" per value with the value trimmed, and
// "\r\n".
func headerLen(h nats.Header) int {
	if len(h) == 0 {
		return 0
	}
	n := len("NATS/1.0\r\n\r\n")
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(textproto.TrimString(v)) + len(": \r\n")
		}
	}
	return n
}

// controlLineLen is the length of the arguments of the line that publishes
// a message: "<subject> [<reply> ]<header size> <total size>". nats-server
// compares it with its max_control_line and closes the connection of a
// client that exceeds it; nats.go does not check it before sending.
func controlLineLen(subject, reply string, hdrLen, total int) int {
	return controlLineLenOf(len(subject), len(reply), hdrLen, total)
}

// controlLineLenOf is controlLineLen from the subjects' lengths.
func controlLineLenOf(subjectLen, replyLen, hdrLen, total int) int {
	n := subjectLen + 1 + decimalLen(uint64(hdrLen)) + 1 + decimalLen(uint64(total))
	if replyLen > 0 {
		n += replyLen + 1
	}
	return n
}

// checkLine returns an error wrapping errTooLarge if publishing m, whose
// header is hl bytes on the wire, would exceed maxControlLine.
func checkLine(m *nats.Msg, hl, maxControlLine int) error {
	if n := controlLineLen(m.Subject, m.Reply, hl, hl+len(m.Data)); n > maxControlLine {
		return fmt.Errorf("%w: a %d-byte subject makes the protocol line %d bytes, %d over the server's max_control_line of %d",
			errTooLarge, len(m.Subject), n, n-maxControlLine, maxControlLine)
	}
	return nil
}

// publish publishes m unless it is too large for the server: a protocol
// line over max_control_line would make the server close the connection,
// and more than max_payload is refused by nats.go. Either way it returns
// an error wrapping errTooLarge, and the dispatcher treats the message as
// not published.
func (p *publisher) publish(m *nats.Msg) error {
	return p.publishSized(m, headerLen(m.Header))
}

// publishSized is publish of m, whose header is hl bytes on the wire.
func (p *publisher) publishSized(m *nats.Msg, hl int) error {
	if err := checkLine(m, hl, p.maxControlLine); err != nil {
		return err
	}
	err := p.nc.PublishMsg(m)
	switch {
	case errors.Is(err, nats.ErrMaxPayload):
		return fmt.Errorf("%w: %d bytes of headers and payload, over the server's max_payload of %d (%w)",
			errTooLarge, headerLen(m.Header)+len(m.Data), p.nc.MaxPayload(), err)
	case errors.Is(err, nats.ErrBadHeaderMsg):
		// A header name nats.go will not send (stored by an older
		// version, before ingest refused it): it never will.
		return fmt.Errorf("a header name cannot be published (%w): %w", err, dispatch.ErrUndeliverable)
	}
	return err
}

// Deliver publishes a delivery as deliveryMsg builds it, reusing one
// header map, so that a delivery allocates only its reply subject and
// times.
func (p *publisher) Deliver(key keys.Key, msg *delaystore.StoredMessage, attempt uint32) error {
	p.deliverMu.Lock()
	defer p.deliverMu.Unlock()
	if p.header == nil {
		// NB: no size hint. A map of up to 8 entries, which a delivery
		// with few headers of its own fills, is a single group that
		// nats.go's two walks of it (size, then bytes) read at once; a
		// larger hint made a table of several.
		p.header = make(nats.Header)
	}
	// The tag is the tail of the reply subject, one allocation for both.
	var tag [keys.TagLen]byte
	var b strings.Builder
	b.Grow(len(p.ackPrefix) + 1 + keys.TagLen)
	b.WriteString(p.ackPrefix)
	b.WriteByte('.')
	b.Write(key.AppendTag(tag[:0]))
	reply := b.String()
	hl := fillDeliveryHeader(p.header, &p.vals, reply[len(p.ackPrefix)+1:], msg, attempt)
	if r := msg.GetRecurrence(); r != nil && r.JsScheduler != "" && !r.JsStream && p.jsStreams.has(msg.Subject) {
		delete(p.header, wire.HeaderJSScheduler)
		delete(p.header, wire.HeaderJSScheduleNext)
		hl = headerLen(p.header)
	}
	var span trace.Span
	if p.tracer != nil {
		span = p.tracer.deliver(p.header, key, msg, attempt)
		hl = headerLen(p.header) // it may add the trace context
	}
	p.msg = nats.Msg{Subject: msg.Subject, Reply: reply, Header: p.header, Data: msg.Payload}
	err := p.publishSized(&p.msg, hl)
	if span != nil {
		p.tracer.delivered(span, key, err)
	}
	// Drop the references to msg, which the dispatcher may free or reuse.
	// A map that grew past a group stays grown when cleared, and every
	// later delivery would walk its table: it is let go instead.
	if len(p.header) > smallHeader {
		p.header = nil
	}
	clear(p.header)
	p.vals = ownValues{}
	p.msg = nats.Msg{}
	return err
}

func (p *publisher) DeadLetter(subject string, key keys.Key, msg *delaystore.StoredMessage, attempt uint32, reason string) error {
	if p.fence != nil && !p.fence() {
		return errFenced
	}
	if p.tracer != nil {
		p.tracer.forget(key)
	}
	return p.publish(deadLetterMsg(subject, key, msg, attempt, reason))
}

// Flush publishes a marker and waits for it to come back on the ack
// subscription. The server processes a connection's publishes in order and
// queues its 503 answers before the marker, and the subscription handles
// messages in order, so every no-responders notice for earlier deliveries
// has been handled when the marker arrives.
func (p *publisher) Flush(ctx context.Context) error {
	n := p.seq.Add(1)
	ch := make(chan struct{})
	p.mu.Lock()
	p.waiting[n] = ch
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.waiting, n)
		p.mu.Unlock()
	}()
	if err := p.nc.Publish(p.markerPrefix+strconv.FormatUint(n, 10), nil); err != nil {
		return fmt.Errorf("bridge: flush: %w", err)
	}
	if err := p.nc.FlushWithContext(ctx); err != nil {
		return fmt.Errorf("bridge: flush: %w", err)
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("bridge: flush: waiting for the marker: %w", ctx.Err())
	}
}

// marker handles a message on the marker prefix; it reports whether subject
// was one.
func (p *publisher) marker(subject string) bool {
	if len(subject) <= len(p.markerPrefix) || subject[:len(p.markerPrefix)] != p.markerPrefix {
		return false
	}
	n, err := strconv.ParseUint(subject[len(p.markerPrefix):], 10, 64)
	if err != nil {
		return true
	}
	p.mu.Lock()
	ch := p.waiting[n]
	delete(p.waiting, n)
	p.mu.Unlock()
	if ch != nil {
		close(ch)
	}
	return true
}

// deadLetterExtraLen is what a dead letter's header adds to its delivery's:
// Delay-Subject and a Delay-Reason of reasonLen bytes.
func deadLetterExtraLen(subject string, reasonLen int) int {
	// Every delivery has a Nats-Msg-Id, the tag or the publisher's.
	return len(deadLetterIDSuffix) + len(wire.HeaderSubject) + len(textproto.TrimString(subject)) + len(": \r\n") +
		len(wire.HeaderReason) + reasonLen + len(": \r\n")
}

// duplicateReply is the JSON of wire.ScheduleReply for a resend within
// the duplicate window: the first answer, marked as a duplicate.
func duplicateReply(res delaystore.Outcome, subject string) []byte {
	body, _ := json.Marshal(wire.ScheduleReply{Tag: res.Key.Tag(), Subject: subject, FireAt: formatTime(res.FireAtNs), Duplicate: true})
	return body
}

// foldedReply is the JSON of wire.ScheduleReply for a throttled message
// folded into the delivery already planned.
func foldedReply(res delaystore.Outcome, subject string) []byte {
	body, _ := json.Marshal(wire.ScheduleReply{Tag: res.Key.Tag(), Subject: subject, FireAt: formatTime(res.FireAtNs), Folded: true})
	return body
}

// scheduleReply is the JSON of wire.ScheduleReply for a scheduled message,
// as encoding/json writes it. The tag and time need no escaping, and most
// subjects none either: those are written directly, which saves
// encoding/json's reflection on every ingest; any other subject goes
// through encoding/json. TestScheduleReply_AsJSONMarshal holds the two
// to the same bytes.
func scheduleReply(k keys.Key, msg *delaystore.StoredMessage) []byte {
	return appendScheduleReply(nil, k, msg)
}

// appendScheduleReply appends scheduleReply(k, msg) to b.
func appendScheduleReply(b []byte, k keys.Key, msg *delaystore.StoredMessage) []byte {
	if !plainJSON(msg.Subject) {
		body, _ := json.Marshal(wire.ScheduleReply{Tag: k.Tag(), Subject: msg.Subject, FireAt: formatTime(msg.FireAtNs)})
		return append(b, body...)
	}
	b = slices.Grow(b, len(`{"tag":"","subject":"","fire_at":""}`)+keys.TagLen+len(msg.Subject)+timeLen)
	b = append(b, `{"tag":"`...)
	b = hex.AppendEncode(b, k[:])
	b = append(b, `","subject":"`...)
	b = append(b, msg.Subject...)
	b = append(b, `","fire_at":"`...)
	b = appendTime(b, msg.FireAtNs)
	return append(b, `"}`...)
}

// plainJSON reports whether encoding/json writes s as it is: printable
// ASCII without '"', '\\' and the characters it escapes for HTML.
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c >= 0x7f, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}
