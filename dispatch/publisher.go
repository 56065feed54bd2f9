package dispatch

import (
	"context"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/keys"
)

// Publisher sends what the dispatcher decides to send. Implementations must
// be safe for concurrent use: Deliver and Flush are called by the dispatch
// loop, DeadLetter also by the goroutines that report ACKs.
type Publisher interface {
	// Deliver publishes attempt number attempt of the message under key to
	// its subject. It may buffer; it must not block for long. msg must not be
	// modified or kept. An error wrapping ErrUndeliverable says the message
	// can never be published; any other error is taken for a passing one.
	Deliver(key keys.Key, msg *delaystore.StoredMessage, attempt uint32) error

	// DeadLetter publishes the message once to subject with reason
	// (max-deliver, term: <reason>, or expired).
	DeadLetter(subject string, key keys.Key, msg *delaystore.StoredMessage, attempt uint32, reason string) error

	// Flush sends everything published so far and returns once the server
	// has processed it and every no-responders notice for those publishes has
	// been reported to Dispatcher.NoResponders.
	Flush(ctx context.Context) error
}
