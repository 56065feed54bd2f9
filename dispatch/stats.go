package dispatch

import (
	"sync/atomic"
	"time"

	"natsdelay/delaystore"
)

// Observer is told about deliveries, for metrics. Its methods are called by
// the dispatch loop and must not block.
type Observer interface {
	// Delivered is called for every delivery published; lateness is the time
	// since the message's fire time.
	Delivered(msg *delaystore.StoredMessage, attempt uint32, lateness time.Duration)
}

// Stats are counters since the dispatcher started. Each field is read
// atomically; together they are not a consistent snapshot.
type Stats struct {
	Delivered    uint64 // first deliveries published
	Redelivered  uint64 // deliveries with attempt > 1
	Acked        uint64 // +ACK that settled a pending message
	Nacked       uint64
	Progress     uint64
	Termed       uint64
	DeadLettered uint64
	Expired      uint64
	Canceled     uint64
	NoResponders uint64 // deliveries that reached no subscriber (not attempts)
	InFlight     uint64 // gauge: delivered and not yet settled
}

type counters struct {
	delivered, redelivered, acked, nacked, progress, termed atomic.Uint64
	deadLettered, expired, canceled, noResponders           atomic.Uint64
}
