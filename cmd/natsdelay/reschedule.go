package main

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/natsdelay/natsdelay/bridge/wire"
)

// rescheduleCmd moves pending messages to another fire time: one, or every
// one a filter matches.
type rescheduleCmd struct {
	apiFlags    `embed:""`
	messageRef  `embed:""`
	filterFlags `embed:""`

	At    string        `help:"New fire time: RFC 3339, a date (UTC) or Unix seconds; a time past means due now." placeholder:"TIME" env:"-"`
	Shift time.Duration `help:"Move the fire time by this much, such as 1h or -30m; never before now." env:"-"`
}

func (c *rescheduleCmd) check() error {
	var p problems
	if c.bulk() {
		if c.Tag != "" || c.Subject != "" || c.ID != "" {
			p.add("give a TAG, --subject with --id, or --filter: one of them")
		}
	} else {
		if err := c.missingRef("reschedule"); err != nil {
			return err
		}
		c.checkRef(&p)
	}
	if (c.At == "") == (c.Shift == 0) {
		p.add("give one of --at and --shift")
	}
	if _, err := filterTime(c.At); err != nil {
		p.add("--at %q: %v", c.At, err)
	}
	c.checkAPI(&p)
	c.checkFilter(&p, false)
	return p.err()
}

func (c *rescheduleCmd) Run(e *env) error {
	cl, err := c.dial("reschedule", e)
	if err != nil {
		return err
	}
	defer cl.close()
	at, _ := filterTime(c.At)
	shift := ""
	if c.Shift != 0 {
		shift = c.Shift.String()
	}
	if c.bulk() {
		req := c.request(false)
		req.At, req.Shift = at, shift
		return runBulk(cl, e, &c.filterFlags, c.JSON, "RESCHEDULE", "rescheduled", req)
	}
	data, err := cl.call(wire.VerbReschedule, wire.RescheduleRequest{Tag: c.Tag, Subject: c.Subject, ID: c.ID, At: at, Shift: shift})
	if err != nil {
		return err
	}
	return printMoved(e, c.JSON, data)
}

// printMoved prints the reply of RESCHEDULE or FIRE.
func printMoved(e *env, asJSON bool, data []byte) error {
	if asJSON {
		return printJSON(e.stdout, data)
	}
	var r wire.RescheduleReply
	if err := json.Unmarshal(data, &r); err != nil {
		return fmt.Errorf("reply %q: %w", data, err)
	}
	_, err := fmt.Fprintf(e.stdout, "%s %s fires at %s\n", r.Tag, r.Subject, r.FireAt)
	return err
}
