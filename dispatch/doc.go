// Package dispatch decides what is delivered when: it publishes due messages,
// tracks them in flight until they are acknowledged, redelivers them, and
// dead-letters them.
//
// # Basics
//
// The dispatcher reads the repository's due index, where every pending
// message has an entry ordered by time, then subject hash, then ID, from a
// cursor (the frontier): one range read per pass gives what became due
// since the last, over all subjects. Each entry puts its topic (subject)
// in a heap of due topics, and a due topic is scanned from a per-topic
// cursor to keys.DueUpperBound, so messages already handed out are not
// read again and each subject's messages go out in key order. The loop
// sleeps until the earliest of the next due-index entry, a due topic and a
// flight's deadline; Notify wakes it early when a newly committed message
// is due sooner. Redeliveries come from a heap of in-flight deadlines with
// point lookups.
//
// Why not a heap of every subject's next message: that costs
// memory for every subject with anything pending and a seek per subject
// at start, which with millions of subjects of one message each is most of
// the service's memory and seconds of start-up. With the due index, a
// topic is in memory only while it has something due, in flight, or
// backing off, and is dropped at the next pass once it has none; the heap
// of due topics is bounded too (frontierCap): a backlog due all at once is
// read a slice at a time. Start reads nothing: the first pass reads the
// due index from its start. Work and memory are proportional to what is
// due and in flight, not to what is stored.
//
// A topic brought into memory by a due-index entry, with nothing else
// known to be in its range, is read with a point lookup of that entry's
// key rather than a range scan: most subjects of recurring schedules have
// one message due at a time, and a point read skips the per-level seeks
// of an iterator.
//
// Occurrences of recurring schedules are planned ahead (Config.PlanAhead):
// a planner goroutine reads the repository's index of occurrences still to
// plan up to a second ahead (never the one-shot messages due with them)
// and plans them in one synced batch, so that a pass publishes
// them with no commit before them. It gives way to passes that deliver,
// for a bounded time: the occurrences of many schedules fall due
// together, and planning the next round while a pass publishes this one
// makes it late. When many occurrences planned ahead fall due in the same
// millisecond, the passes that deliver them are staged (stage.go): read up
// to Config.StageAhead before that millisecond, published at it; the
// deleter holds the deletes of their ACKs until they are out, at most
// Config.DeleteHold (deletehold.go).
// A pass plans, before publishing, any
// occurrence the planner did not reach. An occurrence planned ahead whose
// successor is then canceled or replaced by Delay-Id is withdrawn: deleted
// unsent before the CANCEL or the replace is answered.
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
//   - No subject holds more than its share of the in-flight window
//     (Config.SubjectMaxInFlight): at it, with more due, the subject is
//     held out of the due heap, not read again, until one of its own
//     flights settles, and then resumes at its cursor, in order. Its
//     redeliveries go on within its share, so a subject whose consumers
//     never answer delays no other subject's first deliveries.
//   - A change of limits that lets many subjects go at once (a resume of
//     a pattern) puts them back in the due heap a pass's worth
//     (Config.PassLimit) at a time, so a subject that falls due meanwhile
//     waits for that many of them, not for all. Due-index entries that
//     need nothing (their subject held, released, past them, or due
//     already) cost the frontier a lookup, not a place in its pass, so a
//     backlog's entries (a pause's, a bulk FIRE's) are not read a pass's
//     worth at a time ahead of a message due after them.
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
