package wire

// The verbs that act on one recurring schedule, named by a MessageRef:
// "subject" and "id" (its Delay-Id, or the tag of its first occurrence),
// or "tag", the tag of any of its occurrences still pending.
const (
	// VerbSchedulePause pauses the schedule; VerbScheduleResume resumes
	// it. Each answers the schedule as GET shows it (MessageInfo).
	VerbSchedulePause  = "SCHEDULE.PAUSE"
	VerbScheduleResume = "SCHEDULE.RESUME"
	// VerbScheduleTrigger delivers one extra occurrence now
	// (TriggerReply), the schedule's planned times unchanged.
	VerbScheduleTrigger = "SCHEDULE.TRIGGER"
	// VerbScheduleEdit changes the schedule in place
	// (ScheduleEditRequest), and answers it as GET shows it.
	VerbScheduleEdit = "SCHEDULE.EDIT"
	// VerbScheduleSkip skips the schedule's next occurrences
	// (ScheduleSkipRequest), and answers it as GET shows it.
	VerbScheduleSkip = "SCHEDULE.SKIP"
)

// MaxSkip bounds the occurrences a schedule has waiting to be skipped,
// all SCHEDULE.SKIP requests together: GET and SCHEDULES step over them
// to show the next times.
const MaxSkip = 1000

// ScheduleSkipRequest is the body of SCHEDULE.SKIP: the schedule, by Tag
// or by Subject and ID, and Count, how many of its next occurrences are
// deleted unsent, from 1 up to MaxSkip with those already waiting.
type ScheduleSkipRequest struct {
	Tag     string `json:"tag,omitempty"`
	Subject string `json:"subject,omitempty"`
	ID      string `json:"id,omitempty"`
	Count   uint64 `json:"count"`
}

// ScheduleEditRequest is the body of SCHEDULE.EDIT: the schedule, by Tag
// or by Subject and ID, and what changes; a field left out stays as it
// is. Every or Cron replace the spec (Zone goes with Cron, or alone moves
// the cron spec to another zone), with the values of Delay-Every,
// Delay-Cron and Delay-TZ; Until is a time as Delay-Until or "none";
// Limit 0 removes the limit; CatchUp is one, all or none; Overlap allow,
// skip or buffer-one; Exclude the dates of Delay-Exclude, or "none";
// Jitter a duration as Delay-Jitter, or "none". Payload, when
// not null (even empty), replaces the payload; Headers, when not null
// (even {}), replace every header the schedule delivers.
type ScheduleEditRequest struct {
	Tag     string              `json:"tag,omitempty"`
	Subject string              `json:"subject,omitempty"`
	ID      string              `json:"id,omitempty"`
	Every   string              `json:"every,omitempty"`
	Cron    string              `json:"cron,omitempty"`
	Zone    string              `json:"zone,omitempty"`
	Until   string              `json:"until,omitempty"`
	Limit   *uint64             `json:"limit,omitempty"`
	CatchUp string              `json:"catch_up,omitempty"`
	Overlap string              `json:"overlap,omitempty"`
	Exclude string              `json:"exclude,omitempty"`
	Jitter  string              `json:"jitter,omitempty"`
	Payload []byte              `json:"payload"`
	Headers map[string][]string `json:"headers"`
}

// TriggerReply is the answer of SCHEDULE.TRIGGER: the extra occurrence's
// tag and time, and the schedule's name.
type TriggerReply struct {
	Tag     string `json:"tag"`
	Subject string `json:"subject"`
	Name    string `json:"name"`
	FireAt  string `json:"fire_at"`
}
