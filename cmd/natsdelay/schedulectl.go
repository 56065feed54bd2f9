package main

import (
	"fmt"

	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/cmd/internal/usage"
)

// scheduleRef names one recurring schedule: by subject and name, or by
// the tag of one of its occurrences.
type scheduleRef struct {
	Tag     string `arg:"" optional:"" help:"Tag of an occurrence of the schedule, as pub or schedules printed it."`
	Subject string `help:"Target subject of the schedule, with --id." env:"-"`
	ID      string `name:"id" help:"Name of the schedule, with --subject: its Delay-Id, or the tag of its first occurrence." env:"-"`
}

func (r *scheduleRef) check(c *apiFlags, cmd string) error {
	ref := messageRef{Tag: r.Tag, Subject: r.Subject, ID: r.ID}
	if ref.Tag == "" && ref.Subject == "" && ref.ID == "" {
		return usage.Errorf("schedules %[1]s: which schedule? natsdelay schedules %[1]s --subject SUBJECT --id ID, or natsdelay schedules %[1]s TAG", cmd)
	}
	var p problems
	ref.checkRef(&p)
	c.checkAPI(&p)
	return p.err()
}

func (r *scheduleRef) ref() wire.MessageRef {
	return wire.MessageRef{Tag: r.Tag, Subject: r.Subject, ID: r.ID}
}

// schedulePauseCmd pauses a recurring schedule.
type schedulePauseCmd struct {
	apiFlags    `embed:""`
	scheduleRef `embed:""`
}

func (c *schedulePauseCmd) check() error { return c.scheduleRef.check(&c.apiFlags, "pause") }

func (c *schedulePauseCmd) Run(e *env) error {
	return c.pauseOrResume(e, "pause", wire.VerbSchedulePause, c.ref())
}

// scheduleResumeCmd resumes a paused schedule.
type scheduleResumeCmd struct {
	apiFlags    `embed:""`
	scheduleRef `embed:""`
}

func (c *scheduleResumeCmd) check() error { return c.scheduleRef.check(&c.apiFlags, "resume") }

func (c *scheduleResumeCmd) Run(e *env) error {
	return c.pauseOrResume(e, "resume", wire.VerbScheduleResume, c.ref())
}

// pauseOrResume asks verb for ref and prints the schedule as it is now.
func (c *apiFlags) pauseOrResume(e *env, name, verb string, ref wire.MessageRef) error {
	mi, printed, err := askFor[wire.MessageInfo](c, e, "schedules "+name, verb, ref)
	if err != nil || printed {
		return err
	}
	if mi.Schedule == nil {
		return fmt.Errorf("schedules %s: the answer has no schedule", name)
	}
	state, next := "running", "-"
	if mi.Schedule.Paused {
		state = "paused"
	}
	if len(mi.Schedule.Next) > 0 {
		next = mi.Schedule.Next[0]
	}
	_, err = fmt.Fprintf(e.stdout, "%s %s name=%s next=%s tag=%s\n", state, mi.Subject, mi.Schedule.Name, next, mi.Tag)
	return err
}

// scheduleTriggerCmd delivers one extra occurrence of a schedule now.
type scheduleTriggerCmd struct {
	apiFlags    `embed:""`
	scheduleRef `embed:""`
}

func (c *scheduleTriggerCmd) check() error { return c.scheduleRef.check(&c.apiFlags, "trigger") }

func (c *scheduleTriggerCmd) Run(e *env) error {
	tr, printed, err := askFor[wire.TriggerReply](&c.apiFlags, e, "schedules trigger", wire.VerbScheduleTrigger, c.ref())
	if err != nil || printed {
		return err
	}
	_, err = fmt.Fprintf(e.stdout, "triggered %s name=%s tag=%s fire_at=%s\n", tr.Subject, tr.Name, tr.Tag, tr.FireAt)
	return err
}
