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
	}
	return "unknown"
}

// Ack is one parsed answer to a delivery.
type Ack struct {
	Kind AckKind
	// Delay is the -NAK redelivery delay; 0 means now.
	Delay time.Duration
	// Reason is the +TERM reason, if any.
	Reason string
}
