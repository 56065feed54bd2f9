package main

import (
	"github.com/natsdelay/natsdelay/bridge/wire"
)

// fireCmd makes pending messages due now: one, or every one a filter
// matches.
type fireCmd struct {
	apiFlags    `embed:""`
	messageRef  `embed:""`
	filterFlags `embed:""`
}

func (c *fireCmd) check() error {
	var p problems
	if c.bulk() {
		if c.Tag != "" || c.Subject != "" || c.ID != "" {
			p.add("give a TAG, --subject with --id, or --filter: one of them")
		}
	} else {
		if err := c.missingRef("fire"); err != nil {
			return err
		}
		c.checkRef(&p)
	}
	c.checkAPI(&p)
	c.checkFilter(&p, false)
	return p.err()
}

func (c *fireCmd) Run(e *env) error {
	cl, err := c.dial("fire", e)
	if err != nil {
		return err
	}
	defer cl.close()
	if c.bulk() {
		return runBulk(cl, e, &c.filterFlags, c.JSON, "FIRE", "fired", c.request(false))
	}
	data, err := cl.call(wire.VerbFire, wire.MessageRef{Tag: c.Tag, Subject: c.Subject, ID: c.ID})
	if err != nil {
		return err
	}
	return printMoved(e, c.JSON, data)
}
