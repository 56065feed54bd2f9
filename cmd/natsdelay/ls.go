package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/natsdelay/natsdelay/bridge/wire"
)

// lsCmd lists the pending messages of one subject in fire order, or of
// every subject that matches a filter, subject by subject.
type lsCmd struct {
	apiFlags `embed:""`

	Subject string `arg:"" help:"Target subject whose pending messages to list, or a filter such as orders.* or orders.> for every matching subject."`
	Limit   int    `help:"Messages per page, per subject; 0 is the service's default (100)." default:"0" env:"-"`
	After   string `help:"Start after this tag: the next field of the previous page. Not with a filter." placeholder:"TAG" env:"-"`
	All     bool   `help:"Follow the pages to the end; with --json, print them as one reply." env:"-"`
}

func (c *lsCmd) check() error {
	var p problems
	c.checkAPI(&p)
	checkSubject(&p, "subject", c.Subject, true)
	if c.Limit < 0 {
		p.add("--limit %d: want a count > 0, or 0 for the service's default", c.Limit)
	}
	if c.After != "" && isFilter(c.Subject) {
		p.add("--after %s: a tag is of one subject, and %q is a filter: give the subject", c.After, c.Subject)
	}
	return p.err()
}

// isFilter reports whether subj has a wildcard token.
func isFilter(subj string) bool {
	for _, tok := range strings.Split(subj, ".") {
		if tok == "*" || tok == ">" {
			return true
		}
	}
	return false
}

// list returns the first page of subject after after, or with all every
// page to the end, with Next the after of the page that follows, if any.
func (c *lsCmd) list(cl *apiClient, subject, after string) (wire.ListReply, error) {
	req := wire.ListRequest{Subject: subject, Limit: limit(c.Limit), After: after}
	out := wire.ListReply{Messages: []wire.MessageInfo{}}
	next, err := fetchPages(cl, wire.VerbList, &req, &req.After, c.All, func(page wire.ListReply) string {
		out.Subject = page.Subject
		out.Messages = append(out.Messages, page.Messages...)
		return page.Next
	})
	out.Next = next
	return out, err
}

// lsFilterReply is what ls --json prints for a filter: the LIST reply of
// each matching subject.
type lsFilterReply struct {
	Filter   string           `json:"filter"`
	Subjects []wire.ListReply `json:"subjects"`
}

func (c *lsCmd) Run(e *env) error {
	if !isFilter(c.Subject) && c.JSON && !c.All {
		// The reply as it came, as for the other commands.
		_, _, err := c.ask(e, "ls", wire.VerbList, wire.ListRequest{Subject: c.Subject, Limit: limit(c.Limit), After: c.After})
		return err
	}
	cl, err := c.dial("ls", e)
	if err != nil {
		return err
	}
	defer cl.close()
	if !isFilter(c.Subject) {
		r, err := c.list(cl, c.Subject, c.After)
		if err != nil {
			return err
		}
		if c.JSON {
			r.Next = ""
			return printValue(e, r)
		}
		return c.print(e, []wire.ListReply{r}, false)
	}
	subjects, err := allSubjects(cl, c.Subject)
	if err != nil {
		return err
	}
	out := lsFilterReply{Filter: c.Subject, Subjects: []wire.ListReply{}}
	for _, s := range subjects {
		r, err := c.list(cl, s.Subject, "")
		if err != nil {
			return err
		}
		out.Subjects = append(out.Subjects, r)
	}
	if c.JSON {
		return printValue(e, out)
	}
	return c.print(e, out.Subjects, true)
}

// print writes the messages of rs as one table, with a SUBJECT column for
// a filter, then says how many there are or how to get more.
func (c *lsCmd) print(e *env, rs []wire.ListReply, filter bool) error {
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	head := "TAG\tID\tFIRE AT\tATTEMPT\tSIZE\tACK\tEXPIRE AT"
	if filter {
		head = "SUBJECT\t" + head
	}
	fmt.Fprintln(tw, head)
	n := 0
	for _, r := range rs {
		for _, m := range r.Messages {
			if filter {
				fmt.Fprintf(tw, "%s\t", m.Subject)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\n", m.Tag, orNone(m.ID == "", "-", m.ID), m.FireAt,
				m.Attempt, m.Size, m.Ack, orNone(m.ExpireAt == "", "-", m.ExpireAt))
			n++
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range rs {
		if r.Next != "" {
			if _, err := fmt.Fprintf(e.stdout, "more: natsdelay ls %s --after %s, or --all\n", r.Subject, r.Next); err != nil {
				return err
			}
		}
	}
	var err error
	switch {
	case !filter && rs[0].Next == "":
		_, err = fmt.Fprintf(e.stdout, "%d pending on %s\n", n, c.Subject)
	case filter:
		_, err = fmt.Fprintf(e.stdout, "%d listed on %s matching %s\n", n, counted(len(rs), "subject"), c.Subject)
	}
	return err
}

// printValue prints v as JSON on one line.
func printValue(e *env, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return printJSON(e.stdout, b)
}
