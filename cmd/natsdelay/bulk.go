package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/schollz/progressbar/v3"

	"github.com/natsdelay/natsdelay/bridge/client"
	"github.com/natsdelay/natsdelay/bridge/wire"
)

// filterFlags select many messages for cancel, reschedule, fire and the
// dead commands: the filter of the bulk API (docs/protocol.md section 8).
type filterFlags struct {
	Filter       string   `help:"Act on every message this subject filter (wildcards allowed, such as orders.>) and the other filter flags match, instead of one TAG." placeholder:"FILTER" env:"-"`
	From         string   `help:"With --filter: only messages due at or after this time: RFC 3339, a date (2027-01-01, UTC) or Unix seconds." placeholder:"TIME" env:"-"`
	Before       string   `help:"With --filter: only messages due before this time: RFC 3339, a date (2027-01-01, UTC) or Unix seconds." placeholder:"TIME" env:"-"`
	InFlight     bool     `name:"in-flight" help:"With --filter: only messages delivered and not yet settled." env:"-"`
	MinAttempts  uint32   `help:"With --filter: only messages delivered at least this many times." env:"-"`
	Recurring    string   `help:"With --filter: yes for occurrences of recurring schedules only, no for one-off messages only." enum:",yes,no" default:"" env:"-"`
	IDPrefix     string   `name:"id-prefix" help:"With --filter: only messages whose Delay-Id starts with this." env:"-"`
	Header       []string `help:"With --filter: only messages with this header value, NAME=VALUE; repeat for more." placeholder:"NAME=VALUE" env:"-"`
	DryRun       bool     `name:"dry-run" help:"With --filter: count and show what would be done, and change nothing." env:"-"`
	Yes          bool     `help:"With --filter: do not ask before acting on more than --confirm-above messages." env:"-"`
	ConfirmAbove int      `name:"confirm-above" help:"With --filter: ask before acting on more messages than this, unless --yes." default:"100" env:"-"`
	Limit        int      `help:"With --filter: messages per step (1 to 10000); each step is one request, resumable. A step waits at least 1m for its reply, and one that got none is sent again with half the limit." default:"1000" env:"-"`
	Cursor       string   `help:"With --filter: resume an operation from the cursor it printed when it stopped." env:"-"`
	Op           string   `help:"With --filter: the id of the operation, which it prints as it starts (default: a new one). Given again, with --cursor or alone, it resumes that operation: a message it moved already is left as it is." env:"-"`
}

// bulk reports whether the command acts on a filter rather than one message.
func (f *filterFlags) bulk() bool { return f.Filter != "" || f.Cursor != "" }

func (f *filterFlags) checkFilter(p *problems, dead bool) {
	if !f.bulk() {
		if f.From != "" || f.Before != "" || f.InFlight || f.MinAttempts != 0 || f.Recurring != "" || f.IDPrefix != "" || len(f.Header) > 0 || f.DryRun || f.Yes || f.Op != "" {
			p.add("--from, --before, --in-flight, --min-attempts, --recurring, --id-prefix, --header, --dry-run, --yes and --op go with --filter")
		}
		return
	}
	if f.Filter != "" {
		checkSubject(p, "--filter", f.Filter, true)
	}
	if f.Limit < 1 || f.Limit > 10_000 {
		p.add("--limit %d: want 1 to 10000", f.Limit)
	}
	if f.Op != "" {
		if err := wire.CheckBulkOp(f.Op); err != nil {
			p.add("--op %q: %v", f.Op, err)
		}
	}
	if dead && f.InFlight {
		p.add("--in-flight: dead letters are not in flight")
	}
	for _, h := range f.Header {
		if name, _, ok := strings.Cut(h, "="); !ok || name == "" {
			p.add("--header %q: want NAME=VALUE", h)
		}
	}
	for _, t := range []struct{ flag, v string }{{"--from", f.From}, {"--before", f.Before}} {
		if _, err := filterTime(t.v); err != nil {
			p.add("%s %q: %v", t.flag, t.v, err)
		}
	}
}

// filterTime turns a date into RFC 3339 at midnight UTC, and leaves other
// times for the service to read.
func filterTime(v string) (string, error) {
	if v == "" {
		return "", nil
	}
	if d, err := time.Parse(time.DateOnly, v); err == nil {
		return d.UTC().Format(time.RFC3339), nil
	}
	if strings.Trim(v, "0123456789.") == "" {
		return v, nil
	}
	if _, err := time.Parse(time.RFC3339Nano, v); err != nil {
		return "", fmt.Errorf("want RFC 3339 such as 2027-01-01T00:00:00Z, a date such as 2027-01-01, or Unix seconds")
	}
	return v, nil
}

// request is the bulk request of the flags.
func (f *filterFlags) request(dead bool) wire.BulkRequest {
	r := wire.BulkRequest{Filter: wire.Filter{Subject: f.Filter, MinAttempts: f.MinAttempts, IDPrefix: f.IDPrefix}, Cursor: f.Cursor, Op: f.Op}
	r.From, _ = filterTime(f.From)
	r.To, _ = filterTime(f.Before)
	if f.InFlight {
		r.State = "in_flight"
	}
	if dead {
		r.State = "dead"
	}
	if f.Recurring != "" {
		yes := f.Recurring == "yes"
		r.Recurring = &yes
	}
	for _, h := range f.Header {
		name, v, _ := strings.Cut(h, "=")
		if r.Headers == nil {
			r.Headers = map[string]string{}
		}
		r.Headers[name] = v
	}
	limit := f.Limit
	r.Limit = &limit
	return r
}

// bulkStepTimeout is the least time a bulk step waits for its reply: a
// step of many moves on a cluster commits each through Raft, which takes
// longer than the default --timeout.
const bulkStepTimeout = time.Minute

// bulkTries is how many times a step is sent, with the same operation id,
// before the command stops.
const bulkTries = 4

// runBulk runs BULK.<verb> with req to its end: a dry run prints what it
// would do; a real run first counts, asks above --confirm-above unless
// --yes, and shows a progress bar on stderr while it runs the steps. past
// names what was done ("canceled"). A real run prints its operation id
// as it starts, and when a step fails, how to resume (see bulkSteps).
func runBulk(cl *apiClient, e *env, f *filterFlags, json bool, verb, past string, req wire.BulkRequest) error {
	steps, err := newAPIClient(cl.nc, cl.prefix, max(cl.timeout, bulkStepTimeout))
	if err != nil {
		return err
	}
	if f.DryRun {
		return bulkDryRun(steps, e, json, verb, past, req)
	}
	total := -1
	if !f.Yes {
		n, err := bulkCount(steps, e, verb, req, nil)
		if err != nil {
			return err
		}
		if n == 0 {
			_, err := fmt.Fprintf(e.stdout, "nothing matches: no message %s\n", past)
			return err
		}
		if n > f.ConfirmAbove {
			fmt.Fprintf(e.stdout, "%s %s? [y/N] ", strings.ToLower(verb), counted(n, "message"))
			line, _ := bufio.NewReader(e.stdin).ReadString('\n')
			if a := strings.ToLower(strings.TrimSpace(line)); a != "y" && a != "yes" {
				return fmt.Errorf("not confirmed: nothing %s", past)
			}
		}
		total = n
	}
	if req.Op == "" && req.Cursor == "" {
		// NB: chosen here, before the first step, so that a step whose
		// reply never came can be sent again, the first one too.
		req.Op = wire.NewBulkOp()
	}
	if req.Op != "" {
		fmt.Fprintf(e.stderr, "operation %s\n", req.Op)
	}
	return bulkSteps(steps, e, json, verb, past, req, total)
}

// bulkCount sums the counts of the dry run of req, calling show with each
// step's reply.
func bulkCount(cl *apiClient, e *env, verb string, req wire.BulkRequest, show func(wire.BulkReply) error) (int, error) {
	req.DryRun = true
	n := 0
	for {
		rep, err := bulkStep(cl, e, verb, &req)
		if err != nil {
			return n, cl.explain(wire.VerbBulk+"."+verb, err)
		}
		n += rep.Count
		if show != nil {
			if err := show(*rep); err != nil {
				return n, err
			}
		}
		if rep.Cursor == "" {
			return n, nil
		}
		req.Cursor = rep.Cursor
	}
}

// bulkDryRun prints what the operation would do: up to 10 of its
// messages and their count, or each step's reply with --json.
func bulkDryRun(cl *apiClient, e *env, json bool, verb, past string, req wire.BulkRequest) error {
	shown := 0
	n, err := bulkCount(cl, e, verb, req, func(rep wire.BulkReply) error {
		if json {
			return printStep(e, rep)
		}
		for _, s := range rep.Sample {
			if shown < 10 {
				fmt.Fprintf(e.stdout, "%s  %s  %s\n", s.Tag, s.Subject, s.FireAt)
			}
			shown++
		}
		return nil
	})
	if err != nil || json {
		return err
	}
	_, err = fmt.Fprintf(e.stdout, "would have %s %s (dry run: nothing changed)\n", past, counted(n, "message"))
	return err
}

// bulkSteps runs the steps of the operation req to its end, with a
// progress bar when total (-1: not counted) needs more than one step.
// When a step fails it prints the operation id and cursor to resume from.
func bulkSteps(cl *apiClient, e *env, json bool, verb, past string, req wire.BulkRequest, total int) error {
	var bar *progressbar.ProgressBar
	if total > *req.Limit && !json {
		bar = progressbar.NewOptions64(int64(total),
			progressbar.OptionSetWriter(e.stderr),
			progressbar.OptionSetDescription(past),
			progressbar.OptionSetWidth(30),
			progressbar.OptionShowCount(),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionClearOnFinish(),
		)
	}
	done, skipped := 0, 0
	for {
		rep, err := bulkStep(cl, e, verb, &req)
		if err != nil {
			var resume []string
			if req.Op != "" {
				resume = append(resume, "--op "+req.Op)
			}
			if req.Cursor != "" {
				resume = append(resume, "--cursor "+req.Cursor)
			}
			if len(resume) > 0 {
				fmt.Fprintf(e.stderr, "stopped after %d %s; resume with %s\n", done, past, strings.Join(resume, " "))
			}
			return cl.explain(wire.VerbBulk+"."+verb, err)
		}
		done, skipped = done+rep.Count, skipped+rep.Skipped
		if json {
			if err := printStep(e, *rep); err != nil {
				return err
			}
		}
		if bar != nil {
			_ = bar.Add(rep.Count)
		}
		if rep.Cursor == "" {
			break
		}
		req.Cursor, req.Op = rep.Cursor, rep.Op
	}
	if bar != nil {
		_ = bar.Finish()
	}
	if json {
		return nil
	}
	if skipped > 0 {
		_, err := fmt.Fprintf(e.stdout, "%s %s; %d left as they are (in flight, recurring, or their Delay-Id is pending)\n", past, counted(done, "message"), skipped)
		return err
	}
	_, err := fmt.Fprintf(e.stdout, "%s %s\n", past, counted(done, "message"))
	return err
}

// bulkStep sends one step of req and returns its reply. A step that got
// no reply in time, or met a service between leaders, is sent again as it
// was, with the same operation id (its own, or the one of its cursor),
// at most bulkTries times in all: the service leaves what the operation
// did already as it is. After no reply
// in time, req's limit is halved, for this step and the next ones.
func bulkStep(cl *apiClient, e *env, verb string, req *wire.BulkRequest) (*wire.BulkReply, error) {
	for try := 1; ; try++ {
		rep, err := cl.bulk(verb, *req)
		if err == nil || try == bulkTries || !client.IsRetryable(err) {
			return rep, err
		}
		if errors.Is(err, nats.ErrTimeout) && *req.Limit > 1 {
			limit := *req.Limit / 2
			req.Limit = &limit
		} else {
			// No leader, or one shutting down: wait for the next one.
			time.Sleep(time.Duration(try) * time.Second)
		}
		fmt.Fprintf(e.stderr, "%v; sending the step again (--limit %d)\n", cl.explain(wire.VerbBulk+"."+verb, err), *req.Limit)
	}
}

// bulk sends one step of BULK.<verb> and returns its reply as it came,
// for --json to print so; bulkStep says when it is sent again.
func (cl *apiClient) bulk(verb string, req wire.BulkRequest) (*wire.BulkReply, error) {
	v := wire.VerbBulk + "." + verb
	data, err := cl.api.Request(context.Background(), v, req)
	if err != nil {
		return nil, err
	}
	var rep wire.BulkReply
	return &rep, decodeReply(v, data, &rep)
}

func printStep(e *env, rep wire.BulkReply) error {
	b, err := json.Marshal(rep)
	if err != nil {
		return err
	}
	return printJSON(e.stdout, b)
}
