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
	Delivered    uint64 `json:"delivered"`   // first deliveries published
	Redelivered  uint64 `json:"redelivered"` // deliveries with attempt > 1
	Acked        uint64 `json:"acked"`       // +ACK that settled a pending message
	Nacked       uint64 `json:"nacked"`
	Progress     uint64 `json:"progress"`
	Termed       uint64 `json:"termed"`
	DeadLettered uint64 `json:"dead_lettered"`
	Expired      uint64 `json:"expired"`
	Canceled     uint64 `json:"canceled"`
	NoResponders uint64 `json:"no_responders"` // deliveries that reached no subscriber (not attempts)
	InFlight     uint64 `json:"in_flight"`     // gauge: delivered and not yet settled
}

type counters struct {
	delivered, redelivered, acked, nacked, progress, termed atomic.Uint64
	deadLettered, expired, canceled, noResponders           atomic.Uint64
}
