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
//
// NB: it holds the NATS message rather than embedding it: embedded, the
// methods of *nats.Msg would be Delivery's too, and JetStream's among
// them (Metadata, NakWithDelay, DoubleAck) compile and fail, since a
// delivery is no JetStream message. Msg returns it for what a Delivery
// does not say.
type Delivery struct {
	msg *nats.Msg
	nc  *nats.Conn
}

// NewDelivery is m, received on nc, as a Delivery.
func NewDelivery(nc *nats.Conn, m *nats.Msg) Delivery { return Delivery{msg: m, nc: nc} }

// Msg is the NATS message as it was received.
func (d Delivery) Msg() *nats.Msg { return d.msg }

// Subject is the target subject the message was delivered to.
func (d Delivery) Subject() string { return d.msg.Subject }

// Data is the payload.
func (d Delivery) Data() []byte { return d.msg.Data }

// Header is the message's headers: the publisher's and the service's
// Delay- headers.
func (d Delivery) Header() nats.Header { return d.msg.Header }

// Tag is the delivery's Delay-Tag: the same on every attempt.
func (d Delivery) Tag() string { return d.msg.Header.Get(wire.HeaderTag) }

// ID is the message's Delay-Id, empty when it has none.
func (d Delivery) ID() string { return d.msg.Header.Get(wire.HeaderID) }

// Attempt is the delivery's Delay-Attempt, 1 for the first.
func (d Delivery) Attempt() int {
	n, _ := strconv.Atoi(d.msg.Header.Get(wire.HeaderAttempt))
	return n
}

// FireAt is the time the message was due (Delay-Fire-At).
func (d Delivery) FireAt() time.Time { return d.headerTime(wire.HeaderFireAt) }

// EnqueuedAt is when the service accepted the message
// (Delay-Enqueued-At).
func (d Delivery) EnqueuedAt() time.Time { return d.headerTime(wire.HeaderEnqueuedAt) }

// Schedule is the spec of the recurring schedule an occurrence belongs to
// (Delay-Schedule), empty for a one-off message.
func (d Delivery) Schedule() string { return d.msg.Header.Get(wire.HeaderSchedule) }

// Occurrence is an occurrence's planned time (Delay-Occurrence); zero for
// a one-off message.
func (d Delivery) Occurrence() time.Time { return d.headerTime(wire.HeaderOccurrence) }

// Next is the planned time of the occurrence after this one (Delay-Next);
// zero for a one-off message and for the last occurrence of a schedule.
func (d Delivery) Next() time.Time { return d.headerTime(wire.HeaderNext) }

// headerTime is the time in the header name, zero when it is absent.
func (d Delivery) headerTime(name string) time.Time {
	t, _ := time.Parse(time.RFC3339Nano, d.msg.Header.Get(name))
	return t
}

// Ack settles the message: it is deleted and not delivered again.
func (d Delivery) Ack() error { return d.msg.Respond([]byte(wire.AnswerAck)) }

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
	m := nats.NewMsg(d.msg.Reply)
	m.Data = []byte(wire.AnswerAck)
	rep, err := d.nc.RequestMsgWithContext(ctx, m)
	if err != nil {
		return err
	}
	if err := wire.ParseError(rep.Header, rep.Data); err != nil {
		return err
	}
	if string(rep.Data) != wire.ReplyOK {
		return fmt.Errorf("unexpected answer %q to %s on %s, want %s", rep.Data, wire.AnswerAck, d.msg.Reply, wire.ReplyOK)
	}
	return nil
}

// Nak asks for the message again after delay (at once if 0).
func (d Delivery) Nak(delay time.Duration) error {
	if delay <= 0 {
		return d.msg.Respond([]byte(wire.AnswerNak))
	}
	return d.msg.Respond([]byte(wire.AnswerNak + " " + delay.String()))
}

// InProgress restarts the ack wait: the consumer is still working on it.
func (d Delivery) InProgress() error { return d.msg.Respond([]byte(wire.AnswerProgress)) }

// Term ends the message without a redelivery: it is dead-lettered (with
// reason, if not empty) and deleted.
func (d Delivery) Term(reason string) error {
	if reason == "" {
		return d.msg.Respond([]byte(wire.AnswerTerm))
	}
	return d.msg.Respond([]byte(wire.AnswerTerm + " " + reason))
}

// Subscribe calls handle with each delivery on subject, which may be a
// wildcard, from nc's own goroutine for the subscription; handle answers
// each. The subscription is nats.go's: Unsubscribe or Drain it.
func Subscribe(nc *nats.Conn, subject string, handle func(Delivery)) (*nats.Subscription, error) {
	return nc.Subscribe(subject, func(m *nats.Msg) { handle(NewDelivery(nc, m)) })
}

// QueueSubscribe is Subscribe in a queue group: each delivery goes to one
// member of the group.
func QueueSubscribe(nc *nats.Conn, subject, queue string, handle func(Delivery)) (*nats.Subscription, error) {
	return nc.QueueSubscribe(subject, queue, func(m *nats.Msg) { handle(NewDelivery(nc, m)) })
}
