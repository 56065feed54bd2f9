package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/natsdelay/natsdelay/bridge/wire"

	"github.com/nats-io/nats.go"
)

// pubCmd schedules one message with a request to the ingest prefix, as any
// NATS client would.
type pubCmd struct {
	clientFlags `embed:""`

	Subject string `arg:"" help:"Target subject: where the message is published when due."`
	Data    string `arg:"" optional:"" help:"Payload; - reads it from stdin. Empty when left out."`

	Delay        string        `help:"Delay before delivery: a Go duration (90s, 1h30m), whole days first (7d, 1d12h), or integer milliseconds." xor:"when" env:"-"`
	At           string        `help:"Fire time: RFC 3339 (2026-12-24T18:00:00Z) or Unix seconds." placeholder:"TIME" xor:"when" env:"-"`
	TTL          string        `name:"ttl" help:"Expire the message if it is not ACKed by fire time + TTL; days as in --delay." placeholder:"DURATION" env:"-"`
	ID           string        `name:"id" help:"Client id, unique per subject: scheduling the same id again replaces the pending message." env:"-"`
	Ack          string        `help:"Ack policy: explicit deletes on ACK, none once published." enum:"explicit,none" default:"explicit" env:"-"`
	MaxDeliver   int           `help:"Deliveries after which the unACKed message is dead-lettered; 0 leaves it to the service." default:"0" env:"-"`
	Every        string        `help:"Recurring: deliver again every interval (at least 100ms; days as in --delay); --delay or --at give the first time." placeholder:"DURATION" xor:"repeat" env:"-"`
	Cron         string        `help:"Recurring: deliver on a cron spec, 5 fields (minutes), 6 (seconds first), or @daily and the like." placeholder:"SPEC" xor:"repeat" env:"-"`
	TZ           string        `name:"tz" help:"IANA zone of --cron, such as Europe/Berlin; default UTC." placeholder:"ZONE" env:"-"`
	Until        string        `help:"Recurring: no occurrence after this time, RFC 3339 or Unix seconds." placeholder:"TIME" env:"-"`
	Limit        int           `help:"Recurring: at most this many occurrences; 0 is no limit." default:"0" env:"-"`
	CatchUp      string        `help:"Recurring: occurrences missed while the service was down: one, all or none; empty leaves it to the service (one)." placeholder:"POLICY" env:"-"`
	Overlap      string        `help:"Recurring: an occurrence due while the one before is unanswered: allow, skip or buffer-one; empty leaves it to the service (allow)." placeholder:"POLICY" env:"-"`
	Exclude      string        `help:"Recurring: dates on which no occurrence fires, in the schedule's zone (--tz; UTC for --every), such as 2026-12-25,2027-02-01..2027-02-07." placeholder:"DATES" env:"-"`
	Jitter       string        `help:"Recurring: each occurrence goes out at a fixed random point up to this long after its planned time, never before; under the gap between occurrences." placeholder:"DURATION" env:"-"`
	Debounce     string        `help:"Debounce the --id: due this long after this publish, replacing the pending one, so a burst is delivered once, with its last message; days as in --delay. Not with --delay or --at." placeholder:"DURATION" env:"-"`
	DebounceMax  string        `help:"With --debounce: deliver a burst that never pauses at the latest this long after its first publish." placeholder:"DURATION" env:"-"`
	Throttle     string        `help:"Throttle the --id: at most one delivery per this long; a publish while the next delivery is held folds into it, replacing its message; days as in --delay. Not with --delay, --at or --debounce." placeholder:"DURATION" env:"-"`
	Header       []string      `short:"H" help:"Header to store and deliver, as K:V; repeatable." placeholder:"K:V" sep:"none" env:"-"`
	Timeout      time.Duration `help:"How long to wait for the reply." default:"5s" env:"-"`
	JSON         bool          `name:"json" help:"Print the service's JSON reply instead of a line of text." env:"-"`
	IngestPrefix string        `help:"Ingest prefix of the service." default:"${ingest_prefix}"`
}

func (c *pubCmd) check() error {
	var p problems
	c.checkClient(&p)
	checkSubject(&p, "subject", c.Subject, false)
	if c.Limit < 0 {
		p.add("--limit %d: want a count > 0, or 0 for no limit", c.Limit)
	}
	if c.MaxDeliver < 0 {
		p.add("--max-deliver %d: want a count > 0, or 0 for the service's default", c.MaxDeliver)
	}
	if c.Timeout <= 0 {
		p.add("--timeout %v: want a duration > 0, such as 5s", c.Timeout)
	}
	for _, h := range c.Header {
		if k, _, ok := strings.Cut(h, ":"); !ok || strings.TrimSpace(k) == "" {
			p.add("--header %q: want K:V, such as X-Trace:abc", h)
		}
	}
	c.checkDebounce(&p)
	if c.IngestPrefix == "" {
		p.add(`--ingest-prefix "": want the service's prefix, such as %s`, wire.DefaultIngestPrefix)
	}
	for _, f := range []struct {
		name string
		v    *string
	}{{"--delay", &c.Delay}, {"--ttl", &c.TTL}, {"--debounce", &c.Debounce}, {"--debounce-max", &c.DebounceMax}, {"--throttle", &c.Throttle}} {
		v, err := expandDays(*f.v)
		if err != nil {
			p.add("%s %q: %v", f.name, *f.v, err)
			continue
		}
		*f.v = v
	}
	return p.err()
}

// checkDebounce adds to p what --debounce, --debounce-max and --throttle lack: the
// service would refuse them the same, in its own words.
func (c *pubCmd) checkDebounce(p *problems) {
	switch {
	case c.DebounceMax != "" && c.Debounce == "":
		p.add("--debounce-max goes with --debounce")
	case c.Debounce == "":
	case c.ID == "":
		p.add("--debounce needs --id: the id names what is debounced")
	case c.Delay != "" || c.At != "":
		p.add("--debounce sets the fire time: give no --delay or --at with it")
	}
	switch {
	case c.Throttle == "":
	case c.ID == "":
		p.add("--throttle needs --id: the id names what is throttled")
	case c.Delay != "" || c.At != "":
		p.add("--throttle sets the fire time: give no --delay or --at with it")
	case c.Debounce != "":
		p.add("--throttle and --debounce: want one or the other")
	}
}

// expandDays turns a duration that starts with whole days, 7d or 1d12h,
// into the Go duration the service takes, 168h0m0s or 36h0m0s. Anything
// without a d is returned as it is, for the service to judge.
func expandDays(s string) (string, error) {
	if !strings.Contains(s, "d") {
		return s, nil
	}
	d, err := wire.ParseDays(s)
	switch {
	case errors.Is(err, wire.ErrDurationTooLong):
		return "", errors.New("too large: the latest fire time that can be stored is in 2262")
	case err != nil || d < 0:
		return "", errors.New("want whole days first, such as 7d or 1d12h, a Go duration such as 90s, or integer milliseconds")
	}
	return d.String(), nil
}

// Run sends the request and prints the answer. An error answer is printed
// and makes the exit code 1.
func (c *pubCmd) Run(e *env) error {
	m := nats.NewMsg(c.IngestPrefix + "." + c.Subject)
	for _, h := range c.Header {
		k, v, _ := strings.Cut(h, ":")
		m.Header.Add(strings.TrimSpace(k), strings.TrimSpace(v))
	}
	set := func(name, v string) {
		if v != "" {
			m.Header.Set(name, v)
		}
	}
	set(wire.HeaderDelay, c.Delay)
	set(wire.HeaderAt, c.At)
	set(wire.HeaderTTL, c.TTL)
	set(wire.HeaderID, c.ID)
	if c.Ack != "explicit" {
		set(wire.HeaderAck, c.Ack)
	}
	if c.MaxDeliver > 0 {
		set(wire.HeaderMaxDeliver, strconv.Itoa(c.MaxDeliver))
	}
	set(wire.HeaderEvery, c.Every)
	set(wire.HeaderCron, c.Cron)
	set(wire.HeaderTZ, c.TZ)
	set(wire.HeaderUntil, c.Until)
	if c.Limit > 0 {
		set(wire.HeaderLimit, strconv.Itoa(c.Limit))
	}
	set(wire.HeaderCatchUp, c.CatchUp)
	set(wire.HeaderOverlap, c.Overlap)
	set(wire.HeaderExclude, c.Exclude)
	set(wire.HeaderJitter, c.Jitter)
	set(wire.HeaderDebounce, c.Debounce)
	set(wire.HeaderDebounceMax, c.DebounceMax)
	set(wire.HeaderThrottle, c.Throttle)
	m.Data = []byte(c.Data)
	if c.Data == "-" {
		b, err := io.ReadAll(e.stdin)
		if err != nil {
			return fmt.Errorf("read the payload from stdin: %w", err)
		}
		m.Data = b
	}

	nc, err := c.connect("natsdelay pub", e.log)
	if err != nil {
		return err
	}
	defer nc.Close()
	rep, err := nc.RequestMsg(m, c.Timeout)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return fmt.Errorf("nothing answers on %s: is natsdelay serve running there, with --ingest-prefix %s?", m.Subject, c.IngestPrefix)
	case errors.Is(err, nats.ErrTimeout):
		return fmt.Errorf("no answer on %s within %v", m.Subject, c.Timeout)
	case err != nil:
		return fmt.Errorf("request on %s: %w", m.Subject, err)
	}
	if err := replyError(rep); err != nil {
		return err
	}
	if c.JSON {
		_, err := fmt.Fprintf(e.stdout, "%s\n", rep.Data)
		return err
	}
	var s wire.ScheduleReply
	if err := json.Unmarshal(rep.Data, &s); err != nil || s.Tag == "" {
		return fmt.Errorf("unexpected reply on %s: %q", m.Subject, rep.Data)
	}
	if s.Duplicate {
		_, err = fmt.Fprintf(e.stdout, "duplicate of %s tag=%s fire_at=%s: stored before, within the duplicate window\n", s.Subject, s.Tag, s.FireAt)
		return err
	}
	if s.Folded {
		_, err = fmt.Fprintf(e.stdout, "folded into %s tag=%s fire_at=%s: the throttle's next delivery, with this message\n", s.Subject, s.Tag, s.FireAt)
		return err
	}
	_, err = fmt.Fprintf(e.stdout, "scheduled %s tag=%s fire_at=%s\n", s.Subject, s.Tag, s.FireAt)
	return err
}

// header returns the first value of h named name in any case: NATS headers
// are case-sensitive, but a client should not depend on the case a service
// writes them in.
func header(h nats.Header, name string) string {
	if v := h.Get(name); v != "" {
		return v
	}
	for k, vs := range h {
		if strings.EqualFold(k, name) && len(vs) > 0 {
			return vs[0]
		}
	}
	return ""
}
