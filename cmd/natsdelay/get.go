package main

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"slices"
	"strconv"
	"text/tabwriter"
	"unicode"
	"unicode/utf8"

	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/cmd/internal/usage"
)

// messageRef is a TAG argument or --subject with --id, as GET and CANCEL
// take them.
type messageRef struct {
	Tag     string `arg:"" optional:"" help:"Delivery tag of the message, as pub printed it."`
	Subject string `help:"Target subject of the message, with --id." env:"-"`
	ID      string `name:"id" help:"Client id (Delay-Id) of the message, with --subject." env:"-"`
}

// missingRef is the usage error of get or cancel given no message at all:
// it says how to name one, and nothing else.
func (r *messageRef) missingRef(cmd string) error {
	if r.Tag != "" || r.Subject != "" || r.ID != "" {
		return nil
	}
	return usage.Errorf("%[1]s: which message? natsdelay %[1]s TAG, or natsdelay %[1]s --subject SUBJECT --id ID; natsdelay help %[1]s tells more", cmd)
}

func (r *messageRef) checkRef(p *problems) {
	switch {
	case r.Tag != "" && (r.Subject != "" || r.ID != ""):
		p.add("give a TAG or --subject with --id, not both")
	case r.Tag == "" && (r.Subject == "" || r.ID == ""):
		p.add("--subject and --id go together: give both, or a TAG")
	}
	if r.Subject != "" {
		checkSubject(p, "--subject", r.Subject, false)
	}
}

// getCmd prints one pending message.
type getCmd struct {
	apiFlags   `embed:""`
	messageRef `embed:""`

	Payload bool `help:"Also print the payload." env:"-"`
	Next    int  `help:"For an occurrence of a recurring schedule, how many next times to print, 1 to 100; 0 is the service's default (5)." placeholder:"N" env:"-"`
}

func (c *getCmd) check() error {
	if err := c.missingRef("get"); err != nil {
		return err
	}
	var p problems
	c.checkAPI(&p)
	c.checkRef(&p)
	checkNext(&p, c.Next)
	return p.err()
}

// checkNext checks a --next of next times to show.
func checkNext(p *problems, n int) {
	if n < 0 || n > wire.MaxUpcoming {
		p.add("--next %d: want 1 to %d next times, or 0 for the service's default", n, wire.MaxUpcoming)
	}
}

func (c *getCmd) Run(e *env) error {
	req := wire.GetRequest{MessageRef: wire.MessageRef{Tag: c.Tag, Subject: c.Subject, ID: c.ID, Payload: c.Payload}, Upcoming: c.Next}
	m, printed, err := askFor[wire.MessageInfo](&c.apiFlags, e, "get", wire.VerbGet, req)
	if err != nil || printed {
		return err
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	row := func(k string, v any) { fmt.Fprintf(tw, "%s\t%v\n", k, v) }
	row("tag", m.Tag)
	row("subject", m.Subject)
	row("id", orNone(m.ID == "", "-", m.ID))
	row("fire at", m.FireAt)
	row("enqueued at", m.EnqueuedAt)
	row("expire at", orNone(m.ExpireAt == "", "never", m.ExpireAt))
	row("attempt", m.Attempt)
	row("ack", m.Ack)
	row("max deliver", orNone(m.MaxDeliver == 0, "service default", strconv.FormatUint(uint64(m.MaxDeliver), 10)))
	row("size", m.Size)
	names := make([]string, 0, len(m.Headers))
	for k := range m.Headers {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		for _, v := range m.Headers[k] {
			row("header", k+": "+v)
		}
	}
	if s := m.Schedule; s != nil {
		row("schedule", s.Name)
		row("spec", s.Spec)
		row("zone", s.Zone)
		row("until", orNone(s.Until == "", "-", s.Until))
		row("limit", orNone(s.Limit == 0, "-", strconv.FormatUint(s.Limit, 10)))
		row("catch-up", s.CatchUp)
		row("occurrence", fmt.Sprintf("%s (#%d)", s.Occurrence, s.Seq))
		row("fired", s.Fired)
		row("skipped", s.Skipped)
		if s.Skip > 0 {
			row("to skip", s.Skip)
		}
		if s.Exclude != "" {
			row("exclude", s.Exclude)
		}
		if s.Jitter != "" {
			row("jitter", s.Jitter)
		}
		if s.JSScheduler != "" {
			row("jetstream schedule", s.JSScheduler)
		}
		if len(s.Next) == 0 {
			row("next", "none: this is the last")
		}
		for _, n := range s.Next {
			row("next", n)
		}
	}
	if c.Payload {
		row("payload", showPayload(m.Payload))
	}
	return tw.Flush()
}

// showPayload prints b as text when it is printable, else as base64, so a
// binary payload cannot garble the terminal.
func showPayload(b []byte) string {
	if utf8.Valid(b) && !bytes.ContainsFunc(b, func(r rune) bool { return !unicode.IsPrint(r) && r != ' ' }) {
		return string(b)
	}
	return "base64:" + base64.StdEncoding.EncodeToString(b)
}
