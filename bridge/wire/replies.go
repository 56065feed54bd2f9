package wire

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
)

// ScheduleReply is the body of the reply to an accepted message.
type ScheduleReply struct {
	Tag     string `json:"tag"`
	Subject string `json:"subject"`
	FireAt  string `json:"fire_at"`
	// Duplicate says the message was a resend within the duplicate
	// window: nothing was stored, and Tag and FireAt are the first
	// answer's (docs/protocol.md, section 1).
	Duplicate bool `json:"duplicate,omitempty"`
	// Folded says the message, throttled (Delay-Throttle), was folded
	// into the delivery its subject and id already had planned: it
	// replaced that message and is due at its time, FireAt.
	Folded bool `json:"folded,omitempty"`
}

// MessageRef names one pending message, in GET and CANCEL requests: by
// tag, or by subject and client id. Payload asks GET for the payload;
// CANCEL refuses it.
type MessageRef struct {
	Tag     string `json:"tag,omitempty"`
	Subject string `json:"subject,omitempty"`
	ID      string `json:"id,omitempty"`
	Payload bool   `json:"payload,omitempty"`
}

// ListRequest is the body of LIST: one page of a subject's pending
// messages, after the tag After. Limit nil means the service's default.
type ListRequest struct {
	Subject string `json:"subject"`
	Limit   *int   `json:"limit,omitempty"`
	After   string `json:"after,omitempty"`
}

// SubjectsRequest is the body of SUBJECTS: one page of the subjects with
// pending messages that match Filter (default ">"), after the subject
// After. Limit nil means the service's default.
type SubjectsRequest struct {
	Filter string `json:"filter,omitempty"`
	Limit  *int   `json:"limit,omitempty"`
	After  string `json:"after,omitempty"`
}

// CancelReply is the body of the reply to a CANCEL that deleted a message.
type CancelReply struct {
	Canceled bool `json:"canceled"`
}

// Counts are the numbers INFO reports. Pending comes from the subject
// registry and is exact across restarts; the time windows are counted from
// the keys, so they are exact to the time bucket.
type Counts struct {
	Pending    uint64 `json:"pending"`
	Subjects   int    `json:"subjects"`
	InFlight   uint64 `json:"in_flight"`
	DueNow     uint64 `json:"due_now"`
	NextMinute uint64 `json:"next_minute"`
	NextHour   uint64 `json:"next_hour"`
	NextDay    uint64 `json:"next_day"`
	// Schedules is the number of recurring schedules with an occurrence
	// still to come, from the schedule index.
	Schedules uint64 `json:"schedules"`
	// Dead is the number of dead letters kept (DEAD.LIST lists them).
	Dead uint64 `json:"dead"`
}

// MaxLimitedShown is how many limited subjects INFO names at most.
const MaxLimitedShown = 20

// InfoReply is the body of INFO.
type InfoReply struct {
	Version string `json:"version"`
	Engine  string `json:"engine"`
	// Storage is "ok", or "failing: <cause>" while the store has failed
	// and is being reopened; Counts are then zero.
	Storage string        `json:"storage"`
	Counts  Counts        `json:"counts"`
	Stats   Stats         `json:"stats"`
	Config  ConfigSummary `json:"config"`
	// Ingest counts what ingest did beyond storing, since the process
	// started (a node of a cluster counts only while it leads).
	Ingest IngestStats `json:"ingest"`
	// LimitedSubjects names up to MaxLimitedShown subjects at their
	// in-flight limit with more due, in subject order; Stats counts them
	// all (subjects_limited).
	LimitedSubjects []string `json:"limited_subjects,omitempty"`
	// Cluster is set when the service runs as a node of a cluster.
	Cluster *ClusterInfo `json:"cluster,omitempty"`
}

// Stats are the service's counters that INFO reports, since the process
// started (a node of a cluster counts only while it leads). They are
// read one by one; together they are not a consistent snapshot.
type Stats struct {
	// Delivered counts first deliveries that reached a subscriber: the
	// server took them and did not answer no responders. Redelivered
	// counts the same for attempts after the first.
	Delivered   uint64 `json:"delivered"`
	Redelivered uint64 `json:"redelivered"`
	// Acked counts the +ACKs that settled a pending message; Nacked,
	// Progress and Termed the -NAK, +WPI and +TERM answers.
	Acked    uint64 `json:"acked"`
	Nacked   uint64 `json:"nacked"`
	Progress uint64 `json:"progress"`
	Termed   uint64 `json:"termed"`
	// Failed counts attempts the consumer reported as failed: a JetStream
	// stream's error answer.
	Failed       uint64 `json:"failed"`
	DeadLettered uint64 `json:"dead_lettered"`
	Expired      uint64 `json:"expired"`
	Canceled     uint64 `json:"canceled"`
	// NoResponders counts deliveries that reached no subscriber (not
	// attempts).
	NoResponders uint64 `json:"no_responders"`
	// Undeliverable counts messages the server refused for good, each
	// dead-lettered or parked.
	Undeliverable uint64 `json:"undeliverable"`
	// Evicted counts long-waiting deliveries evicted from a full
	// in-flight window to make room for first deliveries.
	Evicted uint64 `json:"evicted"`
	// Skipped counts occurrences of recurring schedules that were missed
	// and not delivered, under Delay-Catch-Up none.
	Skipped uint64 `json:"skipped"`
	// PlannedAhead counts occurrences planned before they fell due, and
	// PlannedOnDelivery those planned by the pass that delivered them.
	PlannedAhead      uint64 `json:"planned_ahead"`
	PlannedOnDelivery uint64 `json:"planned_on_delivery"`
	// Withdrawn counts occurrences planned ahead and then not sent: their
	// schedule was canceled or replaced by Delay-Id before they fell due.
	Withdrawn uint64 `json:"withdrawn"`
	// Fenced counts deliveries held back because the node did not hold
	// its cluster's leadership lease at the moment of publishing; each
	// goes out later, unchanged.
	Fenced uint64 `json:"fenced"`
	// FencedPasses counts the dispatcher's turns skipped because the node
	// did not hold the lease of the leadership it serves in.
	FencedPasses uint64 `json:"fenced_passes"`
	// HandedOff counts messages due when their batch committed that went
	// to the next delivery pass with no read of the store.
	HandedOff uint64 `json:"handed_off"`
	// StagedPasses counts the delivery passes of bursts of recurring
	// occurrences read before the burst fell due and published at its
	// time.
	StagedPasses uint64 `json:"staged_passes"`
	// InFlight is a gauge: deliveries waiting for an answer.
	InFlight uint64 `json:"in_flight"`
	// Topics is a gauge: the subjects with messages due or in flight, or
	// backing off.
	Topics uint64 `json:"topics"`
	// Limited is a gauge: the subjects at their in-flight limit with
	// more due.
	Limited uint64 `json:"subjects_limited"`
	// Paused is a gauge: the subjects held back by a pause with messages
	// due.
	Paused uint64 `json:"subjects_paused"`
}

// IngestStats are ingest's counters in INFO.
type IngestStats struct {
	// ThrottleFolded counts throttled publishes (Delay-Throttle) folded
	// into the delivery their subject and id already had planned.
	ThrottleFolded uint64 `json:"throttle_folded"`
}

// ConfigSummary is the configuration INFO reports.
type ConfigSummary struct {
	IngestPrefix      string   `json:"ingest_prefix"`
	AckPrefix         string   `json:"ack_prefix"`
	APIPrefix         string   `json:"api_prefix"`
	AckWait           string   `json:"ack_wait"`
	MaxDeliver        uint32   `json:"max_deliver"`
	Backoff           []string `json:"backoff"`
	DeadLetterSubject string   `json:"dead_letter_subject"`
	DeadLetterExpired bool     `json:"dead_letter_expired"`
	DeadRetention     string   `json:"dead_retention"`
	TimeBucket        string   `json:"time_bucket"`
	MaxPayload        int      `json:"max_payload"`
	MaxControlLine    int      `json:"max_control_line"`
}

// MessageInfo describes one pending message in GET and LIST replies.
type MessageInfo struct {
	Tag        string              `json:"tag"`
	Subject    string              `json:"subject"`
	ID         string              `json:"id,omitempty"`
	FireAt     string              `json:"fire_at"`
	EnqueuedAt string              `json:"enqueued_at"`
	ExpireAt   string              `json:"expire_at,omitempty"`
	Attempt    uint32              `json:"attempt"`
	Ack        string              `json:"ack"`
	MaxDeliver uint32              `json:"max_deliver,omitempty"`
	Size       int                 `json:"size"`
	Headers    map[string][]string `json:"headers,omitempty"`
	// Schedule is set on an occurrence of a recurring schedule.
	Schedule *ScheduleInfo `json:"schedule,omitempty"`
	// DebounceFirst is set on a debounced message (Delay-Debounce): when
	// the first publish of its burst was accepted; DebounceMax is its
	// Delay-Debounce-Max, if any.
	DebounceFirst string `json:"debounce_first,omitempty"`
	DebounceMax   string `json:"debounce_max,omitempty"`
	// Throttle is set on a throttled message (Delay-Throttle): its window.
	Throttle string `json:"throttle,omitempty"`
	// Payload is set only when asked for. NB: omitzero, not omitempty:
	// omitempty would drop an empty payload that was asked for, and the
	// client could not tell it from one that was not.
	Payload []byte `json:"payload,omitzero"`
}

// ListReply is the body of LIST.
type ListReply struct {
	Subject  string        `json:"subject"`
	Messages []MessageInfo `json:"messages"`
	// Next is the tag to pass as "after" for the next page; empty on the last.
	Next string `json:"next,omitempty"`
}

// SubjectInfo is one subject in a SUBJECTS reply.
type SubjectInfo struct {
	Subject string `json:"subject"`
	// Pending is the subject's pending messages, from the registry.
	Pending uint64 `json:"pending"`
	// DueNow is how many of them are due, exact to the time bucket as
	// INFO's due_now is. Subjects whose topic hashes collide share a
	// key range, and each is given the due count of both.
	DueNow uint64 `json:"due_now"`
	// InFlight is how many of them are delivered and not yet settled.
	InFlight int `json:"in_flight"`
	// Limited is set while the subject is at its in-flight limit with
	// more due: its next deliveries wait for answers to those in flight.
	Limited bool `json:"limited"`
	// Dead is the subject's dead letters kept. A subject with dead
	// letters and nothing pending is listed too.
	Dead uint64 `json:"dead"`
	// PausedBy is the pattern whose limit pauses the subject (PAUSE):
	// none of its messages is delivered until RESUME. Empty when it is
	// not paused.
	PausedBy string `json:"paused_by,omitempty"`
}

// SubjectsReply is the body of SUBJECTS.
type SubjectsReply struct {
	Filter   string        `json:"filter"`
	Subjects []SubjectInfo `json:"subjects"`
	// Next is the subject to pass as "after" for the next page; empty on
	// the last.
	Next string `json:"next,omitempty"`
}

// ScheduleInfo describes the recurring schedule of an occurrence, in GET,
// LIST and SCHEDULES replies.
type ScheduleInfo struct {
	// Name names the schedule in GET and CANCEL ("id" with "subject"):
	// its Delay-Id, or the tag of its first occurrence.
	Name string `json:"name"`
	// Spec is the Delay-Schedule: the cron spec, or @every and the interval.
	Spec    string `json:"spec"`
	Zone    string `json:"zone"`
	Until   string `json:"until,omitempty"`
	Limit   uint64 `json:"limit,omitempty"`
	CatchUp string `json:"catch_up"`
	// Occurrence is this occurrence's planned time, and Seq its number.
	Occurrence string `json:"occurrence"`
	Seq        uint64 `json:"seq"`
	// Fired counts the occurrences delivered so far, this one included
	// once it went out; Skipped those skipped by Delay-Catch-Up none or
	// Delay-Overlap skip.
	Fired   uint64 `json:"fired"`
	Skipped uint64 `json:"skipped"`
	// Next are when the next occurrences not yet delivered go out, up to
	// 5 or the "upcoming" asked for, this occurrence's first when it has
	// not gone out yet; empty at the end. Excluded dates and skipped
	// occurrences are left out, and the jitter is applied.
	Next []string `json:"next"`
	// Paused says the schedule is paused (SCHEDULE.PAUSE): it plans
	// nothing, and Next is empty, until it is resumed.
	Paused bool `json:"paused,omitempty"`
	// Overlap is the Delay-Overlap policy, skip or buffer-one; empty for
	// allow.
	Overlap string `json:"overlap,omitempty"`
	// Skip is how many of the next occurrences SCHEDULE.SKIP has still
	// to skip; Next leaves them out.
	Skip uint64 `json:"skip,omitempty"`
	// Exclude is the Delay-Exclude dates, sorted and merged.
	Exclude string `json:"exclude,omitempty"`
	// Jitter is the Delay-Jitter; Next holds the times with it applied.
	Jitter string `json:"jitter,omitempty"`
	// JSScheduler is, for a schedule taken in on the JetStream schedule
	// prefix, its schedule subject (and Spec its Nats-Schedule).
	JSScheduler string `json:"js_scheduler,omitempty"`
}

// SchedulesRequest is the body of SCHEDULES: one page of the recurring
// schedules, of Subject only when it is set, after the cursor After (the
// Next of the previous page). Limit nil means the service's default.
type SchedulesRequest struct {
	Subject string `json:"subject,omitempty"`
	Limit   *int   `json:"limit,omitempty"`
	After   string `json:"after,omitempty"`
	// Upcoming is how many next times each schedule shows, up to
	// MaxUpcoming; 0 means DefaultUpcoming.
	Upcoming int `json:"upcoming,omitempty"`
}

// GetRequest is the body of GET: the message, and for an occurrence of a
// recurring schedule how many next times to show (Upcoming, up to
// MaxUpcoming; 0 means DefaultUpcoming).
type GetRequest struct {
	MessageRef
	Upcoming int `json:"upcoming,omitempty"`
}

// DefaultUpcoming and MaxUpcoming bound the next times a schedule shows
// in GET and SCHEDULES.
const (
	DefaultUpcoming = 5
	MaxUpcoming     = 100
)

// SchedulesReply is the body of SCHEDULES: each schedule as its next
// occurrence, in (subject, name) order.
type SchedulesReply struct {
	Subject   string        `json:"subject,omitempty"`
	Schedules []MessageInfo `json:"schedules"`
	// Next is the cursor to pass as "after" for the next page; empty on
	// the last.
	Next string `json:"next,omitempty"`
}

// Filter selects messages, the same way for every bulk verb and for
// DEAD.LIST (PROTOCOL section 8). Every field given must match; none
// given matches everything.
type Filter struct {
	// Subject is a subject filter with wildcards; empty means ">".
	Subject string `json:"subject,omitempty"`
	// From and To bound the fire time, [From, To), each RFC 3339 or Unix
	// seconds.
	From string `json:"from,omitempty"`
	To   string `json:"to,omitempty"`
	// State is pending (the default: every pending message, in flight
	// or not), in_flight (delivered and not yet settled) or dead (dead
	// letters).
	State string `json:"state,omitempty"`
	// MinAttempts keeps messages delivered at least that many times.
	MinAttempts uint32 `json:"min_attempts,omitempty"`
	// Recurring, when set, keeps only occurrences of recurring schedules
	// (true) or only one-off messages (false).
	Recurring *bool `json:"recurring,omitempty"`
	// IDPrefix keeps messages whose Delay-Id starts with it.
	IDPrefix string `json:"id_prefix,omitempty"`
	// Headers keeps messages with each header equal to the value given
	// (its first value; names matched without regard to case).
	Headers map[string]string `json:"headers,omitempty"`
	// Tag keeps only the message, or dead letter, with this tag: a bulk
	// verb on one message, such as REPLAY of one dead letter.
	Tag string `json:"tag,omitempty"`
}

// DeadListRequest is the body of DEAD.LIST: one page of the dead letters
// that match the filter (its state may only be empty or dead), after the
// cursor After (the Next of the previous page). Limit nil means the
// service's default.
type DeadListRequest struct {
	Filter
	Limit *int   `json:"limit,omitempty"`
	After string `json:"after,omitempty"`
}

// DeadLetterInfo describes one dead letter: the message as it was
// pending (its tag is the one it had), and its death.
type DeadLetterInfo struct {
	MessageInfo
	Reason string `json:"reason"`
	// Attempts is the number of deliveries made.
	Attempts uint32 `json:"attempts"`
	// LastAnswer is the consumer's last answer (-NAK, +WPI, +TERM ...,
	// failed ...), empty when none came since the service started.
	LastAnswer string `json:"last_answer,omitempty"`
	DiedAt     string `json:"died_at"`
}

// DeadListReply is the body of DEAD.LIST.
type DeadListReply struct {
	DeadLetters []DeadLetterInfo `json:"dead_letters"`
	// Next is the cursor to pass as "after" for the next page; empty on
	// the last.
	Next string `json:"next,omitempty"`
}

// RescheduleRequest is the body of RESCHEDULE: the message, by tag or by
// subject and id, and its new fire time, At (RFC 3339 or Unix seconds) or
// Shift (a Go duration added to its fire time, negative allowed), one of
// the two. A time before now means due now. FIRE takes a MessageRef.
type RescheduleRequest struct {
	Tag     string `json:"tag,omitempty"`
	Subject string `json:"subject,omitempty"`
	ID      string `json:"id,omitempty"`
	At      string `json:"at,omitempty"`
	Shift   string `json:"shift,omitempty"`
}

// RescheduleReply is the body of the reply to RESCHEDULE and FIRE: the
// message's new tag (its key holds its fire time, so it changes with it)
// and fire time.
type RescheduleReply struct {
	Tag     string `json:"tag"`
	Subject string `json:"subject"`
	FireAt  string `json:"fire_at"`
}

// BulkRequest is the body of BULK.<verb>: a filter and one bounded step.
// DryRun counts and samples what the step would do and changes nothing.
// Limit bounds the messages one step acts on (nil: the service's default),
// and Cursor, the Cursor of the previous step's reply, resumes after it.
// At or Shift is the new time of RESCHEDULE (as in RescheduleRequest);
// ReplayTo, on REPLAY, sends the messages to that subject instead of
// their own.
//
// Op names the operation, chosen by the client (NewBulkOp) before its
// first step and sent with each step: each message RESCHEDULE or FIRE
// moves records it, and a step of the same operation leaves a message it
// already moved as it is. So a step sent again after a timeout, even from
// the start, moves no message twice. See CheckBulkOp for its form.
type BulkRequest struct {
	Filter
	DryRun   bool   `json:"dry_run,omitempty"`
	Limit    *int   `json:"limit,omitempty"`
	Cursor   string `json:"cursor,omitempty"`
	Op       string `json:"op,omitempty"`
	At       string `json:"at,omitempty"`
	Shift    string `json:"shift,omitempty"`
	ReplayTo string `json:"replay_to,omitempty"`
}

// MaxBulkOpLen is the longest operation id (BulkRequest.Op) in bytes.
const MaxBulkOpLen = 64

// NewBulkOp returns a new operation id: 16 random hex digits.
func NewBulkOp() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// CheckBulkOp reports whether op is a valid operation id: 1 to
// MaxBulkOpLen letters, digits, '-' and '_'.
func CheckBulkOp(op string) error {
	if op == "" || len(op) > MaxBulkOpLen || strings.Trim(op, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_") != "" {
		return fmt.Errorf("want 1 to %d letters, digits, '-' and '_', such as %s", MaxBulkOpLen, NewBulkOp())
	}
	return nil
}

// BulkSample is one message a bulk step acted on, or would have.
type BulkSample struct {
	Tag     string `json:"tag"`
	Subject string `json:"subject"`
	FireAt  string `json:"fire_at"`
}

// BulkReply is the body of the reply to one step of BULK.<verb>.
type BulkReply struct {
	Verb   string `json:"verb"`
	DryRun bool   `json:"dry_run"`
	// Count is how many messages the step acted on, or would have.
	Count int `json:"count"`
	// Skipped counts messages that matched but were left as they are:
	// in flight (RESCHEDULE, FIRE), occurrences of recurring schedules
	// (RESCHEDULE, FIRE), or dead letters whose Delay-Id a pending message
	// holds (REPLAY).
	Skipped int `json:"skipped"`
	// Scanned counts the entries the step read.
	Scanned int `json:"scanned"`
	// Sample lists up to 10 of the messages counted.
	Sample []BulkSample `json:"sample"`
	// Cursor resumes the operation after this step; empty when it is done.
	Cursor string `json:"cursor,omitempty"`
	// Op is the operation the step belongs to: the request's, or for a
	// RESCHEDULE or FIRE begun without one, one the service chose.
	Op string `json:"op,omitempty"`
	// Already counts the messages that matched and that this operation
	// had moved before (RESCHEDULE, FIRE): left as they are.
	Already int `json:"already,omitempty"`
}
