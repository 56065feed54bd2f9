package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/natsdelay/natsdelay/bridge/wire"
)

// schedulesCmd lists the recurring schedules (its default), and pauses,
// resumes and triggers one.
type schedulesCmd struct {
	Ls      schedulesLsCmd     `cmd:"" default:"withargs" help:"List the recurring schedules, with their spec, zone, next time and occurrences fired; the default."`
	Pause   schedulePauseCmd   `cmd:"" help:"Pause a recurring schedule, by --subject and --id or by the TAG of an occurrence: it plans nothing until resumed."`
	Resume  scheduleResumeCmd  `cmd:"" help:"Resume a paused schedule; its catch-up policy (Delay-Catch-Up) decides what the pause missed."`
	Trigger scheduleTriggerCmd `cmd:"" help:"Deliver one extra occurrence of a schedule now; its planned times stay as they are."`
	Edit    scheduleEditCmd    `cmd:"" help:"Change a schedule in place: spec, until, limit, catch-up, exclusions, jitter, payload or headers; what is not given stays. Its name and count stay."`
	Skip    scheduleSkipCmd    `cmd:"" help:"Skip the next --count occurrences of a schedule: each is deleted unsent when its time comes, and counted as skipped."`
}

// schedulesLsCmd lists the recurring schedules.
type schedulesLsCmd struct {
	apiFlags `embed:""`

	Subject string `arg:"" optional:"" help:"Target subject; default every subject."`
	Limit   int    `help:"Schedules per page; 0 is the service's default (100)." default:"0" env:"-"`
	After   string `help:"Start after this cursor: the next field of the previous page." placeholder:"CURSOR" env:"-"`
	All     bool   `help:"Follow the pages to the end; with --json, print them as one reply." env:"-"`
	Next    int    `help:"Also print each schedule's next N times (1 to 100), excluded dates and skipped occurrences left out, jitter applied." placeholder:"N" env:"-"`
}

func (c *schedulesLsCmd) check() error {
	var p problems
	c.checkAPI(&p)
	if c.Subject != "" {
		checkSubject(&p, "subject", c.Subject, false)
	}
	if c.Limit < 0 {
		p.add("--limit %d: want a count > 0, or 0 for the service's default", c.Limit)
	}
	checkNext(&p, c.Next)
	return p.err()
}

// schedulePages returns the page req asks for, or with all that page and
// every one after it, with Next the after of the page that follows, if any.
func schedulePages(cl *apiClient, req wire.SchedulesRequest, all bool) (wire.SchedulesReply, error) {
	out := wire.SchedulesReply{Subject: req.Subject, Schedules: []wire.MessageInfo{}}
	next, err := fetchPages(cl, wire.VerbSchedules, &req, &req.After, all, func(page wire.SchedulesReply) string {
		out.Schedules = append(out.Schedules, page.Schedules...)
		return page.Next
	})
	out.Next = next
	return out, err
}

func (c *schedulesLsCmd) Run(e *env) error {
	req := wire.SchedulesRequest{Subject: c.Subject, Limit: limit(c.Limit), After: c.After, Upcoming: c.Next}
	if c.JSON && !c.All {
		_, _, err := c.ask(e, "schedules", wire.VerbSchedules, req) // the reply as it came
		return err
	}
	cl, err := c.dial("schedules", e)
	if err != nil {
		return err
	}
	defer cl.close()
	r, err := schedulePages(cl, req, c.All)
	if err != nil {
		return err
	}
	if c.JSON {
		r.Next = ""
		return printValue(e, r)
	}
	if err := writeSchedules(e.stdout, r.Schedules); err != nil {
		return err
	}
	if c.Next > 0 {
		if err := writeNextTimes(e.stdout, r.Schedules); err != nil {
			return err
		}
	}
	if r.Next != "" {
		args := []string{"natsdelay schedules"}
		if c.Subject != "" {
			args = append(args, c.Subject)
		}
		_, err = fmt.Fprintf(e.stdout, "more: %s --after '%s', or --all\n", strings.Join(args, " "), r.Next)
	} else {
		_, err = fmt.Fprintf(e.stdout, "%s\n", counted(len(r.Schedules), "schedule"))
	}
	return err
}

// writeSchedules writes the table of natsdelay schedules: each schedule's
// next time in its own zone, as its spec reads, and in UTC, and what ends
// it: its limit, its until, and how many occurrences the limit leaves.
func writeSchedules(w io.Writer, schedules []wire.MessageInfo) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SUBJECT\tNAME\tSPEC\tZONE\tNEXT\tNEXT (UTC)\tFIRED\tLIMIT\tUNTIL\tREMAINING\tTAG")
	for _, m := range schedules {
		s := m.Schedule
		if s == nil {
			continue
		}
		next, local := "-", "-"
		switch {
		case s.Paused:
			next, local = "paused", "paused"
		case len(s.Next) > 0:
			next, local = s.Next[0], inZone(s.Next[0], s.Zone)
		}
		limit, remaining, until := "-", "-", "-"
		if s.Limit > 0 {
			limit = strconv.FormatUint(s.Limit, 10)
			remaining = strconv.FormatUint(s.Limit-min(s.Fired, s.Limit), 10)
		}
		if s.Until != "" {
			until = s.Until
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", m.Subject, s.Name, s.Spec, s.Zone, local, next, s.Fired, limit, until, remaining, m.Tag)
	}
	return tw.Flush()
}

// writeNextTimes writes each schedule's next times, in its zone and in
// UTC, under a line that names it.
func writeNextTimes(w io.Writer, schedules []wire.MessageInfo) error {
	for _, m := range schedules {
		s := m.Schedule
		if s == nil {
			continue
		}
		if _, err := fmt.Fprintf(w, "\n%s %s: next %d\n", m.Subject, s.Name, len(s.Next)); err != nil {
			return err
		}
		for _, n := range s.Next {
			if _, err := fmt.Fprintf(w, "  %s  %s\n", inZone(n, s.Zone), n); err != nil {
				return err
			}
		}
	}
	return nil
}

// inZone is the time t, as the service writes it, in the IANA zone: the
// wall clock the schedule's spec speaks of. t itself if either does not
// parse.
func inZone(t, zone string) string {
	at, err := time.Parse(time.RFC3339Nano, t)
	if err != nil {
		return t
	}
	loc, err := time.LoadLocation(zone)
	if err != nil {
		return t
	}
	return at.In(loc).Format("2006-01-02 15:04:05 MST")
}
