package bridge

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/textproto"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"

	"natsdelay/bridge/wire"
	"natsdelay/delaystore"
	"natsdelay/dispatch"
	"natsdelay/keys"
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

	seq     atomic.Uint64
	mu      sync.Mutex
	waiting map[uint64]chan struct{}
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

func formatTime(ns int64) string { return time.Unix(0, ns).UTC().Format(wire.TimeLayout) }

// deliveryHeader rebuilds the stored headers and adds the delivery
// headers. The service's own headers replace stored ones of the same name
// in any case, which ingest refuses now but older versions stored.
func deliveryHeader(key keys.Key, msg *delaystore.StoredMessage, attempt uint32, extra int) nats.Header {
	h := make(nats.Header, len(msg.Headers)+8+extra)
	for _, kv := range msg.Headers {
		if isOwnHeader(kv.Name) {
			continue
		}
		h[kv.Name] = kv.Values
	}
	h[wire.HeaderTag] = []string{key.Tag()}
	h[wire.HeaderAttempt] = []string{strconv.FormatUint(uint64(attempt), 10)}
	h[wire.HeaderFireAt] = []string{formatTime(msg.FireAtNs)}
	h[wire.HeaderEnqueuedAt] = []string{formatTime(msg.EnqueuedAtNs)}
	if msg.ClientId != "" {
		h[wire.HeaderID] = []string{msg.ClientId}
	}
	if r := msg.GetRecurrence(); r != nil {
		if r.Id != "" {
			h[wire.HeaderID] = []string{r.Id}
		}
		h[wire.HeaderSchedule] = []string{scheduleSpec(r)}
		h[wire.HeaderOccurrence] = []string{formatTime(r.OccurrenceNs)}
		if r.Planned && r.NextNs != 0 {
			h[wire.HeaderNext] = []string{formatTime(r.NextNs)}
		}
	}
	return h
}

// scheduleSpec is the Delay-Schedule of an occurrence: the cron spec as
// given, or @every and the interval.
func scheduleSpec(r *delaystore.Recurrence) string {
	if r.Cron != "" {
		return r.Cron
	}
	return "@every " + time.Duration(r.EveryNs).String()
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
	return &nats.Msg{Subject: subject, Header: h, Data: msg.Payload}
}

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
	n := len(subject) + 1 + len(strconv.Itoa(hdrLen)) + 1 + len(strconv.Itoa(total))
	if reply != "" {
		n += len(reply) + 1
	}
	return n
}

// checkLine returns an error wrapping ErrTooLarge if publishing m would
// exceed maxControlLine.
func checkLine(m *nats.Msg, maxControlLine int) error {
	hl := headerLen(m.Header)
	if n := controlLineLen(m.Subject, m.Reply, hl, hl+len(m.Data)); n > maxControlLine {
		return fmt.Errorf("%w: a %d-byte subject makes the protocol line %d bytes, %d over the server's max_control_line of %d",
			ErrTooLarge, len(m.Subject), n, n-maxControlLine, maxControlLine)
	}
	return nil
}

// publish publishes m unless it is too large for the server: a protocol
// line over max_control_line would make the server close the connection,
// and more than max_payload is refused by nats.go. Either way it returns
// an error wrapping ErrTooLarge, and the dispatcher treats the message as
// not published.
func (p *publisher) publish(m *nats.Msg) error {
	if err := checkLine(m, p.maxControlLine); err != nil {
		return err
	}
	err := p.nc.PublishMsg(m)
	switch {
	case errors.Is(err, nats.ErrMaxPayload):
		return fmt.Errorf("%w: %d bytes of headers and payload, over the server's max_payload of %d (%w)",
			ErrTooLarge, headerLen(m.Header)+len(m.Data), p.nc.MaxPayload(), err)
	case errors.Is(err, nats.ErrBadHeaderMsg):
		// A header name nats.go will not send (stored by an older
		// version, before ingest refused it): it never will.
		return fmt.Errorf("a header name cannot be published (%w): %w", err, dispatch.ErrUndeliverable)
	}
	return err
}

func (p *publisher) Deliver(key keys.Key, msg *delaystore.StoredMessage, attempt uint32) error {
	return p.publish(deliveryMsg(p.ackPrefix, key, msg, attempt))
}

func (p *publisher) DeadLetter(subject string, key keys.Key, msg *delaystore.StoredMessage, attempt uint32, reason string) error {
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
