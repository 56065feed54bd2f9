package events

import (
	"cmp"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/keys"
)

// Kind is the kind of a lifecycle event; its String is the wire name.
type Kind uint8

// The kinds of event, as wire.EventKinds lists them.
const (
	Scheduled Kind = iota + 1
	Delivered
	Acked
	Nak
	Term
	Expired
	Dead
	Canceled
	Rescheduled
	Replayed
	Skipped
)

// kindNames are the wire names, indexed by Kind.
var kindNames = [...]string{
	Scheduled: wire.EventScheduled, Delivered: wire.EventDelivered, Acked: wire.EventAcked, Nak: wire.EventNak,
	Term: wire.EventTerm, Expired: wire.EventExpired, Dead: wire.EventDead, Canceled: wire.EventCanceled,
	Rescheduled: wire.EventRescheduled, Replayed: wire.EventReplayed, Skipped: wire.EventSkipped,
}

// String returns the kind's wire name, or "" for a kind that is not one.
func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return ""
}

// Event is one lifecycle event, as its emitter tells it. Its strings are
// kept until the event is published; they must not be modified.
type Event struct {
	Kind Kind
	// Tag is the message's key.
	Tag keys.Key
	// Subject is the message's target subject; the event goes to
	// <prefix>.<kind>.<Subject>.
	Subject string
	// ID is its Delay-Id, if any.
	ID string
	// Attempt is the delivery the event is about, or the deliveries so
	// far.
	Attempt uint32
	// FireAt is its fire time; for Rescheduled, the new one.
	FireAt time.Time
	// At is when it happened; zero means when Emit is called.
	At time.Time
	// Reason is why, for Dead and Term.
	Reason string
	// PreviousFireAt is, for Rescheduled, the fire time before the move.
	PreviousFireAt time.Time
	// To is, for Replayed, the subject a dead letter was sent to when it
	// is not its own.
	To string
	// TraceID is the trace of the publish that scheduled the message,
	// from its traceparent header; zero when it carried none.
	TraceID [16]byte
}

// Of is the event kind of msg, the message under k, at attempt.
func Of(kind Kind, k keys.Key, msg *delaystore.StoredMessage, attempt uint32) Event {
	return Event{Kind: kind, Tag: k, Subject: msg.Subject, ID: msg.ClientId, Attempt: attempt, FireAt: time.Unix(0, msg.FireAtNs),
		TraceID: msg.TraceID()}
}

// Conn is what the Publisher needs of a NATS connection: *nats.Conn. A
// Publish should not wait for the server (nats.go's buffers it).
type Conn interface {
	Publish(subject string, data []byte) error
}

// Config configures a Publisher. A zero field means the default.
type Config struct {
	// Prefix is the subject prefix of events. Default
	// wire.DefaultEventPrefix.
	Prefix string
	// Buffer bounds the events queued for publishing; when it is full,
	// Emit drops the event and counts it. Its memory, about 200 bytes an
	// event, is taken at New. Default 8192.
	Buffer int
	// Fence, if set, reports whether this process may publish now (on a
	// node of a cluster, whether it holds the leadership lease); an event
	// taken from the queue while it reports false is dropped and counted
	// in Stats.Fenced. Nil: always.
	Fence func() bool
	// Now is the clock of Emit and of the warnings' rate limit; nil
	// means time.Now.
	Now func() time.Time
	// Logger receives logs; nil discards them.
	Logger *slog.Logger
}

// DefaultBuffer is the default of Config.Buffer.
const DefaultBuffer = 8192

// ErrInvalidConfig is wrapped by every error of Config.Validate.
var ErrInvalidConfig = errors.New("events: invalid config")

// Validate reports every bad setting at once.
func (c Config) Validate() error {
	var errs []error
	if c.Buffer < 0 {
		errs = append(errs, fmt.Errorf("%w: Buffer (%d) must be > 0", ErrInvalidConfig, c.Buffer))
	}
	return errors.Join(errs...)
}

// Stats are counters since New. Each is read atomically; together they
// are not a consistent snapshot.
type Stats struct {
	// Published counts events handed to the connection.
	Published uint64
	// Dropped counts events Emit found no room for, or got after or
	// during Close.
	Dropped uint64
	// Failed counts events the connection refused (closed, or its
	// reconnect buffer full while it reconnects).
	Failed uint64
	// Fenced counts events dropped because the fence was down when they
	// were to be published.
	Fenced uint64
}

// Publisher publishes lifecycle events without ever making its callers
// wait; see the package doc. A nil *Publisher is one that is off: its
// methods do nothing. It is safe for concurrent use.
type Publisher struct {
	conn   Conn
	fence  func() bool
	now    func() time.Time
	log    *slog.Logger
	prefix [len(kindNames)]string // "<prefix>.<kind>." by Kind

	// queue holds the events waiting to be published; bounded by
	// Config.Buffer: Emit drops when it is full.
	queue  chan Event
	closed atomic.Bool
	// stopped is set by the goroutine once it has drained the queue
	// after Close: an event queued after it is dropped by its Emit.
	stopped atomic.Bool

	// warn limits the warnings of failed publishes; the goroutine alone
	// uses it.
	warn warnLimit

	published, dropped, failed, fenced atomic.Uint64

	closeOnce sync.Once
	done      chan struct{}
	wg        sync.WaitGroup

	// beforeQueue, if set (by tests only), is called by Emit between its
	// check that p is open and its send to the queue.
	beforeQueue func()
}

// New starts a Publisher that publishes on conn, which it does not close.
// It starts one goroutine, which Close stops.
func New(conn Conn, cfg Config) (*Publisher, error) {
	err := cfg.Validate()
	if conn == nil {
		err = errors.Join(err, fmt.Errorf("%w: no connection", ErrInvalidConfig))
	}
	if err != nil {
		return nil, err
	}
	p := &Publisher{
		conn: conn, fence: cfg.Fence, now: cfg.Now, log: cfg.Logger,
		queue: make(chan Event, cmp.Or(cfg.Buffer, DefaultBuffer)), done: make(chan struct{}),
	}
	if p.now == nil {
		p.now = time.Now
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	p.log = p.log.With("component", "events")
	prefix := cmp.Or(cfg.Prefix, wire.DefaultEventPrefix)
	for k := Scheduled; int(k) < len(kindNames); k++ {
		p.prefix[k] = prefix + "." + k.String() + "."
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		p.run()
	}()
	return p, nil
}

// Emit queues e for publishing and returns at once: it reports false,
// and counts the event as dropped, when the queue is full or the
// Publisher closed. It never blocks. On a nil Publisher it does nothing
// and reports false.
func (p *Publisher) Emit(e Event) bool {
	if p == nil {
		return false
	}
	if e.Kind == 0 || int(e.Kind) >= len(kindNames) {
		panic(fmt.Sprintf("events: Emit of kind %d, which is none", e.Kind))
	}
	if e.At.IsZero() {
		e.At = p.now()
	}
	if p.closed.Load() {
		p.dropped.Add(1)
		return false
	}
	if p.beforeQueue != nil {
		p.beforeQueue()
	}
	select {
	case p.queue <- e:
	default:
		p.dropped.Add(1)
		return false
	}
	if p.stopped.Load() {
		// NB: Close ran between the check of closed above and the send,
		// and the goroutine has already drained the queue: nothing would
		// publish this event, so it is dropped and counted here.
		p.dropQueued()
		return false
	}
	return true
}

// dropQueued takes every event left in the queue and counts it dropped.
func (p *Publisher) dropQueued() {
	for {
		select {
		case <-p.queue:
			p.dropped.Add(1)
		default:
			return
		}
	}
}

// Stats returns the counters; zero on a nil Publisher.
func (p *Publisher) Stats() Stats {
	if p == nil {
		return Stats{}
	}
	return Stats{Published: p.published.Load(), Dropped: p.dropped.Load(), Failed: p.failed.Load(), Fenced: p.fenced.Load()}
}

// Close publishes what is queued, stops the goroutine and waits for it.
// Events emitted after it, or during it, are dropped and counted, unless
// the goroutine still publishes them. It is safe to call twice, and on a
// nil Publisher.
func (p *Publisher) Close() {
	if p == nil {
		return
	}
	p.closeOnce.Do(func() {
		p.closed.Store(true)
		close(p.done)
	})
	p.wg.Wait()
}

func (p *Publisher) run() {
	var body []byte
	for {
		select {
		case e := <-p.queue:
			body = p.publish(e, body[:0])
		case <-p.done:
			// NB: what was queued before Close is published. An Emit that
			// found p open before Close may still queue its event: if it
			// sends before stopped is set, the second drain publishes the
			// event; if after, that Emit sees stopped and drops it.
			body = p.drain(body)
			p.stopped.Store(true)
			p.drain(body)
			return
		}
	}
}

// drain publishes the events in the queue until it is empty, and returns
// buf for reuse.
func (p *Publisher) drain(buf []byte) []byte {
	for {
		select {
		case e := <-p.queue:
			buf = p.publish(e, buf[:0])
		default:
			return buf
		}
	}
}

// publish encodes e into buf and publishes it; it returns buf for reuse.
func (p *Publisher) publish(e Event, buf []byte) []byte {
	if p.fence != nil && !p.fence() {
		p.fenced.Add(1)
		return buf
	}
	buf = AppendBody(buf, e)
	if err := p.conn.Publish(p.prefix[e.Kind]+e.Subject, buf); err != nil {
		if ok, n := p.warn.allow(p.now()); ok {
			p.log.Warn("publishing a lifecycle event failed; events are best effort (natsdelay_events_dropped_total counts them)",
				"err", err, "suppressed", n)
		}
		// NB: counted after the warning is decided, so that a failure
		// Stats shows has been counted by the rate limit too.
		p.failed.Add(1)
		return buf
	}
	p.published.Add(1)
	return buf
}

// AppendBody appends the JSON body of e, a wire.Event, to b: what
// json.Marshal would write, without its reflection or its allocations.
func AppendBody(b []byte, e Event) []byte {
	b = append(b, `{"kind":"`...)
	b = append(b, e.Kind.String()...)
	b = append(b, `","tag":"`...)
	b = e.Tag.AppendTag(b)
	b = append(b, '"')
	if e.ID != "" {
		b = append(b, `,"id":`...)
		b = appendString(b, e.ID)
	}
	b = append(b, `,"subject":`...)
	b = appendString(b, e.Subject)
	b = append(b, `,"attempt":`...)
	b = appendUint(b, uint64(e.Attempt))
	b = append(b, `,"fire_at":"`...)
	b = e.FireAt.UTC().AppendFormat(b, wire.TimeLayout)
	b = append(b, `","at":"`...)
	b = e.At.UTC().AppendFormat(b, wire.TimeLayout)
	b = append(b, '"')
	if e.Reason != "" {
		b = append(b, `,"reason":`...)
		b = appendString(b, e.Reason)
	}
	if !e.PreviousFireAt.IsZero() {
		b = append(b, `,"previous_fire_at":"`...)
		b = e.PreviousFireAt.UTC().AppendFormat(b, wire.TimeLayout)
		b = append(b, '"')
	}
	if e.To != "" {
		b = append(b, `,"to":`...)
		b = appendString(b, e.To)
	}
	if e.TraceID != ([16]byte{}) {
		b = append(b, `,"trace_id":"`...)
		b = hex.AppendEncode(b, e.TraceID[:])
		b = append(b, '"')
	}
	return append(b, '}')
}

func appendUint(b []byte, v uint64) []byte {
	var d [20]byte
	i := len(d)
	for {
		i--
		d[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			break
		}
	}
	return append(b, d[i:]...)
}

// appendString appends s as a JSON string: quotes, backslashes and
// control characters escaped, and bytes that are not UTF-8 written as
// U+FFFD, as encoding/json does.
func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// warnInterval is the least time between two warnings of failed
// publishes: an outage fails every event, and is told once per interval.
const warnInterval = 10 * time.Second

// warnLimit lets one warning through per warnInterval and counts the
// ones it holds back. It is not safe for concurrent use.
type warnLimit struct {
	next       time.Time
	suppressed uint64
}

// allow reports whether a warning at now may be logged and, if so, how
// many were held back since the last one that was.
func (w *warnLimit) allow(now time.Time) (bool, uint64) {
	if now.Before(w.next) {
		w.suppressed++
		return false, 0
	}
	n := w.suppressed
	w.next, w.suppressed = now.Add(warnInterval), 0
	return true, n
}
