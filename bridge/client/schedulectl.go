package client

import (
	"context"
	"time"

	"github.com/natsdelay/natsdelay/bridge/wire"
)

// PauseSchedule pauses the recurring schedule ref names (by subject and
// id, its name, or the tag of an occurrence) and returns it as GET shows
// it: a paused schedule plans nothing until ResumeSchedule. Pausing a
// paused schedule changes nothing, so it is safe to retry. A schedule
// that does not exist is a *wire.ServiceError matching wire.ErrNotFound.
func (c *Client) PauseSchedule(ctx context.Context, ref wire.MessageRef) (*MessageInfo, error) {
	return c.scheduleCall(ctx, wire.VerbSchedulePause, ref)
}

// ResumeSchedule resumes the recurring schedule ref names and returns it
// as GET shows it; its Delay-Catch-Up decides what the pause missed.
// Resuming a schedule that runs changes nothing.
func (c *Client) ResumeSchedule(ctx context.Context, ref wire.MessageRef) (*MessageInfo, error) {
	return c.scheduleCall(ctx, wire.VerbScheduleResume, ref)
}

// scheduleCall sends verb with req and reads the schedule it answers.
func (c *Client) scheduleCall(ctx context.Context, verb string, req any) (*MessageInfo, error) {
	var r wire.MessageInfo
	if err := c.call(ctx, verb, req, &r); err != nil {
		return nil, err
	}
	m, err := messageInfo(r)
	return &m, err
}

// TriggerSchedule delivers one extra occurrence of the recurring schedule
// ref names now, its planned times unchanged, and returns the extra
// occurrence's tag. With WithRetry it is sent again only after no
// responders, so a lost answer never makes two.
func (c *Client) TriggerSchedule(ctx context.Context, ref wire.MessageRef) (*Triggered, error) {
	data, err := c.requestOnce(ctx, wire.VerbScheduleTrigger, ref)
	if err != nil {
		return nil, err
	}
	var out wire.TriggerReply
	if err := decode(wire.VerbScheduleTrigger, data, &out); err != nil {
		return nil, err
	}
	at, err := wireTime("fire_at", out.FireAt)
	return &Triggered{Tag: out.Tag, Subject: out.Subject, Name: out.Name, FireAt: at}, err
}

// Triggered is the extra occurrence TriggerSchedule stored
// (wire.TriggerReply): its tag, the schedule's subject and name, and when
// it is due.
type Triggered struct {
	Tag     string
	Subject string
	Name    string
	FireAt  time.Time
}

// EditSchedule changes the recurring schedule r names in place (its spec,
// end, limit, catch-up policy, payload or headers; what r leaves out
// stays) and returns it as GET shows it. Its name, occurrence count and
// history stay. A bad value is a *wire.ServiceError matching
// wire.ErrBadRequest, and changes nothing. With WithRetry it is sent again
// only after no responders: a second edit of the spec would plan from the
// second's time.
func (c *Client) EditSchedule(ctx context.Context, r wire.ScheduleEditRequest) (*MessageInfo, error) {
	data, err := c.requestOnce(ctx, wire.VerbScheduleEdit, r)
	if err != nil {
		return nil, err
	}
	var out wire.MessageInfo
	if err := decode(wire.VerbScheduleEdit, data, &out); err != nil {
		return nil, err
	}
	m, err := messageInfo(out)
	return &m, err
}

// SkipSchedule skips the next count occurrences of the recurring
// schedule ref names: each is deleted unsent as it falls due, and counted
// as skipped. It returns the schedule as GET shows it, its next times
// without the skipped ones. Skips add up (to at most wire.MaxSkip
// waiting), so with WithRetry it is sent again only after no responders:
// a lost answer never skips twice.
func (c *Client) SkipSchedule(ctx context.Context, ref wire.MessageRef, count uint64) (*MessageInfo, error) {
	req := wire.ScheduleSkipRequest{Tag: ref.Tag, Subject: ref.Subject, ID: ref.ID, Count: count}
	data, err := c.requestOnce(ctx, wire.VerbScheduleSkip, req)
	if err != nil {
		return nil, err
	}
	var out wire.MessageInfo
	if err := decode(wire.VerbScheduleSkip, data, &out); err != nil {
		return nil, err
	}
	m, err := messageInfo(out)
	return &m, err
}
