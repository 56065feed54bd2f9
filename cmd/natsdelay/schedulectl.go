package main

import (
	"fmt"
	"strings"

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

// scheduleEditCmd changes a schedule in place.
type scheduleEditCmd struct {
	apiFlags    `embed:""`
	scheduleRef `embed:""`

	Every     string   `help:"New interval (at least 100ms; days as in pub --delay): replans from now." placeholder:"DURATION" xor:"repeat" env:"-"`
	Cron      string   `help:"New cron spec: replans from now." placeholder:"SPEC" xor:"repeat" env:"-"`
	TZ        string   `name:"tz" help:"IANA zone of the cron spec, with --cron or alone." placeholder:"ZONE" env:"-"`
	Until     string   `help:"New end, RFC 3339 or Unix seconds, or none to remove it." placeholder:"TIME" env:"-"`
	Limit     int64    `help:"New limit of occurrences; 0 removes it, -1 keeps it." default:"-1" env:"-"`
	CatchUp   string   `help:"New catch-up policy: one, all or none." placeholder:"POLICY" env:"-"`
	Overlap   string   `help:"New overlap policy (Delay-Overlap): allow, skip or buffer-one." placeholder:"POLICY" env:"-"`
	Exclude   string   `help:"New dates on which no occurrence fires (Delay-Exclude), in the schedule's zone, such as 2026-12-25,2027-02-01..2027-02-07; none removes them." placeholder:"DATES" env:"-"`
	Jitter    string   `help:"New jitter (Delay-Jitter): each occurrence goes out up to that long after its planned time; none removes it." placeholder:"DURATION" env:"-"`
	Payload   *string  `help:"New payload; an empty one is allowed." placeholder:"DATA" env:"-"`
	Header    []string `short:"H" help:"Replace every header with these, as K:V; repeatable." placeholder:"K:V" sep:"none" env:"-"`
	NoHeaders bool     `help:"Remove every header the schedule delivers." xor:"headers" env:"-"`
}

func (c *scheduleEditCmd) check() error {
	if err := c.scheduleRef.check(&c.apiFlags, "edit"); err != nil {
		return err
	}
	var p problems
	for _, h := range c.Header {
		if k, _, ok := strings.Cut(h, ":"); !ok || strings.TrimSpace(k) == "" {
			p.add("--header %q: want K:V, such as X-Trace:abc", h)
		}
	}
	if c.NoHeaders && len(c.Header) > 0 {
		p.add("give --header or --no-headers, not both")
	}
	if c.Limit < -1 {
		p.add("--limit %d: want a count, 0 for no limit, or -1 to keep it", c.Limit)
	}
	return p.err()
}

// request is the SCHEDULE.EDIT request the flags ask for.
func (c *scheduleEditCmd) request() wire.ScheduleEditRequest {
	r := wire.ScheduleEditRequest{Tag: c.Tag, Subject: c.Subject, ID: c.ID, Every: c.Every, Cron: c.Cron, Zone: c.TZ, Until: c.Until, CatchUp: c.CatchUp, Overlap: c.Overlap,
		Exclude: c.Exclude, Jitter: c.Jitter}
	if c.Limit >= 0 {
		n := uint64(c.Limit)
		r.Limit = &n
	}
	if c.Payload != nil {
		r.Payload = []byte(*c.Payload)
	}
	if c.NoHeaders || len(c.Header) > 0 {
		r.Headers = map[string][]string{}
		for _, h := range c.Header {
			k, v, _ := strings.Cut(h, ":")
			k = strings.TrimSpace(k)
			r.Headers[k] = append(r.Headers[k], strings.TrimSpace(v))
		}
	}
	return r
}

func (c *scheduleEditCmd) Run(e *env) error {
	mi, printed, err := askFor[wire.MessageInfo](&c.apiFlags, e, "schedules edit", wire.VerbScheduleEdit, c.request())
	if err != nil || printed {
		return err
	}
	if mi.Schedule == nil {
		return fmt.Errorf("schedules edit: the answer has no schedule")
	}
	next := "-"
	if len(mi.Schedule.Next) > 0 {
		next = mi.Schedule.Next[0]
	}
	_, err = fmt.Fprintf(e.stdout, "edited %s name=%s spec=%q next=%s tag=%s\n", mi.Subject, mi.Schedule.Name, mi.Schedule.Spec, next, mi.Tag)
	return err
}

// scheduleSkipCmd skips the next occurrences of a schedule.
type scheduleSkipCmd struct {
	apiFlags    `embed:""`
	scheduleRef `embed:""`

	Count uint64 `help:"How many of the next occurrences to skip, 1 to 1000; they add to those waiting." default:"1" env:"-"`
}

func (c *scheduleSkipCmd) check() error {
	if err := c.scheduleRef.check(&c.apiFlags, "skip"); err != nil {
		return err
	}
	if c.Count == 0 || c.Count > wire.MaxSkip {
		return usage.Errorf("schedules skip: --count %d: want 1 to %d occurrences", c.Count, wire.MaxSkip)
	}
	return nil
}

func (c *scheduleSkipCmd) Run(e *env) error {
	req := wire.ScheduleSkipRequest{Tag: c.Tag, Subject: c.Subject, ID: c.ID, Count: c.Count}
	mi, printed, err := askFor[wire.MessageInfo](&c.apiFlags, e, "schedules skip", wire.VerbScheduleSkip, req)
	if err != nil || printed {
		return err
	}
	if mi.Schedule == nil {
		return fmt.Errorf("schedules skip: the answer has no schedule")
	}
	next := "-"
	if len(mi.Schedule.Next) > 0 {
		next = mi.Schedule.Next[0]
	}
	_, err = fmt.Fprintf(e.stdout, "skipping %d %s name=%s next=%s tag=%s\n", mi.Schedule.Skip, mi.Subject, mi.Schedule.Name, next, mi.Tag)
	return err
}
