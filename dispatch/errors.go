package dispatch

import "errors"

var (
	// ErrClosed is returned by calls made after Close.
	ErrClosed = errors.New("dispatch: closed")
	// ErrInvalidConfig is wrapped by every Config validation error.
	ErrInvalidConfig = errors.New("dispatch: invalid config")
	// ErrUnknownTag is passed to an ACK's callback when no pending message
	// has that tag: it was settled already, or never existed. The ACK is a
	// harmless no-op and the client is still told +OK.
	ErrUnknownTag = errors.New("dispatch: unknown or already settled tag")
	// ErrNotInFlight is passed to a NAK's or WPI's callback when the message
	// is not waiting for an answer (already settled, or not delivered by this
	// process). It is a no-op.
	ErrNotInFlight = errors.New("dispatch: message is not in flight")
	// ErrNotDelivering is wrapped by the errors of Health: the dispatcher
	// is not started, or has stopped making progress (see Health).
	ErrNotDelivering = errors.New("dispatch: not delivering")
	// ErrUndeliverable is wrapped by a Publisher's error when a message can
	// never be published as it is (the server would refuse it, or close the
	// connection over it), so trying again is pointless. The dispatcher
	// dead-letters such a message if it can, and otherwise parks it: it
	// stays pending, out of the way of its subject, until it is canceled,
	// expires, or the service restarts.
	ErrUndeliverable = errors.New("dispatch: undeliverable")
)

// errFenced stands for a delivery held back because the fence was down
// (see Config.Fence); it never leaves the package.
var errFenced = errors.New("dispatch: fenced")
