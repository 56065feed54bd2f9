package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge/wire"
)

// eventsCmd tails the lifecycle events a service started with --events
// publishes (docs/protocol.md, section 8).
type eventsCmd struct {
	clientFlags `embed:""`

	Filter      string   `arg:"" optional:"" default:">" help:"Target subjects whose events to print; wildcards allowed (default all)."`
	Kind        []string `help:"Only events of these kinds: scheduled, delivered, acked, nak, term, expired, dead, canceled, rescheduled, replayed." placeholder:"KIND,..." sep:"," env:"-"`
	EventPrefix string   `help:"The service's --event-prefix." default:"${event_prefix}" env:"-"`
	JSON        bool     `name:"json" help:"Print each event's JSON body as it came, one a line." env:"-"`
	Count       int      `help:"Exit after this many events; 0 runs until interrupted." default:"0" env:"-"`
}

func (c *eventsCmd) check() error {
	var p problems
	c.checkClient(&p)
	checkSubject(&p, "filter", c.Filter, true)
	checkSubject(&p, "--event-prefix", c.EventPrefix, false)
	for _, k := range c.Kind {
		if !slices.Contains(wire.EventKinds(), k) {
			p.add("--kind %q: want one of %s", k, strings.Join(wire.EventKinds(), ", "))
		}
	}
	if c.Count < 0 {
		p.add("--count %d: want a count > 0, or 0 to run until interrupted", c.Count)
	}
	return p.err()
}

// subjects are the event subjects to subscribe to: one for every kind,
// or one a kind of --kind.
func (c *eventsCmd) subjects() []string {
	if len(c.Kind) == 0 {
		return []string{c.EventPrefix + ".*." + c.Filter}
	}
	var s []string
	for _, k := range c.Kind {
		s = append(s, c.EventPrefix+"."+k+"."+c.Filter)
	}
	return s
}

// Run prints events until --count or SIGINT/SIGTERM. Events are best
// effort: the service drops them when its queue is full, and this
// connection loses them if it does not keep up (a slow consumer), which
// it reports.
func (c *eventsCmd) Run(e *env) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	nc, err := c.connect("natsdelay events", e.log)
	if err != nil {
		return err
	}
	defer nc.Close()
	msgs := make(chan *nats.Msg, 1024)
	for _, s := range c.subjects() {
		if _, err := nc.ChanSubscribe(s, msgs); err != nil {
			return fmt.Errorf("subscribe to %s: %w", s, err)
		}
	}
	if err := nc.Flush(); err != nil {
		return fmt.Errorf("subscribe to %s: %w", strings.Join(c.subjects(), ", "), err)
	}
	e.log.Info("subscribed", "subjects", strings.Join(c.subjects(), ","), "nats_url", nc.ConnectedUrlRedacted())
	for n := 0; c.Count == 0 || n < c.Count; n++ {
		select {
		case m := <-msgs:
			if err := c.print(e.stdout, m); err != nil {
				return err
			}
		case <-ctx.Done():
			return nil
		}
	}
	return nil
}

// print writes one line for the event m: its JSON with --json, else its
// time, kind, subject and what else it tells.
func (c *eventsCmd) print(w io.Writer, m *nats.Msg) error {
	if c.JSON {
		return printJSON(w, m.Data)
	}
	var ev wire.Event
	if err := json.Unmarshal(m.Data, &ev); err != nil {
		_, err := fmt.Fprintf(w, "%s: not an event: %q\n", m.Subject, m.Data)
		return err
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s %-11s %s tag=%s attempt=%d fire_at=%s", ev.At, ev.Kind, ev.Subject, ev.Tag, ev.Attempt, ev.FireAt)
	for _, f := range []struct{ name, v string }{
		{"id", ev.ID}, {"previous_fire_at", ev.PreviousFireAt}, {"to", ev.To}, {"reason", ev.Reason},
	} {
		switch {
		case strings.ContainsAny(f.v, " \t\""):
			fmt.Fprintf(&sb, " %s=%q", f.name, f.v)
		case f.v != "":
			fmt.Fprintf(&sb, " %s=%s", f.name, f.v)
		}
	}
	_, err := fmt.Fprintln(w, sb.String())
	return err
}
