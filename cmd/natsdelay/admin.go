package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"natsdelay/bridge/client"
	"natsdelay/bridge/wire"

	"github.com/nats-io/nats.go"
)

// apiFlags are the flags of the admin commands, which use only the
// request/reply API on <api-prefix>.<VERB>, as any client would.
type apiFlags struct {
	clientFlags `embed:""`

	APIPrefix string        `name:"api-prefix" help:"API prefix of the service." default:"${api_prefix}"`
	Timeout   time.Duration `help:"How long to wait for the reply." default:"5s" env:"-"`
	JSON      bool          `name:"json" help:"Print the service's JSON reply instead of a table." env:"-"`
}

func (c *apiFlags) checkAPI(p *problems) {
	c.checkClient(p)
	if c.Timeout <= 0 {
		p.add("--timeout %v: want a duration > 0, such as 5s", c.Timeout)
	}
	if c.APIPrefix == "" {
		p.add(`--api-prefix "": want the service's prefix, such as %s`, wire.DefaultAPIPrefix)
	}
}

// apiClient is one connection to the API, through the client package,
// with the command line's words for a service that does not answer.
type apiClient struct {
	nc      *nats.Conn
	api     *client.Client
	prefix  string
	timeout time.Duration
}

// newAPIClient is the API client of the command line on nc.
func newAPIClient(nc *nats.Conn, prefix string, timeout time.Duration) *apiClient {
	return &apiClient{nc: nc, prefix: prefix, timeout: timeout,
		api: client.New(nc, client.WithAPIPrefix(prefix), client.WithTimeout(timeout))}
}

// dial connects for the command name.
func (c *apiFlags) dial(name string, e *env) (*apiClient, error) {
	nc, err := c.connect("natsdelay "+name, e.log)
	if err != nil {
		return nil, err
	}
	return newAPIClient(nc, c.APIPrefix, c.Timeout), nil
}

func (cl *apiClient) close() { cl.nc.Close() }

// call sends req as JSON to <prefix>.<verb> and returns the reply body, or
// the error the service answered with, printed as "<code> <description>".
func (cl *apiClient) call(verb string, req any) ([]byte, error) {
	data, err := cl.api.Request(context.Background(), verb, req)
	return data, cl.explain(verb, err)
}

// explain adds to err, when nothing answered, where the command looked.
func (cl *apiClient) explain(verb string, err error) error {
	subj := cl.prefix + "." + verb
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return fmt.Errorf("nothing answers on %s: is natsdelay serve running there, with --api-prefix %s?", subj, cl.prefix)
	case errors.Is(err, nats.ErrTimeout):
		return fmt.Errorf("no answer on %s within %v", subj, cl.timeout)
	}
	return err
}

// replyError returns the error that m carries in the NATS micro
// convention, or nil; every command that talks to the service uses it, so
// they all print an error answer as "<code> <description>". The JSON body has
// the code as a number and is preferred; the headers are the micro
// convention that every error reply has.
func replyError(m *nats.Msg) error {
	return wire.ParseError(m.Header, m.Data)
}

// decodeReply decodes a reply body into v, blaming the verb if it does not fit.
func decodeReply(verb string, data []byte, v any) error {
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("unexpected %s reply %q: %w", verb, data, err)
	}
	return nil
}

// printJSON writes a reply body as it came, on one line.
func printJSON(w io.Writer, data []byte) error {
	_, err := fmt.Fprintf(w, "%s\n", bytes.TrimSpace(data))
	return err
}

// infoCmd prints the service's version, counts, stats and configuration.
type infoCmd struct {
	apiFlags `embed:""`
}

func (c *infoCmd) check() error {
	var p problems
	c.checkAPI(&p)
	return p.err()
}

func (c *infoCmd) Run(e *env) error {
	cl, err := c.dial("info", e)
	if err != nil {
		return err
	}
	defer cl.close()
	data, err := cl.call(wire.VerbInfo, nil)
	if err != nil {
		return err
	}
	if c.JSON {
		return printJSON(e.stdout, data)
	}
	var r wire.InfoReply
	if err := decodeReply(wire.VerbInfo, data, &r); err != nil {
		return err
	}
	// NB: the blank lines between the groups keep one tab, so that all the
	// groups share one column width; trimLines drops the padding it leaves.
	var buf bytes.Buffer
	tw := tabwriter.NewWriter(&buf, 0, 4, 2, ' ', 0)
	row := func(k string, v any) { fmt.Fprintf(tw, "%s\t%v\n", k, v) }
	row("version", r.Version)
	row("engine", r.Engine)
	fmt.Fprintln(tw, "\t")
	row("pending", r.Counts.Pending)
	row("subjects", r.Counts.Subjects)
	row("in flight", r.Counts.InFlight)
	row("due now", r.Counts.DueNow)
	row("due within 1m", r.Counts.NextMinute)
	row("due within 1h", r.Counts.NextHour)
	row("due within 24h", r.Counts.NextDay)
	row("schedules", r.Counts.Schedules)
	fmt.Fprintln(tw, "\t")
	st := r.Stats
	row("delivered", st.Delivered)
	row("redelivered", st.Redelivered)
	row("acked", st.Acked)
	row("nacked", st.Nacked)
	row("progress", st.Progress)
	row("termed", st.Termed)
	row("dead lettered", st.DeadLettered)
	row("expired", st.Expired)
	row("canceled", st.Canceled)
	row("no responders", st.NoResponders)
	row("undeliverable", st.Undeliverable)
	row("window evictions", st.Evicted)
	row("skipped", st.Skipped)
	fmt.Fprintln(tw, "\t")
	cf := r.Config
	row("ingest prefix", cf.IngestPrefix)
	row("ack prefix", cf.AckPrefix)
	row("api prefix", cf.APIPrefix)
	row("ack wait", cf.AckWait)
	row("max deliver", orNone(cf.MaxDeliver == 0, "unlimited", strconv.FormatUint(uint64(cf.MaxDeliver), 10)))
	row("backoff", orNone(len(cf.Backoff) == 0, "none", strings.Join(cf.Backoff, ",")))
	row("dead letter", orNone(cf.DeadLetterSubject == "", "none", cf.DeadLetterSubject))
	row("dead letter expired", cf.DeadLetterExpired)
	row("time bucket", cf.TimeBucket)
	row("max payload", orNone(cf.MaxPayload == 0, "server's max_payload", strconv.Itoa(cf.MaxPayload)))
	if ci := r.Cluster; ci != nil {
		fmt.Fprintln(tw, "\t")
		row("node", ci.ID+" ("+ci.Role+")")
		row("leader", ci.LeaderID)
		row("term", ci.Term)
		row("commit index", ci.CommitIndex)
		row("applied index", ci.AppliedIndex)
		for _, p := range ci.Peers {
			row("peer "+p.ID, peerLine(p))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return trimLines(e.stdout, buf.Bytes())
}

// peerLine describes one member of a cluster on one line.
func peerLine(p wire.PeerInfo) string {
	s := p.Addr
	if !p.Voter {
		s += " non-voter"
	}
	if !p.Answered {
		return s + " no answer"
	}
	return fmt.Sprintf("%s %s applied %d lag %d", s, p.Role, p.AppliedIndex, *p.Lag)
}

// trimLines writes b to w without trailing spaces on its lines.
func trimLines(w io.Writer, b []byte) error {
	for line := range bytes.Lines(b) {
		if _, err := fmt.Fprintf(w, "%s\n", bytes.TrimRight(line, " \n")); err != nil {
			return err
		}
	}
	return nil
}

// orNone is alt when none holds, else v: a zero setting printed by its meaning.
func orNone(none bool, alt, v string) string {
	if none {
		return alt
	}
	return v
}

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
	return usagef("%[1]s: which message? natsdelay %[1]s TAG, or natsdelay %[1]s --subject SUBJECT --id ID; natsdelay help %[1]s tells more", cmd)
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
}

func (c *getCmd) check() error {
	if err := c.missingRef("get"); err != nil {
		return err
	}
	var p problems
	c.checkAPI(&p)
	c.checkRef(&p)
	return p.err()
}

func (c *getCmd) Run(e *env) error {
	cl, err := c.dial("get", e)
	if err != nil {
		return err
	}
	defer cl.close()
	data, err := cl.call(wire.VerbGet, wire.MessageRef{Tag: c.Tag, Subject: c.Subject, ID: c.ID, Payload: c.Payload})
	if err != nil {
		return err
	}
	if c.JSON {
		return printJSON(e.stdout, data)
	}
	var m wire.MessageInfo
	if err := decodeReply(wire.VerbGet, data, &m); err != nil {
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
	cl, err := c.dial("cancel", e)
	if err != nil {
		return err
	}
	defer cl.close()
	data, err := cl.call(wire.VerbCancel, wire.MessageRef{Tag: c.Tag, Subject: c.Subject, ID: c.ID})
	if err != nil {
		return err
	}
	if c.JSON {
		return printJSON(e.stdout, data)
	}
	if c.Tag != "" {
		_, err = fmt.Fprintf(e.stdout, "canceled %s\n", c.Tag)
	} else {
		_, err = fmt.Fprintf(e.stdout, "canceled %s id=%s\n", c.Subject, c.ID)
	}
	return err
}
