// Package wire is the vocabulary of natsdelay's wire protocol (see
// docs/protocol.md): the subjects, the header names, the answers a
// consumer sends to a delivery, the bodies of the API's requests and
// replies, and the error replies with their codes. The service (package
// bridge), the client commands and the bench all speak it from here.
//
// Clients import only this small, NATS-free package, not the service. It
// owns every type it sends and imports nothing of the project, so a
// program that only schedules and consumes links none of the service's
// storage or dispatch. It starts no goroutines.
package wire

// ServiceName is the name under which natsdelay registers as a NATS micro
// service: nats micro info natsdelay.
const ServiceName = "natsdelay"

// Subjects and header names. The subject prefixes are defaults; the
// service's configuration can move them.
const (
	// DefaultIngestPrefix is prepended to a target subject to schedule a
	// message for it: delay.orders.reminder schedules for orders.reminder.
	DefaultIngestPrefix = "delay"
	// DefaultAckPrefix is the prefix of delivery reply subjects: a delivery
	// with tag T has the reply subject $DELAY.ACK.T. A message sent to the
	// prefix itself acknowledges the tag in its Delay-Tag header.
	DefaultAckPrefix = "$DELAY.ACK"
	// DefaultAPIPrefix is the prefix of the request/reply API. The verbs
	// below are the last token of its subjects: $DELAY.API.INFO.
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
	// HeaderEvery makes the message recurring: a Go duration, at least
	// 100ms, between occurrences.
	HeaderEvery = "Delay-Every"
	// HeaderCron makes the message recurring on a cron spec: 5 fields
	// (minutes), 6 (seconds first), or @yearly @monthly @weekly @daily
	// @hourly.
	HeaderCron = "Delay-Cron"
	// HeaderTZ is the IANA zone of HeaderCron; UTC by default.
	HeaderTZ = "Delay-TZ"
	// HeaderUntil ends a recurring schedule: no occurrence after it.
	HeaderUntil = "Delay-Until"
	// HeaderLimit ends a recurring schedule after that many occurrences.
	HeaderLimit = "Delay-Limit"
	// HeaderCatchUp says what becomes of occurrences missed while the
	// service was down: one (default), all or none.
	HeaderCatchUp = "Delay-Catch-Up"
	// HeaderOverlap ties an occurrence to the answer of the one before:
	// allow (default), skip or buffer-one.
	HeaderOverlap = "Delay-Overlap"
	// HeaderExclude lists dates (2026-12-25) and date ranges
	// (2027-02-01..2027-02-07), in the schedule's zone, on which a
	// recurring schedule plans no occurrence.
	HeaderExclude = "Delay-Exclude"
	// HeaderJitter spreads each occurrence of a recurring schedule over
	// [t, t+jitter) after its planned time t, by an offset fixed for t.
	HeaderJitter = "Delay-Jitter"
	// HeaderDebounce, with HeaderID, debounces the (subject, id): each
	// publish moves the fire time to that long after it and replaces the
	// payload and headers.
	HeaderDebounce = "Delay-Debounce"
	// HeaderDebounceMax bounds a debounce: the message fires at the
	// latest that long after the first publish of the burst.
	HeaderDebounceMax = "Delay-Debounce-Max"
	// HeaderThrottle, with HeaderID, throttles the (subject, id): at most
	// one delivery per that long; a publish while the next delivery is
	// held folds into it, replacing its payload and headers.
	HeaderThrottle = "Delay-Throttle"

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
	// HeaderSchedule is an occurrence's schedule: the Delay-Cron spec, or
	// @every and the Delay-Every interval.
	HeaderSchedule = "Delay-Schedule"
	// HeaderOccurrence is an occurrence's planned time, RFC 3339 with
	// milliseconds.
	HeaderOccurrence = "Delay-Occurrence"
	// HeaderNext is the planned time of the next occurrence, RFC 3339
	// with milliseconds; absent on the last.
	HeaderNext = "Delay-Next"

	// HeaderTraceParent and HeaderTraceState are W3C Trace Context's
	// headers. They are the publisher's, kept with the message as any
	// other header and read in any case; with tracing on (serve --otel)
	// a delivery carries, in this lowercase spelling, those of the span
	// that delivered it instead.
	HeaderTraceParent = "traceparent"
	HeaderTraceState  = "tracestate"

	// HeaderServiceError and HeaderServiceErrorCode carry errors in the NATS
	// micro convention.
	HeaderServiceError     = "Nats-Service-Error"
	HeaderServiceErrorCode = "Nats-Service-Error-Code"

	// ReservedPrefix starts every header name of the protocol but Delay, in
	// any case: ingest refuses names in it that it does not know.
	ReservedPrefix = "Delay-"

	// TimeLayout is how times are written in headers and replies: RFC 3339
	// with milliseconds, in UTC.
	TimeLayout = "2006-01-02T15:04:05.000Z07:00"
)

// API verbs: the last token of the API's subjects.
const (
	VerbInfo      = "INFO"
	VerbGet       = "GET"
	VerbList      = "LIST"
	VerbCancel    = "CANCEL"
	VerbSubjects  = "SUBJECTS"
	VerbSchedules = "SCHEDULES"
	// VerbReschedule moves a pending message to another fire time
	// (RescheduleRequest); VerbFire makes it due now (MessageRef).
	VerbReschedule = "RESCHEDULE"
	VerbFire       = "FIRE"
	// VerbBulk is the prefix of the bulk verbs (BulkRequest), each with
	// one of the BulkVerbs after it: BULK.CANCEL and so on.
	VerbBulk = "BULK"
	// VerbDeadList lists dead letters (DeadListRequest); VerbDeadGet
	// returns one, by tag (MessageRef).
	VerbDeadList = "DEAD.LIST"
	VerbDeadGet  = "DEAD.GET"
	// VerbClusterStatus is answered by every node of a cluster, the
	// followers too, each with its own NodeStatus: a requester that
	// gathers replies sees them all.
	VerbClusterStatus = "CLUSTER.STATUS"
	// VerbClusterAdd adds a voting member (ClusterAddRequest); the leader
	// answers.
	VerbClusterAdd = "CLUSTER.ADD"
	// VerbClusterRemove removes a member (ClusterRemoveRequest); the
	// leader answers.
	VerbClusterRemove = "CLUSTER.REMOVE"
)

// BulkVerbs are the verbs of BULK.<verb>: CANCEL, RESCHEDULE and FIRE of
// pending messages, REPLAY and DELETE of dead letters.
var BulkVerbs = []string{"CANCEL", "RESCHEDULE", "FIRE", "REPLAY", "DELETE"}

// Answers to a delivery, as a consumer sends them (the JetStream ack
// vocabulary), and the service's reply to an answer sent as a request.
const (
	// AnswerAck settles the message: it is deleted. An empty answer is
	// the same.
	AnswerAck = "+ACK"
	// AnswerNak asks for a redelivery, optionally after a delay:
	// "-NAK 5s" or `-NAK {"delay": 5000000000}`.
	AnswerNak = "-NAK"
	// AnswerProgress (work in progress) restarts the ack wait.
	AnswerProgress = "+WPI"
	// AnswerTerm ends the message without a redelivery: "+TERM [reason]".
	AnswerTerm = "+TERM"
	// ReplyOK is the service's reply to an answer it applied, or that
	// came too late to matter.
	ReplyOK = "+OK"
)
