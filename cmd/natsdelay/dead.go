package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/cmd/internal/usage"
)

// deadCmd lists, replays and deletes the dead letters kept.
type deadCmd struct {
	Ls     deadLsCmd     `cmd:"" help:"List the dead letters kept, with their reason, attempts and last answer."`
	Replay deadReplayCmd `cmd:"" help:"Schedule dead letters again, due now: one by TAG, or every one a --filter matches."`
	Rm     deadRmCmd     `cmd:"" help:"Delete dead letters: one by TAG, or every one a --filter matches."`
}

// deadTarget names one dead letter by TAG, or many by --filter.
type deadTarget struct {
	Tag         string `arg:"" optional:"" help:"Tag the message had, as DEAD.LIST shows it."`
	filterFlags `embed:""`
}

func (t *deadTarget) checkTarget(p *problems, cmd string) error {
	if t.Tag == "" && !t.bulk() {
		return usage.Errorf("dead %[1]s: which dead letters? natsdelay dead %[1]s TAG, or natsdelay dead %[1]s --filter FILTER", cmd)
	}
	if t.Tag != "" && t.bulk() {
		p.add("give a TAG or --filter, not both")
	}
	t.checkFilter(p, true)
	return nil
}

// request is the bulk request of a TAG or of the filter flags.
func (t *deadTarget) request() wire.BulkRequest {
	if t.Tag != "" {
		one := 1
		return wire.BulkRequest{Filter: wire.Filter{Tag: t.Tag, State: "dead"}, Limit: &one}
	}
	return t.filterFlags.request(true)
}

type deadReplayCmd struct {
	apiFlags   `embed:""`
	deadTarget `embed:""`

	To string `help:"Send them to this subject instead of their own." placeholder:"SUBJECT" env:"-"`
}

func (c *deadReplayCmd) check() error {
	var p problems
	if err := c.checkTarget(&p, "replay"); err != nil {
		return err
	}
	if c.To != "" {
		checkSubject(&p, "--to", c.To, false)
	}
	c.checkAPI(&p)
	return p.err()
}

func (c *deadReplayCmd) Run(e *env) error {
	cl, err := c.dial("dead replay", e)
	if err != nil {
		return err
	}
	defer cl.close()
	req := c.request()
	req.ReplayTo = c.To
	if c.Tag != "" {
		c.Yes = true
	}
	return runBulk(cl, e, &c.filterFlags, c.JSON, "REPLAY", "replayed", req)
}

type deadRmCmd struct {
	apiFlags   `embed:""`
	deadTarget `embed:""`
}

func (c *deadRmCmd) check() error {
	var p problems
	if err := c.checkTarget(&p, "rm"); err != nil {
		return err
	}
	c.checkAPI(&p)
	return p.err()
}

func (c *deadRmCmd) Run(e *env) error {
	cl, err := c.dial("dead rm", e)
	if err != nil {
		return err
	}
	defer cl.close()
	if c.Tag != "" {
		c.Yes = true
	}
	return runBulk(cl, e, &c.filterFlags, c.JSON, "DELETE", "deleted", c.request())
}

type deadLsCmd struct {
	apiFlags    `embed:""`
	filterFlags `embed:""`
}

func (c *deadLsCmd) check() error {
	var p problems
	c.checkAPI(&p)
	if c.Filter == "" {
		c.Filter = ">"
	}
	c.checkFilter(&p, true)
	if c.DryRun || c.Yes || c.Cursor != "" || c.Op != "" {
		p.add("--dry-run, --yes, --cursor and --op do not go with dead ls")
	}
	return p.err()
}

func (c *deadLsCmd) Run(e *env) error {
	cl, err := c.dial("dead ls", e)
	if err != nil {
		return err
	}
	defer cl.close()
	br := c.request(true)
	limit := min(*br.Limit, 1000)
	req := wire.DeadListRequest{Filter: br.Filter, Limit: &limit}
	req.State = ""
	var all []wire.DeadLetterInfo
	for {
		var page wire.DeadListReply
		data, err := cl.call(wire.VerbDeadList, req)
		if err == nil {
			err = decodeReply(wire.VerbDeadList, data, &page)
		}
		if err != nil {
			return err
		}
		all = append(all, page.DeadLetters...)
		if page.Next == "" || page.Next == req.After {
			break
		}
		req.After = page.Next
	}
	if c.JSON {
		b, err := json.Marshal(wire.DeadListReply{DeadLetters: all})
		if err != nil {
			return err
		}
		return printJSON(e.stdout, b)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TAG\tSUBJECT\tID\tREASON\tATTEMPTS\tDIED AT\tLAST ANSWER")
	for _, d := range all {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", d.Tag, d.Subject, d.ID, d.Reason, d.Attempts, d.DiedAt, strings.TrimSpace(d.LastAnswer))
	}
	return tw.Flush()
}
