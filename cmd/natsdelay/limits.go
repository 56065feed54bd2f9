package main

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/natsdelay/natsdelay/bridge/wire"
)

// limitsCmd groups the flow-control commands on subject patterns, over
// the API's LIMITS verbs.
type limitsCmd struct {
	Set limitsSetCmd `cmd:"" help:"Set the limit of a subject pattern: max in flight, rate and burst, paused; of each matching subject, of them together (--whole) or of each value of a header (--key-header)."`
	Ls  limitsLsCmd  `cmd:"" name:"ls" help:"List every limit, most specific pattern first."`
	Get limitsGetCmd `cmd:"" help:"Print the limit of a pattern."`
	Rm  limitsRmCmd  `cmd:"" name:"rm" help:"Delete the limit of a pattern: its subjects get the defaults again."`
}

// limitsSetCmd sets a pattern's limit.
type limitsSetCmd struct {
	apiFlags `embed:""`

	Pattern     string `arg:"" optional:"" help:"A subject or a pattern with wildcards, such as orders.> or tenant.*.mail; with --key-header, > when not given."`
	MaxInFlight int    `name:"max-in-flight" help:"Deliveries of each matching subject (or group) not yet answered, at most; 0 keeps the default share." default:"0" env:"-"`
	Rate        string `help:"Deliveries of each matching subject (or group) per second at most: 50/s, 3000/m, 10/h or a number per second; empty for no rate." placeholder:"RATE" env:"-"`
	Burst       int    `help:"Deliveries at once above the rate; 0 is a tenth of a second's worth, at least 1." default:"0" env:"-"`
	Paused      bool   `help:"Set the pattern paused (see natsdelay pause)." env:"-"`
	Whole       bool   `help:"Bound the matching subjects together, as one group, not each of them." env:"-"`
	KeyHeader   string `name:"key-header" help:"Bound each value of this header (a tenant), over all the matching subjects, not each subject; messages without it are not bound." placeholder:"NAME" env:"-"`

	rate float64
}

func (c *limitsSetCmd) check() error {
	var p problems
	c.checkAPI(&p)
	if c.Pattern == "" && c.KeyHeader != "" {
		c.Pattern = ">" // a tenant's share over every subject
	}
	checkSubject(&p, "pattern", c.Pattern, true)
	if c.Whole && c.KeyHeader != "" {
		p.add("--whole and --key-header: want one of them, the subjects together or each value of the header")
	}
	if c.MaxInFlight < 0 {
		p.add("--max-in-flight %d: want a count > 0, or 0 for the default share", c.MaxInFlight)
	}
	if c.Rate != "" {
		r, err := parseRate(c.Rate)
		if err != nil {
			p.add("--rate %q: %v", c.Rate, err)
		}
		c.rate = r
	}
	if c.Burst < 0 {
		p.add("--burst %d: want a count > 0, or 0 for the default", c.Burst)
	}
	if c.Burst > 0 && c.Rate == "" {
		p.add("--burst %d: only applies with --rate", c.Burst)
	}
	return p.err()
}

func (c *limitsSetCmd) Run(e *env) error {
	req := wire.Limit{Pattern: c.Pattern, MaxInFlight: c.MaxInFlight, Rate: c.rate, Burst: c.Burst, Paused: c.Paused,
		Whole: c.Whole, KeyHeader: c.KeyHeader}
	return c.limitCall(e, "limits set", wire.VerbLimitsSet, req)
}

// parseRate reads a rate as N/s, N/m, N/h or N (per second), in
// deliveries per second.
func parseRate(v string) (float64, error) {
	num, unit, hasUnit := strings.Cut(v, "/")
	per := 1.0
	if hasUnit {
		switch unit {
		case "s":
		case "m":
			per = 60
		case "h":
			per = 3600
		default:
			return 0, fmt.Errorf("unit %q: want s, m or h, such as 50/s", unit)
		}
	}
	n, err := strconv.ParseFloat(num, 64)
	if err != nil || n <= 0 || n > 1e9 {
		return 0, fmt.Errorf("want a number of deliveries above 0 and at most 1e9, then /s, /m or /h, such as 50/s")
	}
	return n / per, nil
}

// patternCmd is a command on one pattern.
type patternCmd struct {
	apiFlags `embed:""`

	Pattern string `arg:"" help:"A subject or a pattern with wildcards, such as orders.>."`
}

func (c *patternCmd) check() error {
	var p problems
	c.checkAPI(&p)
	checkSubject(&p, "pattern", c.Pattern, true)
	return p.err()
}

type limitsGetCmd struct{ patternCmd }

func (c *limitsGetCmd) Run(e *env) error {
	return c.limitCall(e, "limits get", wire.VerbLimitsGet, wire.PatternRequest{Pattern: c.Pattern})
}

type limitsRmCmd struct{ patternCmd }

func (c *limitsRmCmd) Run(e *env) error {
	_, printed, err := c.ask(e, "limits rm", wire.VerbLimitsDelete, wire.PatternRequest{Pattern: c.Pattern})
	if err != nil || printed {
		return err
	}
	_, err = fmt.Fprintf(e.stdout, "deleted the limit of %s\n", c.Pattern)
	return err
}

// pauseCmd holds back every delivery of the subjects a pattern matches.
type pauseCmd struct{ patternCmd }

func (c *pauseCmd) Run(e *env) error {
	return c.limitCall(e, "pause", wire.VerbPause, wire.PatternRequest{Pattern: c.Pattern})
}

// resumeCmd delivers a paused pattern's subjects again, in fire order.
type resumeCmd struct{ patternCmd }

func (c *resumeCmd) Run(e *env) error {
	return c.limitCall(e, "resume", wire.VerbResume, wire.PatternRequest{Pattern: c.Pattern})
}

// limitCall sends req and prints the limit the service answers with.
func (c *apiFlags) limitCall(e *env, name, verb string, req any) error {
	l, printed, err := askFor[wire.Limit](c, e, name, verb, req)
	if err != nil || printed {
		return err
	}
	return printLimits(e, []wire.Limit{l})
}

// limitsLsCmd lists every limit.
type limitsLsCmd struct {
	apiFlags `embed:""`
}

func (c *limitsLsCmd) check() error {
	var p problems
	c.checkAPI(&p)
	return p.err()
}

func (c *limitsLsCmd) Run(e *env) error {
	r, printed, err := askFor[wire.LimitsReply](&c.apiFlags, e, "limits ls", wire.VerbLimitsList, nil)
	if err != nil || printed {
		return err
	}
	if len(r.Limits) == 0 {
		_, err := fmt.Fprintln(e.stdout, "no limits: every subject has the default share of the in-flight window")
		return err
	}
	return printLimits(e, r.Limits)
}

func printLimits(e *env, ls []wire.Limit) error {
	var buf bytes.Buffer
	tw := tabwriter.NewWriter(&buf, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PATTERN\tMAX IN FLIGHT\tRATE/S\tBURST\tPAUSED")
	for _, l := range ls {
		fmt.Fprintf(tw, "%s%s\t%s\t%s\t%s\t%v\n", l.Pattern, perText(l), orDefault(l.MaxInFlight), rateText(l.Rate), orDefault(l.Burst), l.Paused)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return trimLines(e.stdout, buf.Bytes())
}

// perText is what a grouped limit bounds, after its pattern: the
// subjects together, or each value of a header; nothing for a limit of
// each subject.
func perText(l wire.Limit) string {
	switch {
	case l.Whole:
		return " (together)"
	case l.KeyHeader != "":
		return " (each " + l.KeyHeader + ")"
	}
	return ""
}

func orDefault(n int) string {
	if n == 0 {
		return "default"
	}
	return strconv.Itoa(n)
}

func rateText(r float64) string {
	if r == 0 {
		return "none"
	}
	return strconv.FormatFloat(r, 'g', 6, 64)
}
