package dispatch

import "time"

// AckKind is what a consumer answered to a delivery.
type AckKind int

const (
	// AckDone (+ACK or empty) settles the message: it is deleted.
	AckDone AckKind = iota
	// AckNak (-NAK) asks for redelivery now or after Ack.Delay.
	AckNak
	// AckProgress (+WPI) restarts the ack-wait timer.
	AckProgress
	// AckTerm (+TERM) stops redelivery: the message is dead-lettered and
	// deleted.
	AckTerm
	// AckFailed reports that the attempt failed at the consumer: a
	// JetStream stream refused to store the delivery (no space, a limit
	// reached). It is redelivered after the back-off of this attempt, or
	// the ack wait without one, as if the ack wait had run out: a stream
	// that refuses refuses again at once.
	AckFailed
)

func (k AckKind) String() string {
	switch k {
	case AckDone:
		return "+ACK"
	case AckNak:
		return "-NAK"
	case AckProgress:
		return "+WPI"
	case AckTerm:
		return "+TERM"
	case AckFailed:
		return "failed"
	}
	return "unknown"
}

// String is the answer as a consumer would send it, for a dead letter's
// last answer: -NAK with its delay, +TERM or failed with the reason.
func (a Ack) String() string {
	s := a.Kind.String()
	switch {
	case a.Kind == AckNak && a.Delay > 0:
		s += " " + a.Delay.String()
	case (a.Kind == AckTerm || a.Kind == AckFailed) && a.Reason != "":
		s += " " + a.Reason
	}
	return s
}

// Ack is one parsed answer to a delivery.
type Ack struct {
	Kind AckKind
	// Delay is the -NAK redelivery delay; 0 means now.
	Delay time.Duration
	// Reason is the +TERM reason, if any, or why an attempt failed.
	Reason string
}
