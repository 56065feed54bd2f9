package client

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge/wire"
)

// Message is a message to schedule: its target subject, payload and
// headers, and when and how the service delivers it. Each field that is
// set becomes its control header (docs/protocol.md, sections 1 and 6); the
// zero value of a field sets nothing.
type Message struct {
	// Subject is the target subject the message is delivered to.
	Subject string
	Data    []byte
	// Header holds the headers delivered with the message. Names in the
	// reserved Delay- prefix are refused by the service; use the fields.
	Header nats.Header

	// Delay is how long from now it is due (Delay); At is when (Delay-At).
	// Neither: due now.
	Delay time.Duration
	At    time.Time
	// ID is the Delay-Id: scheduling again with the same subject and ID
	// replaces the pending message, and the same message sent again
	// within the service's duplicate window is answered with the first
	// reply, which makes Schedule safe to retry.
	ID string
	// TTL expires the message that long after its fire time (Delay-TTL).
	TTL time.Duration
	// MaxDeliver dead-letters it after that many deliveries without an
	// ACK (Delay-Max-Deliver).
	MaxDeliver int
	// NoAck delivers it once and deletes it, with no answer awaited
	// (Delay-Ack: none).
	NoAck bool

	// Every or Cron make it a recurring schedule (Delay-Every,
	// Delay-Cron), in Zone (Delay-TZ, an IANA name), ended by Until
	// (Delay-Until) or after Limit occurrences (Delay-Limit); CatchUp is
	// one, all or none (Delay-Catch-Up); Overlap is allow, skip or
	// buffer-one (Delay-Overlap). Exclude lists dates and date ranges
	// in Zone on which no occurrence is planned (Delay-Exclude:
	// 2026-12-25,2027-02-01..2027-02-07); Jitter spreads each occurrence
	// over [t, t+Jitter) after its planned time t (Delay-Jitter).
	Every   time.Duration
	Cron    string
	Zone    string
	Until   time.Time
	Limit   uint64
	CatchUp string
	Overlap string
	Exclude string
	Jitter  time.Duration

	// Debounce, with ID and without Delay or At, debounces the subject
	// and ID (Delay-Debounce): the message is due that long after this
	// Schedule, replacing the pending one, and a burst is delivered once,
	// with its last message. DebounceMax (Delay-Debounce-Max) delivers a
	// burst that never pauses at the latest that long after its first
	// message. A retry of a debounce is a new publish of the burst.
	Debounce    time.Duration
	DebounceMax time.Duration

	// Throttle, with ID and without Delay or At, throttles the subject
	// and ID (Delay-Throttle): at most one delivery per Throttle. A
	// message sent while the next delivery is held folds into it: it
	// replaces that message and goes out at its time (Scheduled.Folded).
	Throttle time.Duration
}

// msg is m as the NATS message to publish on ingest.
func (c *Client) msg(m Message) *nats.Msg {
	nm := nats.NewMsg(c.ingest + "." + m.Subject)
	nm.Data = m.Data
	for k, vs := range m.Header {
		nm.Header[k] = append([]string(nil), vs...)
	}
	set := func(name string, v string, ok bool) {
		if ok {
			nm.Header.Set(name, v)
		}
	}
	set(wire.HeaderDelay, m.Delay.String(), m.Delay != 0)
	set(wire.HeaderAt, m.At.UTC().Format(time.RFC3339Nano), !m.At.IsZero())
	set(wire.HeaderID, m.ID, m.ID != "")
	set(wire.HeaderTTL, m.TTL.String(), m.TTL != 0)
	set(wire.HeaderMaxDeliver, strconv.Itoa(m.MaxDeliver), m.MaxDeliver != 0)
	set(wire.HeaderAck, "none", m.NoAck)
	set(wire.HeaderEvery, m.Every.String(), m.Every != 0)
	set(wire.HeaderCron, m.Cron, m.Cron != "")
	set(wire.HeaderTZ, m.Zone, m.Zone != "")
	set(wire.HeaderUntil, m.Until.UTC().Format(time.RFC3339Nano), !m.Until.IsZero())
	set(wire.HeaderLimit, strconv.FormatUint(m.Limit, 10), m.Limit != 0)
	set(wire.HeaderOverlap, m.Overlap, m.Overlap != "")
	set(wire.HeaderCatchUp, m.CatchUp, m.CatchUp != "")
	set(wire.HeaderExclude, m.Exclude, m.Exclude != "")
	set(wire.HeaderJitter, m.Jitter.String(), m.Jitter != 0)
	set(wire.HeaderDebounce, m.Debounce.String(), m.Debounce != 0)
	set(wire.HeaderDebounceMax, m.DebounceMax.String(), m.DebounceMax != 0)
	set(wire.HeaderThrottle, m.Throttle.String(), m.Throttle != 0)
	return nm
}

// Scheduled is the service's answer to a message it stored durably: its
// tag (for Get, Cancel and the deliveries' Delay-Tag) and its fire time.
// Duplicate says the message was a resend within the service's duplicate
// window (a retry whose first try was stored): Tag and FireAt are then the
// first try's, and nothing new was stored. Folded says a throttled
// message was folded into the delivery already planned: it replaced that
// message and is due at its time, FireAt.
type Scheduled struct {
	Tag       string
	Subject   string
	FireAt    time.Time
	Duplicate bool
	Folded    bool
}

// Schedule stores m with the service and returns once it is durable. A
// message the service refuses is a *wire.ServiceError matching
// wire.ErrBadRequest, with what is wrong; nothing was stored. With
// WithRetry, a message with an ID is sent again after a retryable error,
// and one without only after no responders: no service received it, so
// it cannot be stored twice, as it could after a timeout or a 503 that
// followed the commit.
func (c *Client) Schedule(ctx context.Context, m Message) (*Scheduled, error) {
	if m.Subject == "" {
		return nil, fmt.Errorf("schedule: %w: no target subject", wire.ErrBadRequest)
	}
	nm := c.msg(m)
	retryable := unreceived
	if m.ID != "" {
		retryable = IsRetryable
	}
	data, err := c.retry(ctx, retryable, func() ([]byte, error) { return c.roundTrip(ctx, nm) })
	if err != nil {
		return nil, err
	}
	var r wire.ScheduleReply
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("unexpected answer to a schedule %q: %w", data, err)
	}
	return scheduled(r)
}
