package main

import (
	"fmt"

	"github.com/natsdelay/natsdelay/bridge/wire"
)

// cancelCmd removes pending messages before they are delivered: one, or
// every one a filter matches.
type cancelCmd struct {
	apiFlags    `embed:""`
	messageRef  `embed:""`
	filterFlags `embed:""`
}

func (c *cancelCmd) check() error {
	var p problems
	if c.bulk() {
		if c.Tag != "" || c.Subject != "" || c.ID != "" {
			p.add("give a TAG, --subject with --id, or --filter: one of them")
		}
	} else {
		if err := c.missingRef("cancel"); err != nil {
			return err
		}
		c.checkRef(&p)
	}
	c.checkAPI(&p)
	c.checkFilter(&p, false)
	return p.err()
}

func (c *cancelCmd) Run(e *env) error {
	if c.bulk() {
		cl, err := c.dial("cancel", e)
		if err != nil {
			return err
		}
		defer cl.close()
		return runBulk(cl, e, &c.filterFlags, c.JSON, "CANCEL", "canceled", c.request(false))
	}
	_, printed, err := c.ask(e, "cancel", wire.VerbCancel, wire.MessageRef{Tag: c.Tag, Subject: c.Subject, ID: c.ID})
	if err != nil || printed {
		return err
	}
	if c.Tag != "" {
		_, err = fmt.Fprintf(e.stdout, "canceled %s\n", c.Tag)
	} else {
		_, err = fmt.Fprintf(e.stdout, "canceled %s id=%s\n", c.Subject, c.ID)
	}
	return err
}
