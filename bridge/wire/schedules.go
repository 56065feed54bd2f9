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
)

// TriggerReply is the answer of SCHEDULE.TRIGGER: the extra occurrence's
// tag and time, and the schedule's name.
type TriggerReply struct {
	Tag     string `json:"tag"`
	Subject string `json:"subject"`
	Name    string `json:"name"`
	FireAt  string `json:"fire_at"`
}
