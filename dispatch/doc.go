// Package dispatch decides what is delivered when: it publishes due messages,
// tracks them in flight until they are acknowledged, redelivers them, and
// dead-letters them.
//
// # Basics
//
// The dispatcher keeps, in memory, one entry per subject (topic) with the
// time its next message is due, in a heap ordered by that time. It sleeps
// until the earliest, and Notify wakes it early when a newly committed
// message is due sooner. A due topic is scanned from a per-topic cursor to
// keys.DueUpperBound, so messages already handed out are not read again.
// Redeliveries come from a heap of in-flight deadlines with point lookups.
// Work is proportional to what is due, not to what is stored.
//
// Deletes and attempt counts go through a batched writer (the deleter) and are
// committed without fsync: losing them in a crash only causes a redelivery,
// which at-least-once allows.
//
// # Guarantees
//
//   - Never early: a message is published only once the clock has reached its
//     fire time, whatever the key's time bucket.
//   - Per topic, first deliveries go out in (fire time in milliseconds, event
//     ID) order. Redeliveries are not ordered against first deliveries.
//   - A delivery that reached no subscriber (NoResponders) is not an attempt:
//     the message stays pending, its topic backs off and is then probed with
//     one message before delivery resumes, so nobody listening costs nothing.
//   - A full in-flight window (Config.MaxInFlight) holds back first
//     deliveries only: redeliveries go on, since each flight holds its
//     slot, and the loop sleeps until a settled flight makes room. Flights
//     waiting longer than the ack wait cannot keep it full while other
//     subjects have messages due: they are evicted, a quarter of the
//     window at a time, and their subjects wait until their deadlines, so
//     one consumer that NAKs with long delays slows only its own subjects.
//   - A wait (ack wait, NAK delay, backoff) that reaches past the latest
//     time an int64 of nanoseconds holds means "not before then".
//   - A message is deleted only after an ACK, a TERM, expiry, dead-lettering
//     or cancellation, or, with AckPolicy none, once it was published to a
//     subscriber.
//
// # Caveats
//
// Dispatch knows nothing of NATS: it publishes through the Publisher
// interface, and the caller reports ACKs and no-responders notices.
package dispatch
