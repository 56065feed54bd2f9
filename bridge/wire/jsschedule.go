package wire

// JetStream's message schedules, accepted as nats-server takes them from
// a stream's publisher (docs/protocol.md, "JetStream's schedule
// headers"): a program that schedules with nats.go's jetstream.Publish
// and the WithSchedule options works against the service by publishing
// to <prefix>.<schedule subject> instead.
const (
	// DefaultJSSchedulePrefix is the prefix of schedule subjects:
	// $DELAY.JS.orders.daily is the schedule subject orders.daily.
	DefaultJSSchedulePrefix = "$DELAY.JS"
	// JSStreamName is the stream the PubAck of an accepted schedule names.
	JSStreamName = "DELAY"

	// HeaderJSSchedule is the schedule: @at <RFC 3339>, @every
	// <duration>, a cron spec of 6 fields (seconds first) or @yearly,
	// @annually, @monthly, @weekly, @daily, @midnight, @hourly.
	HeaderJSSchedule = "Nats-Schedule"
	// HeaderJSScheduleTarget is the subject each firing is published to.
	HeaderJSScheduleTarget = "Nats-Schedule-Target"
	// HeaderJSScheduleTimeZone is the IANA zone of a cron spec.
	HeaderJSScheduleTimeZone = "Nats-Schedule-Time-Zone"
	// HeaderJSScheduleTTL is the Nats-TTL each firing carries.
	HeaderJSScheduleTTL = "Nats-Schedule-TTL"
	// HeaderJSScheduleRollup is the Nats-Rollup each firing carries: sub.
	HeaderJSScheduleRollup = "Nats-Schedule-Rollup"
	// HeaderJSScheduleSource names a subject whose last message a firing
	// would carry; the service keeps no stream to read it from.
	HeaderJSScheduleSource = "Nats-Schedule-Source"
	// HeaderJSScheduler is, on a firing, the schedule subject; from a
	// publisher, with HeaderJSScheduleNext purge, the schedule to remove.
	HeaderJSScheduler = "Nats-Scheduler"
	// HeaderJSScheduleNext is, on a firing, the next firing's time
	// (RFC 3339) or purge after the last.
	HeaderJSScheduleNext = "Nats-Schedule-Next"
	// JSScheduleNextPurge is HeaderJSScheduleNext on the last firing.
	JSScheduleNextPurge = "purge"
)

// JetStream API error codes (nats-server's err_code) of schedules.
const (
	JSErrSchedulePatternInvalid   = 10189
	JSErrScheduleTargetInvalid    = 10190
	JSErrScheduleTTLInvalid       = 10191
	JSErrScheduleRollupInvalid    = 10192
	JSErrScheduleSourceInvalid    = 10203
	JSErrScheduleSchedulerInvalid = 10212
	JSErrScheduleTimeZoneInvalid  = 10223
)

// JSPubAck is the answer to a publish on the schedule prefix, as a
// stream answers one: the PubAck, or the JetStream API error.
type JSPubAck struct {
	Stream    string      `json:"stream"`
	Seq       uint64      `json:"seq"`
	Duplicate bool        `json:"duplicate,omitempty"`
	Error     *JSAPIError `json:"error,omitempty"`
}

// JSAPIError is a JetStream API error: the HTTP-like code, nats-server's
// err_code, and its words.
type JSAPIError struct {
	Code        int    `json:"code"`
	ErrCode     int    `json:"err_code,omitempty"`
	Description string `json:"description"`
}
