package wire

// DefaultEventPrefix is the prefix of lifecycle events, which a service
// started with events on publishes: an event of kind K about a message
// for subject S goes to $DELAY.EVENT.K.S, so $DELAY.EVENT.> tails them
// all and $DELAY.EVENT.*.orders.> those of orders.
const DefaultEventPrefix = "$DELAY.EVENT"

// Kinds of lifecycle events: the token after the event prefix, and
// Event.Kind.
const (
	// EventScheduled: a message was committed by ingest and answered.
	EventScheduled = "scheduled"
	// EventDelivered: a delivery reached a subscriber (attempt says which).
	EventDelivered = "delivered"
	// EventAcked: a +ACK (or a JetStream stream's PubAck) settled it.
	EventAcked = "acked"
	// EventNak: a -NAK asked for a redelivery.
	EventNak = "nak"
	// EventTerm: a +TERM ended it; a dead event follows.
	EventTerm = "term"
	// EventExpired: its Delay-TTL passed before an ACK; it was removed.
	EventExpired = "expired"
	// EventDead: it was dead-lettered (Reason says why) and removed.
	EventDead = "dead"
	// EventCanceled: CANCEL removed it.
	EventCanceled = "canceled"
	// EventRescheduled: its fire time was moved (PreviousFireAt was it).
	EventRescheduled = "rescheduled"
	// EventReplayed: a dead letter was sent again, to its subject or To.
	EventReplayed = "replayed"
	// EventSkipped: an occurrence of a recurring schedule was removed
	// unsent by its Delay-Overlap skip policy (Reason overlap) or by
	// SCHEDULE.SKIP (Reason skip).
	EventSkipped = "skipped"
)

// EventKinds lists every kind of lifecycle event, in the order of a
// message's life.
func EventKinds() []string {
	return []string{EventScheduled, EventDelivered, EventAcked, EventNak, EventTerm, EventExpired, EventDead,
		EventCanceled, EventRescheduled, EventReplayed, EventSkipped}
}

// Event is the JSON body of a lifecycle event. Times are written as
// TimeLayout writes them.
type Event struct {
	// Kind is one of the Event* kinds.
	Kind string `json:"kind"`
	// Tag is the message's delivery tag.
	Tag string `json:"tag"`
	// ID is its Delay-Id; absent when it has none.
	ID string `json:"id,omitempty"`
	// Subject is its target subject.
	Subject string `json:"subject"`
	// Attempt is the delivery the event is about (delivered, acked, nak,
	// term), or the deliveries made so far; 0 before the first.
	Attempt uint32 `json:"attempt"`
	// FireAt is the message's fire time: for rescheduled, the new one.
	FireAt string `json:"fire_at"`
	// At is when the service saw it happen.
	At string `json:"at"`
	// Reason is why, for dead (max-deliver, term: <reason>, expired,
	// undeliverable: ...) and for term (the consumer's reason, if it gave
	// one); absent otherwise.
	Reason string `json:"reason,omitempty"`
	// PreviousFireAt is, for rescheduled, the fire time before the move.
	PreviousFireAt string `json:"previous_fire_at,omitempty"`
	// To is, for replayed, the subject a dead letter was sent to when it
	// is not its own.
	To string `json:"to,omitempty"`
	// TraceID is the W3C trace id, 32 hex digits, of the publish that
	// scheduled the message, from the traceparent header it carried;
	// absent when it carried none.
	TraceID string `json:"trace_id,omitempty"`
}
