package bridge

// Subjects and header names of the wire protocol (docs/protocol.md). The
// subject prefixes are defaults; Config can move them.
const (
	// DefaultIngestPrefix is prepended to a target subject to schedule a
	// message for it: delay.orders.reminder schedules for orders.reminder.
	DefaultIngestPrefix = "delay"
	// DefaultAckPrefix is the prefix of delivery reply subjects: a delivery
	// with tag T has the reply subject $DELAY.ACK.T. A message sent to the
	// prefix itself acknowledges the tag in its Delay-Tag header.
	DefaultAckPrefix = "$DELAY.ACK"
	// DefaultAPIPrefix is the prefix of the request/reply API.
	DefaultAPIPrefix = "$DELAY.API"

	// HeaderDelay is the relative delay: a Go duration, whole days first
	// (7d, 1d12h), or integer milliseconds.
	HeaderDelay = "Delay"
	// HeaderAt is the absolute fire time: RFC 3339 or Unix seconds.
	HeaderAt = "Delay-At"
	// HeaderTTL is how long after the fire time an unACKed message expires.
	HeaderTTL = "Delay-TTL"
	// HeaderID is the publisher's id, unique per subject while pending.
	HeaderID = "Delay-Id"
	// HeaderAck is the ack policy: explicit (default) or none.
	HeaderAck = "Delay-Ack"
	// HeaderMaxDeliver is the number of deliveries before dead-lettering.
	HeaderMaxDeliver = "Delay-Max-Deliver"

	// HeaderTag is the delivery tag: the storage key as 48 hex characters.
	HeaderTag = "Delay-Tag"
	// HeaderAttempt is the delivery attempt, 1 for the first.
	HeaderAttempt = "Delay-Attempt"
	// HeaderFireAt is the scheduled fire time, RFC 3339 with milliseconds.
	HeaderFireAt = "Delay-Fire-At"
	// HeaderEnqueuedAt is when the service accepted the message.
	HeaderEnqueuedAt = "Delay-Enqueued-At"
	// HeaderSubject is a dead letter's original target subject.
	HeaderSubject = "Delay-Subject"
	// HeaderReason is why a message was dead-lettered.
	HeaderReason = "Delay-Reason"

	// HeaderServiceError and HeaderServiceErrorCode carry errors in the NATS
	// micro convention.
	HeaderServiceError     = "Nats-Service-Error"
	HeaderServiceErrorCode = "Nats-Service-Error-Code"

	// timeLayout is RFC 3339 with milliseconds, in UTC.
	timeLayout = "2006-01-02T15:04:05.000Z07:00"
)

// reservedPrefix starts every header name of the protocol but Delay, in any
// case: ingest refuses names in it that it does not know.
const reservedPrefix = "Delay-"

// controlHeaders are matched case-insensitively and never passed on.
var controlHeaders = []string{HeaderDelay, HeaderAt, HeaderTTL, HeaderID, HeaderAck, HeaderMaxDeliver}

// ownHeaders are the headers the service sets on deliveries and dead
// letters; they replace publisher headers of the same name in any case.
var ownHeaders = []string{HeaderTag, HeaderAttempt, HeaderFireAt, HeaderEnqueuedAt, HeaderID, HeaderSubject, HeaderReason}
