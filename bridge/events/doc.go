// Package events publishes natsdelay's lifecycle events: with serve
// --events, each thing that happens to a message (scheduled, delivered,
// acked, nak, term, expired, dead, canceled, rescheduled, replayed) is
// published to <prefix>.<kind>.<subject> ($DELAY.EVENT.delivered.orders.new)
// with a small JSON body, wire.Event. The wire side is documented in
// docs/protocol.md.
//
// # Why a package of its own
//
// Events are told from many places: the ingest handler and the API in
// bridge, the dispatcher's settling of answers, expiry and dead letters,
// and the bulk verbs and the dead-letter store that other code adds.
// None of them should know how an event is encoded, buffered or
// published, nor pay for it when events are off. So the publisher is one
// small type, Publisher, that every one of them is handed (a nil
// *Publisher is "off": Emit on it returns at once, without a lock or an
// allocation), and its package holds nothing else: it imports nats only
// through the one method it calls (Conn), so it is under bridge, which
// owns all NATS code, and not in dispatch, which knows no NATS, and
// dispatch tells it what happened through its own small Lifecycle hook,
// which bridge adapts.
//
// # Best effort
//
// Events never slow delivery. Emit copies the event into a bounded queue
// and returns; if the queue is full the event is dropped and counted
// (Stats.Dropped, the natsdelay_events_dropped_total metric), never
// waited for. One goroutine, owned by the Publisher, encodes and publishes
// what is queued, with no flush: NATS core publishing is fire and forget,
// and a subscriber that does not keep up loses events at its own client
// or server (a slow consumer), which the publisher never waits for
// either. On a node of a cluster, an event is published only while the
// node holds its leadership lease (Config.Fence), as deliveries are, so
// only the leader emits.
//
// Events are told in the order the service saw them, which between kinds
// is not always the order they happened: a delivery is told once the
// flush after it tells that it reached a subscriber, and its ACK may be
// applied before that. Each body carries the time it happened (at).
package events
