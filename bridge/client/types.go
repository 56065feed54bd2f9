package client

import (
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge/wire"
)

// The API's answers carry times as RFC 3339 text (package wire keeps
// them so, as they go on the wire); the client hands them out as the
// types below, with each time a time.Time, zero where the answer has
// none.

// MessageInfo describes one pending message (GET, LIST, SCHEDULES).
type MessageInfo struct {
	Tag        string
	Subject    string
	ID         string
	FireAt     time.Time
	EnqueuedAt time.Time
	// ExpireAt is zero for a message without Delay-TTL.
	ExpireAt   time.Time
	Attempt    uint32
	Ack        string
	MaxDeliver uint32
	Size       int
	Header     nats.Header
	// Schedule is set on an occurrence of a recurring schedule.
	Schedule *ScheduleInfo
	// DebounceFirst is set on a debounced message: when its burst began;
	// DebounceMax is its maximum wait, zero for none.
	DebounceFirst time.Time
	DebounceMax   time.Duration
	// Throttle is set on a throttled message: its window.
	Throttle time.Duration
	// Payload is set only when asked for (MessageRef.Payload).
	Payload []byte
}

// ScheduleInfo describes the recurring schedule of an occurrence.
type ScheduleInfo struct {
	// Name names the schedule in Get and Cancel (as ID, with the
	// subject): its Delay-Id, or the tag of its first occurrence.
	Name string
	// Spec is the Delay-Schedule: the cron spec, or @every and the
	// interval.
	Spec string
	Zone string
	// Until is zero for a schedule without Delay-Until.
	Until   time.Time
	Limit   uint64
	CatchUp string
	// Occurrence is this occurrence's planned time, and Seq its number.
	Occurrence time.Time
	Seq        uint64
	Fired      uint64
	Skipped    uint64
	// Paused says the schedule is paused (PauseSchedule): it plans
	// nothing until it is resumed.
	Paused bool
	// Overlap is the Delay-Overlap policy, skip or buffer-one; empty for
	// allow.
	Overlap string
	// Skip is how many next occurrences SkipSchedule has still to skip.
	Skip uint64
	// Exclude is the Delay-Exclude dates, sorted and merged.
	Exclude string
	// Jitter is the Delay-Jitter.
	Jitter time.Duration
	// JSScheduler is, for a schedule taken in on the JetStream schedule
	// prefix, its schedule subject.
	JSScheduler string
	// Next are when the next occurrences not yet delivered go out, up to
	// 5 or the Upcoming asked for, without excluded dates or skipped
	// occurrences and with the jitter applied.
	Next []time.Time
}

// DeadLetterInfo describes one dead letter: the message as it was pending
// (its tag is the one it had), and its death.
type DeadLetterInfo struct {
	MessageInfo
	Reason     string
	Attempts   uint32
	LastAnswer string
	DiedAt     time.Time
}

// MessagePage is one page of LIST or SCHEDULES; Next is the cursor of
// the page after it, empty on the last.
type MessagePage struct {
	Messages []MessageInfo
	Next     string
}

// BulkReply is what one step of BULK.<verb> did (wire.BulkReply).
type BulkReply struct {
	Verb    string
	DryRun  bool
	Count   int
	Skipped int
	Scanned int
	Already int
	Sample  []BulkSample
	// Cursor resumes the operation after this step; empty when it is
	// done. Op is the operation the step belongs to.
	Cursor string
	Op     string
}

// BulkSample is one message a bulk step acted on, or would have.
type BulkSample struct {
	Tag     string
	Subject string
	FireAt  time.Time
}

// wireTime is the time s of the answer's field name; empty is zero.
func wireTime(name, s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("unexpected %s %q in an answer: %w", name, s, err)
	}
	return t, nil
}

// wireField is one time of an answer: its field's name, its text, and
// where its value goes.
type wireField struct {
	name string
	in   string
	out  *time.Time
}

// times parses each of the wire times into its target, and returns the
// first error.
type times []wireField

func (ts times) parse() error {
	for _, t := range ts {
		v, err := wireTime(t.name, t.in)
		if err != nil {
			return err
		}
		*t.out = v
	}
	return nil
}

func messageInfo(w wire.MessageInfo) (MessageInfo, error) {
	m := MessageInfo{Tag: w.Tag, Subject: w.Subject, ID: w.ID, Attempt: w.Attempt, Ack: w.Ack,
		MaxDeliver: w.MaxDeliver, Size: w.Size, Header: nats.Header(w.Headers), Payload: w.Payload}
	err := times{
		{"fire_at", w.FireAt, &m.FireAt},
		{"enqueued_at", w.EnqueuedAt, &m.EnqueuedAt},
		{"expire_at", w.ExpireAt, &m.ExpireAt},
		{"debounce_first", w.DebounceFirst, &m.DebounceFirst},
	}.parse()
	for _, d := range []struct {
		name, in string
		out      *time.Duration
	}{{"debounce_max", w.DebounceMax, &m.DebounceMax}, {"throttle", w.Throttle, &m.Throttle}} {
		if err != nil || d.in == "" {
			continue
		}
		if *d.out, err = time.ParseDuration(d.in); err != nil {
			err = fmt.Errorf("unexpected %s %q: %w", d.name, d.in, err)
		}
	}
	if err != nil || w.Schedule == nil {
		return m, err
	}
	s, err := scheduleInfo(*w.Schedule)
	m.Schedule = &s
	return m, err
}

func scheduleInfo(w wire.ScheduleInfo) (ScheduleInfo, error) {
	s := ScheduleInfo{Name: w.Name, Spec: w.Spec, Zone: w.Zone, Limit: w.Limit, CatchUp: w.CatchUp,
		Seq: w.Seq, Fired: w.Fired, Skipped: w.Skipped, Paused: w.Paused, Overlap: w.Overlap, Next: make([]time.Time, len(w.Next)),
		Skip: w.Skip, Exclude: w.Exclude, JSScheduler: w.JSScheduler}
	if w.Jitter != "" {
		var err error
		if s.Jitter, err = time.ParseDuration(w.Jitter); err != nil {
			return s, fmt.Errorf("unexpected jitter %q: %w", w.Jitter, err)
		}
	}
	ts := times{{"until", w.Until, &s.Until}, {"occurrence", w.Occurrence, &s.Occurrence}}
	for i, n := range w.Next {
		ts = append(ts, wireField{"next", n, &s.Next[i]})
	}
	return s, ts.parse()
}

func deadLetterInfo(w wire.DeadLetterInfo) (DeadLetterInfo, error) {
	m, err := messageInfo(w.MessageInfo)
	d := DeadLetterInfo{MessageInfo: m, Reason: w.Reason, Attempts: w.Attempts, LastAnswer: w.LastAnswer}
	if err != nil {
		return d, err
	}
	d.DiedAt, err = wireTime("died_at", w.DiedAt)
	return d, err
}

func messageInfos(ws []wire.MessageInfo) ([]MessageInfo, error) {
	out := make([]MessageInfo, 0, len(ws))
	for _, w := range ws {
		m, err := messageInfo(w)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}

func bulkReply(w wire.BulkReply) (BulkReply, error) {
	r := BulkReply{Verb: w.Verb, DryRun: w.DryRun, Count: w.Count, Skipped: w.Skipped, Scanned: w.Scanned,
		Already: w.Already, Cursor: w.Cursor, Op: w.Op}
	for _, s := range w.Sample {
		at, err := wireTime("fire_at", s.FireAt)
		if err != nil {
			return r, err
		}
		r.Sample = append(r.Sample, BulkSample{Tag: s.Tag, Subject: s.Subject, FireAt: at})
	}
	return r, nil
}

func scheduled(w wire.ScheduleReply) (*Scheduled, error) {
	at, err := time.Parse(time.RFC3339Nano, w.FireAt)
	if err != nil {
		return nil, fmt.Errorf("unexpected fire_at %q in an answer: %w", w.FireAt, err)
	}
	return &Scheduled{Tag: w.Tag, Subject: w.Subject, FireAt: at, Duplicate: w.Duplicate, Folded: w.Folded}, nil
}
