package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/natsdelay/natsdelay/bridge/wire"

	"github.com/nats-io/nats.go"
)

// subCmd prints deliveries and ACKs them with an ack sync, as a consumer
// written against the protocol would.
type subCmd struct {
	clientFlags `embed:""`

	Subject string        `arg:"" help:"Subject to subscribe to; wildcards allowed."`
	Queue   string        `help:"Queue group to join." placeholder:"GROUP" env:"-"`
	Count   int           `help:"Exit after this many deliveries; 0 runs until interrupted." default:"0" env:"-"`
	NoAck   bool          `name:"no-ack" help:"Do not ACK: the service redelivers after its ack wait." env:"-"`
	JSON    bool          `name:"json" help:"Print each delivery as one JSON object per line." env:"-"`
	Timeout time.Duration `help:"How long to wait for the service to confirm an ACK." default:"5s" env:"-"`
}

func (c *subCmd) check() error {
	var p problems
	c.checkClient(&p)
	checkSubject(&p, "subject", c.Subject, true)
	if c.Count < 0 {
		p.add("--count %d: want a count > 0, or 0 to run until interrupted", c.Count)
	}
	if c.Timeout <= 0 {
		p.add("--timeout %v: want a duration > 0, such as 5s", c.Timeout)
	}
	return p.err()
}

// received is a delivery and when it arrived.
type received struct {
	msg *nats.Msg
	at  time.Time
}

// Run subscribes and prints until --count deliveries or SIGINT/SIGTERM.
// A failed ACK is reported and makes the exit code 1.
func (c *subCmd) Run(e *env) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	nc, err := c.connect("natsdelay sub", e.log)
	if err != nil {
		return err
	}
	defer nc.Close()

	// The handler blocks when the channel is full, which holds the
	// rest in the subscription's pending buffer; the time it stamps is
	// then late by as long as printing took.
	msgs := make(chan received, 256)
	done := make(chan struct{})
	defer close(done)
	handle := func(m *nats.Msg) {
		select {
		case msgs <- received{msg: m, at: time.Now()}:
		case <-done:
		}
	}
	var sub *nats.Subscription
	if c.Queue != "" {
		sub, err = nc.QueueSubscribe(c.Subject, c.Queue, handle)
	} else {
		sub, err = nc.Subscribe(c.Subject, handle)
	}
	if err != nil {
		return fmt.Errorf("subscribe to %s: %w", c.Subject, err)
	}
	if c.Count > 0 {
		// The server sends --count messages and no more, so none is
		// taken and left unACKed: the rest bounce as "no responders" and
		// stay pending for the next subscriber, their attempt not counted.
		if err := sub.AutoUnsubscribe(c.Count); err != nil {
			return fmt.Errorf("subscribe to %s: %w", c.Subject, err)
		}
	}
	if err := nc.Flush(); err != nil {
		return fmt.Errorf("subscribe to %s: %w", c.Subject, err)
	}
	e.log.Info("subscribed", "subject", c.Subject, "queue", c.Queue, "nats_url", nc.ConnectedUrlRedacted())

	var failed int
loop:
	for n := 1; c.Count == 0 || n <= c.Count; n++ {
		var r received
		select {
		case r = <-msgs:
		case <-ctx.Done():
			break loop
		}
		if err := c.print(e.stdout, n, r); err != nil {
			return err
		}
		if c.NoAck || r.msg.Reply == "" {
			continue
		}
		if err := c.ack(nc, r.msg); err != nil {
			failed++
			e.log.Error("ACK failed", "subject", r.msg.Subject, "tag", header(r.msg.Header, wire.HeaderTag), "err", err)
		}
	}
	_ = sub.Unsubscribe()
	if failed > 0 {
		return fmt.Errorf("%d ACKs failed", failed)
	}
	return nil
}

// ack sends +ACK as a request and waits for the service's +OK.
func (c *subCmd) ack(nc *nats.Conn, m *nats.Msg) error {
	rep, err := nc.Request(m.Reply, []byte(wire.AnswerAck), c.Timeout)
	if err != nil {
		return err
	}
	if err := replyError(rep); err != nil {
		return err
	}
	if string(rep.Data) != wire.ReplyOK {
		return fmt.Errorf("unexpected answer %q", rep.Data)
	}
	return nil
}

// delivery is how --json prints a delivery.
type delivery struct {
	Subject    string              `json:"subject"`
	Tag        string              `json:"tag"`
	Attempt    int                 `json:"attempt"`
	FireAt     string              `json:"fire_at"`
	EnqueuedAt string              `json:"enqueued_at,omitempty"`
	ID         string              `json:"id,omitempty"`
	LatenessMs float64             `json:"lateness_ms"`
	Headers    map[string][]string `json:"headers,omitempty"`
	Data       string              `json:"data,omitempty"`
	DataBase64 []byte              `json:"data_base64,omitempty"`
}

// deliveryHeaders are the headers the service adds; they are printed in
// the summary line, not among the message's own headers.
var deliveryHeaders = []string{wire.HeaderTag, wire.HeaderAttempt, wire.HeaderFireAt, wire.HeaderEnqueuedAt, wire.HeaderID}

func (c *subCmd) print(w io.Writer, n int, r received) error {
	m := r.msg
	d := delivery{
		Subject:    m.Subject,
		Tag:        header(m.Header, wire.HeaderTag),
		FireAt:     header(m.Header, wire.HeaderFireAt),
		EnqueuedAt: header(m.Header, wire.HeaderEnqueuedAt),
		ID:         header(m.Header, wire.HeaderID),
	}
	d.Attempt, _ = strconv.Atoi(header(m.Header, wire.HeaderAttempt))
	lateness := "unknown"
	if t, err := time.Parse(time.RFC3339Nano, d.FireAt); err == nil {
		late := r.at.Sub(t)
		d.LatenessMs = float64(late) / float64(time.Millisecond)
		lateness = late.Round(time.Microsecond).String()
	}
	own := map[string][]string{}
	for k, vs := range m.Header {
		if !slices.ContainsFunc(deliveryHeaders, func(h string) bool { return strings.EqualFold(h, k) }) {
			own[k] = vs
		}
	}
	if c.JSON {
		if len(own) > 0 {
			d.Headers = own
		}
		if utf8.Valid(m.Data) {
			d.Data = string(m.Data)
		} else {
			d.DataBase64 = m.Data
		}
		b, err := json.Marshal(d)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "[#%d] %s tag=%s attempt=%d fire_at=%s lateness=%s", n, d.Subject, d.Tag, d.Attempt, d.FireAt, lateness)
	if d.ID != "" {
		fmt.Fprintf(&sb, " id=%s", d.ID)
	}
	sb.WriteByte('\n')
	keys := make([]string, 0, len(own))
	for k := range own {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		for _, v := range own[k] {
			fmt.Fprintf(&sb, "%s: %s\n", k, v)
		}
	}
	sb.Write(m.Data)
	sb.WriteString("\n\n")
	_, err := io.WriteString(w, sb.String())
	return err
}
