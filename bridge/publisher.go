package bridge

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

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
	// markerPrefix is the subject of flush markers, under the ack prefix so
	// they arrive on the ack subscription after every 503 sent before them.
	markerPrefix string

	seq     atomic.Uint64
	mu      sync.Mutex
	waiting map[uint64]chan struct{}
}

var _ dispatch.Publisher = (*publisher)(nil)

func newPublisher(nc *nats.Conn, ackPrefix string) *publisher {
	return &publisher{
		nc:           nc,
		ackPrefix:    ackPrefix,
		markerPrefix: ackPrefix + ".flush." + nats.NewInbox()[len(nats.InboxPrefix):] + ".",
		waiting:      make(map[uint64]chan struct{}),
	}
}

func formatTime(ns int64) string { return time.Unix(0, ns).UTC().Format(timeLayout) }

// deliveryHeader rebuilds the stored headers and adds the delivery
// headers. The service's own headers replace stored ones of the same name
// in any case, which ingest refuses now but older versions stored.
func deliveryHeader(key keys.Key, msg *delaystore.StoredMessage, attempt uint32, extra int) nats.Header {
	h := make(nats.Header, len(msg.Headers)+5+extra)
	for _, kv := range msg.Headers {
		if isOwnHeader(kv.Name) {
			continue
		}
		h[kv.Name] = kv.Values
	}
	h[HeaderTag] = []string{key.Tag()}
	h[HeaderAttempt] = []string{strconv.FormatUint(uint64(attempt), 10)}
	h[HeaderFireAt] = []string{formatTime(msg.FireAtNs)}
	h[HeaderEnqueuedAt] = []string{formatTime(msg.EnqueuedAtNs)}
	if msg.ClientId != "" {
		h[HeaderID] = []string{msg.ClientId}
	}
	return h
}

// isOwnHeader reports whether name is, in any case, a header the service
// sets on deliveries or dead letters.
func isOwnHeader(name string) bool {
	if len(name) < len(HeaderTag) || !strings.EqualFold(name[:len(reservedPrefix)], reservedPrefix) {
		return false
	}
	for _, o := range ownHeaders {
		if strings.EqualFold(name, o) {
			return true
		}
	}
	return false
}

func (p *publisher) Deliver(key keys.Key, msg *delaystore.StoredMessage, attempt uint32) error {
	return p.nc.PublishMsg(&nats.Msg{
		Subject: msg.Subject,
		Reply:   p.ackPrefix + "." + key.Tag(),
		Header:  deliveryHeader(key, msg, attempt, 0),
		Data:    msg.Payload,
	})
}

func (p *publisher) DeadLetter(subject string, key keys.Key, msg *delaystore.StoredMessage, attempt uint32, reason string) error {
	h := deliveryHeader(key, msg, attempt, 2)
	h[HeaderSubject] = []string{msg.Subject}
	h[HeaderReason] = []string{reason}
	return p.nc.PublishMsg(&nats.Msg{Subject: subject, Header: h, Data: msg.Payload})
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
