package client

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge/wire"
)

// Delivery is a message the service delivered, with its answers as
// methods (docs/protocol.md, section 3).
type Delivery struct {
	*nats.Msg
	nc *nats.Conn
}

// NewDelivery is m, received on nc, as a Delivery.
func NewDelivery(nc *nats.Conn, m *nats.Msg) Delivery { return Delivery{Msg: m, nc: nc} }

// Tag is the delivery's Delay-Tag: the same on every attempt.
func (d Delivery) Tag() string { return d.Header.Get(wire.HeaderTag) }

// Attempt is the delivery's Delay-Attempt, 1 for the first.
func (d Delivery) Attempt() int {
	n, _ := strconv.Atoi(d.Header.Get(wire.HeaderAttempt))
	return n
}

// FireAt is the time the message was due (Delay-Fire-At).
func (d Delivery) FireAt() time.Time {
	t, _ := time.Parse(time.RFC3339Nano, d.Header.Get(wire.HeaderFireAt))
	return t
}

// Ack settles the message: it is deleted and not delivered again.
func (d Delivery) Ack() error { return d.Respond([]byte(wire.AnswerAck)) }

// AckSync settles the message and waits until the service confirms that
// the delete is committed, at most until ctx is done, or DefaultTimeout
// if ctx has no deadline; an error means the ACK may not have been
// applied, and the message may come again.
func (d Delivery) AckSync(ctx context.Context) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultTimeout)
		defer cancel()
	}
	m := nats.NewMsg(d.Reply)
	m.Data = []byte(wire.AnswerAck)
	rep, err := d.nc.RequestMsgWithContext(ctx, m)
	if err != nil {
		return err
	}
	if err := wire.ParseError(rep.Header, rep.Data); err != nil {
		return err
	}
	if string(rep.Data) != wire.ReplyOK {
		return fmt.Errorf("unexpected answer %q to %s on %s, want %s", rep.Data, wire.AnswerAck, d.Reply, wire.ReplyOK)
	}
	return nil
}

// Nak asks for the message again after delay (at once if 0).
func (d Delivery) Nak(delay time.Duration) error {
	if delay <= 0 {
		return d.Respond([]byte(wire.AnswerNak))
	}
	return d.Respond([]byte(wire.AnswerNak + " " + delay.String()))
}

// InProgress restarts the ack wait: the consumer is still working on it.
func (d Delivery) InProgress() error { return d.Respond([]byte(wire.AnswerProgress)) }

// Term ends the message without a redelivery: it is dead-lettered (with
// reason, if not empty) and deleted.
func (d Delivery) Term(reason string) error {
	if reason == "" {
		return d.Respond([]byte(wire.AnswerTerm))
	}
	return d.Respond([]byte(wire.AnswerTerm + " " + reason))
}

// Subscribe calls handle with each delivery on subject, which may be a
// wildcard, from nc's own goroutine for the subscription; handle answers
// each. The subscription is nats.go's: Unsubscribe or Drain it.
func Subscribe(nc *nats.Conn, subject string, handle func(Delivery)) (*nats.Subscription, error) {
	return nc.Subscribe(subject, func(m *nats.Msg) { handle(Delivery{Msg: m, nc: nc}) })
}

// QueueSubscribe is Subscribe in a queue group: each delivery goes to one
// member of the group.
func QueueSubscribe(nc *nats.Conn, subject, queue string, handle func(Delivery)) (*nats.Subscription, error) {
	return nc.QueueSubscribe(subject, queue, func(m *nats.Msg) { handle(Delivery{Msg: m, nc: nc}) })
}
