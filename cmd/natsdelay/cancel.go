package main

import (
	"fmt"

	"natsdelay/bridge/wire"
)

// cancelCmd removes one pending message before it is delivered.
type cancelCmd struct {
	apiFlags   `embed:""`
	messageRef `embed:""`
}

func (c *cancelCmd) check() error {
	if err := c.missingRef("cancel"); err != nil {
		return err
	}
	var p problems
	c.checkAPI(&p)
	c.checkRef(&p)
	return p.err()
}

func (c *cancelCmd) Run(e *env) error {
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
