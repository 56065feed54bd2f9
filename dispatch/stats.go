package dispatch

import (
	"sync/atomic"
	"time"

	"github.com/natsdelay/natsdelay/delaystore"
)

// Observer is told about deliveries, for metrics. Its methods are called by
// the dispatcher's goroutines and must not block.
type Observer interface {
	// Delivered is called for every delivery that reached a subscriber,
	// once the flush after it has told so (see Stats.Delivered); lateness
	// is the time from the message's fire time to the publish. msg must
	// not be modified or kept.
	// held is set when the message fell due while its subject was held
	// back by its in-flight limit, its rate or a pause: its lateness is
	// then the limit's doing, not the service's.
	Delivered(msg *delaystore.StoredMessage, attempt uint32, lateness time.Duration, held bool)
}

// Stats are counters since the dispatcher started. Each field is read
// atomically; together they are not a consistent snapshot.
type Stats struct {
	// Delivered counts first deliveries that reached a subscriber: they
	// were published, and the flush after them came back without a
	// no-responders notice. A delivery that bounced is counted in
	// NoResponders instead, and one whose flush failed in neither.
	Delivered uint64 `json:"delivered"`
	// Redelivered counts the same for deliveries with attempt > 1.
	Redelivered uint64 `json:"redelivered"`
	Acked       uint64 `json:"acked"` // +ACK that settled a pending message
	Nacked      uint64 `json:"nacked"`
	Progress    uint64 `json:"progress"`
	Termed      uint64 `json:"termed"`
	// Failed counts attempts the consumer reported as failed: a JetStream
	// stream's error answer (see AckFailed).
	Failed       uint64 `json:"failed"`
	DeadLettered uint64 `json:"dead_lettered"`
	Expired      uint64 `json:"expired"`
	Canceled     uint64 `json:"canceled"`
	NoResponders uint64 `json:"no_responders"` // deliveries that reached no subscriber (not attempts)
	// Undeliverable counts messages the publisher refused for good (see
	// ErrUndeliverable), each dead-lettered or parked.
	Undeliverable uint64 `json:"undeliverable"`
	// Evicted counts long-waiting flights evicted from a full in-flight
	// window to make room for first deliveries (see Config.MaxInFlight).
	Evicted uint64 `json:"evicted"`
	// Skipped counts occurrences of recurring schedules that were missed
	// and not delivered, under Delay-Catch-Up none.
	Skipped uint64 `json:"skipped"`
	// PlannedAhead counts occurrences planned before they fell due (see
	// Config.PlanAhead), and PlannedOnDelivery those planned by the pass
	// that delivered them, with the planning commit before the publish.
	PlannedAhead      uint64 `json:"planned_ahead"`
	PlannedOnDelivery uint64 `json:"planned_on_delivery"`
	// Withdrawn counts occurrences planned ahead and then not sent: their
	// schedule was canceled or replaced by Delay-Id before they fell due.
	Withdrawn uint64 `json:"withdrawn"`
	// Fenced counts deliveries held back because the fence was down at the
	// moment of publishing (see Config.Fence): a node of a cluster that
	// did not hold its leadership lease. Each goes out later, unchanged.
	Fenced uint64 `json:"fenced"`
	// FencedPasses counts the dispatcher's turns skipped because the fence
	// was down: nothing fell due, was delivered or redelivered in them.
	FencedPasses uint64 `json:"fenced_passes"`
	// HandedOff counts messages due when their batch committed that went
	// from the group commit to the next pass with no read of the store
	// (see NotifyMessage).
	HandedOff uint64 `json:"handed_off"`
	// StagedPasses counts the delivery passes of bursts of occurrences
	// that were read before the burst fell due and published at its time
	// (see Config.StageAhead).
	StagedPasses uint64 `json:"staged_passes"`
	InFlight     uint64 `json:"in_flight"` // gauge: delivered and not yet settled
	// Topics is a gauge: the subjects the dispatcher keeps state for,
	// those with messages due or in flight, or backing off.
	Topics uint64 `json:"topics"`
	// Limited is a gauge: the subjects at their in-flight limit with
	// more due, whose next first deliveries wait for answers (see
	// Config.SubjectMaxInFlight).
	Limited uint64 `json:"subjects_limited"`
	// Paused is a gauge: the subjects held back by a pause with messages
	// due.
	Paused uint64 `json:"subjects_paused"`
}

type counters struct {
	delivered, redelivered, acked, nacked, progress, termed, failed atomic.Uint64
	deadLettered, expired, canceled, noResponders                   atomic.Uint64
	undeliverable, evicted, skipped                                 atomic.Uint64
	plannedAhead, plannedOnDelivery, withdrawn                      atomic.Uint64
	fenced, fencedPasses                                            atomic.Uint64
	// handedOff counts the messages handed off (see NotifyMessage).
	handedOff atomic.Uint64
}
