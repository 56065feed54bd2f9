package main

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"natsdelay/bridge/wire"
)

// schedulesCmd lists the recurring schedules.
type schedulesCmd struct {
	apiFlags `embed:""`

	Subject string `arg:"" optional:"" help:"Target subject; default every subject."`
	Limit   int    `help:"Schedules per page; 0 is the service's default (100)." default:"0" env:"-"`
	After   string `help:"Start after this cursor: the next field of the previous page." placeholder:"CURSOR" env:"-"`
	All     bool   `help:"Follow the pages to the end; with --json, print them as one reply." env:"-"`
}

func (c *schedulesCmd) check() error {
	var p problems
	c.checkAPI(&p)
	if c.Subject != "" {
		checkSubject(&p, "subject", c.Subject, false)
	}
	if c.Limit < 0 {
		p.add("--limit %d: want a count > 0, or 0 for the service's default", c.Limit)
	}
	return p.err()
}

// schedulePages returns the page req asks for, or with all that page and
// every one after it, with Next the after of the page that follows, if any.
func schedulePages(cl *client, req wire.SchedulesRequest, all bool) (wire.SchedulesReply, error) {
	out := wire.SchedulesReply{Subject: req.Subject, Schedules: []wire.MessageInfo{}}
	next, err := fetchPages(cl, wire.VerbSchedules, &req, &req.After, all, func(page wire.SchedulesReply) string {
		out.Schedules = append(out.Schedules, page.Schedules...)
		return page.Next
	})
	out.Next = next
	return out, err
}

func (c *schedulesCmd) Run(e *env) error {
	cl, err := c.dial("schedules", e)
	if err != nil {
		return err
	}
	defer cl.close()
	req := wire.SchedulesRequest{Subject: c.Subject, Limit: limit(c.Limit), After: c.After}
	if c.JSON && !c.All {
		data, err := cl.call(wire.VerbSchedules, req)
		if err != nil {
			return err
		}
		return printJSON(e.stdout, data)
	}
	r, err := schedulePages(cl, req, c.All)
	if err != nil {
		return err
	}
	if c.JSON {
		r.Next = ""
		return printValue(e, r)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SUBJECT\tNAME\tSPEC\tZONE\tNEXT\tFIRED\tTAG")
	for _, m := range r.Schedules {
		s := m.Schedule
		if s == nil {
			continue
		}
		next := "-"
		if len(s.Next) > 0 {
			next = s.Next[0]
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", m.Subject, s.Name, s.Spec, s.Zone, next, s.Fired, m.Tag)
	}
	if err := tw.Flush(); err != nil {
		return err
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
