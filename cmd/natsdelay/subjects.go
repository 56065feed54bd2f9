package main

import (
	"fmt"
	"text/tabwriter"

	"github.com/natsdelay/natsdelay/bridge/wire"
)

// subjectsCmd lists the subjects with pending messages.
type subjectsCmd struct {
	apiFlags `embed:""`

	Filter string `arg:"" optional:"" help:"Subject filter: orders.* for one more token, orders.> for any more; default every subject." default:">"`
	Limit  int    `help:"Subjects per page; 0 is the service's default (100)." default:"0" env:"-"`
	After  string `help:"Start after this subject: the next field of the previous page." placeholder:"SUBJECT" env:"-"`
	All    bool   `help:"Follow the pages to the end; with --json, print them as one reply." env:"-"`
}

func (c *subjectsCmd) check() error {
	var p problems
	c.checkAPI(&p)
	checkSubject(&p, "filter", c.Filter, true)
	if c.Limit < 0 {
		p.add("--limit %d: want a count > 0, or 0 for the service's default", c.Limit)
	}
	return p.err()
}

// allSubjects returns every subject with pending messages that matches
// filter, following the pages.
func allSubjects(cl *apiClient, filter string) ([]wire.SubjectInfo, error) {
	r, err := subjectPages(cl, wire.SubjectsRequest{Filter: filter, Limit: limit(1000)}, true)
	return r.Subjects, err
}

// subjectPages returns the page req asks for, or with all that page and
// every one after it, with Next the after of the page that follows, if any.
func subjectPages(cl *apiClient, req wire.SubjectsRequest, all bool) (wire.SubjectsReply, error) {
	out := wire.SubjectsReply{Subjects: []wire.SubjectInfo{}}
	next, err := fetchPages(cl, wire.VerbSubjects, &req, &req.After, all, func(page wire.SubjectsReply) string {
		out.Filter = page.Filter
		out.Subjects = append(out.Subjects, page.Subjects...)
		return page.Next
	})
	out.Next = next
	return out, err
}

func (c *subjectsCmd) Run(e *env) error {
	req := wire.SubjectsRequest{Filter: c.Filter, Limit: limit(c.Limit), After: c.After}
	if c.JSON && !c.All {
		_, _, err := c.ask(e, "subjects", wire.VerbSubjects, req) // the reply as it came
		return err
	}
	cl, err := c.dial("subjects", e)
	if err != nil {
		return err
	}
	defer cl.close()
	r, err := subjectPages(cl, req, c.All)
	if err != nil {
		return err
	}
	if c.JSON {
		r.Next = ""
		return printValue(e, r)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SUBJECT\tPENDING\tDUE NOW\tDEAD\tHELD")
	var pending, due, dead uint64
	for _, s := range r.Subjects {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\n", s.Subject, s.Pending, s.DueNow, s.Dead, held(s))
		pending += s.Pending
		due += s.DueNow
		dead += s.Dead
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if r.Next != "" {
		_, err = fmt.Fprintf(e.stdout, "more: natsdelay subjects %s --after %s, or --all\n", r.Filter, r.Next)
	} else {
		_, err = fmt.Fprintf(e.stdout, "%s matching %s: %d pending, %d due now, %d dead\n", counted(len(r.Subjects), "subject"), r.Filter, pending, due, dead)
	}
	return err
}

// limit is a --limit as a request's limit: 0, the service's default, is
// left out.
func limit(n int) *int {
	if n == 0 {
		return nil
	}
	return &n
}

// counted is n and noun, in the plural unless n is 1: "1 subject", "2
// subjects".
func counted(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// held is the HELD column of s: paused (by the pattern that pauses it),
// at its in-flight limit, or no.
func held(s wire.SubjectInfo) string {
	switch {
	case s.PausedBy != "":
		return "paused by " + s.PausedBy
	case s.Limited:
		return "at limit"
	}
	return "no"
}
