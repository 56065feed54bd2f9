package dispatch

import (
	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/keys"
)

// Lifecycle is told what becomes of each message the dispatcher delivers
// or settles, for lifecycle events (bridge publishes them). Happened is
// called on the dispatcher's goroutines and on those of the callers of
// Ack, Cancel and Expire, never with a lock of the dispatcher held, and
// must not block: a slow Lifecycle would slow delivery. With no Lifecycle
// set (Config.Lifecycle nil) the dispatcher does no work for it at all.
type Lifecycle interface {
	Happened(e LifecycleEvent)
}

// LifecycleFunc adapts a function to Lifecycle.
type LifecycleFunc func(LifecycleEvent)

// Happened implements Lifecycle.
func (f LifecycleFunc) Happened(e LifecycleEvent) { f(e) }

// LifecycleKind is what happened to a message.
type LifecycleKind uint8

// The kinds of LifecycleEvent.
const (
	// Delivered: a delivery reached a subscriber, once the flush after it
	// told so (as Stats.Delivered counts it).
	Delivered LifecycleKind = iota + 1
	// Acked: a +ACK deleted it; told once the delete is committed.
	Acked
	// Naked: a -NAK put it back for a redelivery.
	Naked
	// Termed: a +TERM ended it; DeadLettered follows.
	Termed
	// Expired: its TTL passed; it is deleted (and, with
	// Config.DeadLetterExpired, DeadLettered follows).
	Expired
	// DeadLettered: it was published to the dead-letter subject, if one is
	// set, and its delete queued.
	DeadLettered
	// Canceled: Cancel deleted it; told once the delete is committed.
	Canceled
	// Skipped: an occurrence of a recurring schedule deleted unsent, by
	// its Delay-Overlap skip policy, the one before it being unanswered
	// (reason overlap), or by SCHEDULE.SKIP (reason skip); told once the
	// delete is committed.
	Skipped
)

// LifecycleEvent is one thing that happened to the message under Key.
// Its strings are the dispatcher's and must not be modified.
type LifecycleEvent struct {
	Kind LifecycleKind
	Key  keys.Key
	// Subject, ID (the Delay-Id) and FireAtNs are the message's.
	Subject  string
	ID       string
	FireAtNs int64
	// Attempt is the delivery the event is about, or the deliveries
	// counted so far.
	Attempt uint32
	// Reason is a dead letter's reason, or the reason a +TERM gave.
	Reason string
	// AtNs is when it happened, Unix ns, when that is not the moment
	// Happened is called: a delivery is told once its flush returned,
	// and happened when it was published. 0 means now.
	AtNs int64
	// TraceID is the trace of the publish that scheduled the message,
	// from its traceparent header; zero when it carried none.
	TraceID [16]byte
}

// about is what lifecycle events tell of a message, kept with its flight
// while Config.Lifecycle is set, so that an answer to its delivery can be
// told without reading the message again.
type about struct {
	subject, id string
	fireAtNs    int64
	traceID     [16]byte
}

// aboutOf is what lifecycle events tell of msg, or nil when nobody is
// told: the flight then carries nothing for them.
func (d *Dispatcher) aboutOf(msg *delaystore.StoredMessage) *about {
	if d.cfg.Lifecycle == nil {
		return nil
	}
	return &about{subject: msg.Subject, id: msg.ClientId, fireAtNs: msg.FireAtNs, traceID: msg.TraceID()}
}

// happened tells the Lifecycle, if any, that kind happened to the message
// k, msg, at attempt.
func (d *Dispatcher) happened(kind LifecycleKind, k keys.Key, msg *delaystore.StoredMessage, attempt uint32, reason string) {
	if lc := d.cfg.Lifecycle; lc != nil && msg != nil {
		lc.Happened(LifecycleEvent{Kind: kind, Key: k, Subject: msg.Subject, ID: msg.ClientId, FireAtNs: msg.FireAtNs, Attempt: attempt, Reason: reason,
			TraceID: msg.TraceID()})
	}
}

// happenedTo is happened for a message known by its flight's about (nil
// when the message was read instead, or nobody is told).
func (d *Dispatcher) happenedTo(kind LifecycleKind, k keys.Key, a *about, attempt uint32, reason string) {
	if lc := d.cfg.Lifecycle; lc != nil && a != nil {
		lc.Happened(LifecycleEvent{Kind: kind, Key: k, Subject: a.subject, ID: a.id, FireAtNs: a.fireAtNs, Attempt: attempt, Reason: reason,
			TraceID: a.traceID})
	}
}

// aboutKey is what lifecycle events tell of the message under k when no
// flight knows it (an answer to a delivery of an earlier process, a
// cancel), and the deliveries counted: it is read, before whatever settles
// it deletes it. Nil when nobody is told or it is gone. mu must not be
// held.
func (d *Dispatcher) aboutKey(k keys.Key) (*about, uint32) {
	if d.cfg.Lifecycle == nil {
		return nil, 0
	}
	msg, err := d.repo.Get(k)
	if err != nil {
		return nil, 0
	}
	return &about{subject: msg.Subject, id: msg.ClientId, fireAtNs: msg.FireAtNs, traceID: msg.TraceID()}, max(msg.Attempt, d.Attempt(k))
}

// answeredLocked is what lifecycle events tell of k, answered now: its
// flight's about and the attempt answered. tell is false when nobody is
// told, or k is settling already, so that only the first answer to settle
// it is told; about is nil (and tell true) when no flight knows k, which
// aboutKey then reads. mu must be held, before k is marked settling.
func (d *Dispatcher) answeredLocked(k keys.Key) (ab *about, attempt uint32, tell bool) {
	if d.cfg.Lifecycle == nil {
		return nil, 0, false
	}
	if d.mu.flights.isCanceled(k) {
		return nil, 0, false
	}
	f := d.mu.flights.byKey[k]
	if f == nil {
		return nil, 0, true
	}
	return f.about, f.attempt, f.state != stateSettling
}
