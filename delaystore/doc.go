// Package delaystore stores scheduled messages: the Store contract that
// every storage engine implements, and the event Repository that all writes
// go through.
//
// # Basics
//
// A Store is an ordered key-value store with atomic batches (see Store).
// Engines live in sub-packages, pebblestore and boltstore, and the shared
// contract suite in storetest. The engines share their call gating (calls
// in flight, closed, failed) through internal/gate. In cluster mode,
// raftstore wraps an engine: its Store commits each batch as one Raft log
// entry that every node applies to its own engine.
//
// The Repository keeps each pending message, a StoredMessage, under its
// 24-byte event key (see package keys), and next to it, always in the same
// batch, the last event ID and these indexes and counts:
//
//	metadata/event-repo/last-id                        last event ID
//	metadata/event-repo/time-bucket                    bucket width the keys use
//	metadata/event-repo/topic/<subject>                pending count of subject
//	metadata/event-repo/client-id/<subject>\x00<id>    event key of a Delay-Id
//	metadata/event-repo/expiry/<expire_at><event key>  one entry per TTL
//	metadata/event-repo/due-at/<bucket><hash><id>      one entry per message, in time order
//	metadata/event-repo/due-count/<second>             messages whose bucket starts in that second
//	metadata/event-repo/pending, .../subjects          totals of the subject registry
//	metadata/event-repo/index-version                  which indexes are complete (1: due, 2: and occurrences, 3: and the version guard)
//	metadata/event-repo/topic/\x00written by a newer...  the version guard: earlier versions refuse the store (see versionguard.go)
//	metadata/event-repo/schedule/<subject>\x00<name>  next occurrence of a recurring schedule
//	metadata/event-repo/schedules                      number of recurring schedules
//	metadata/event-repo/recur-at/<bucket><hash><id>    one entry per occurrence still to plan, in time order
//	metadata/event-repo/dedup/<kind><subject>\x00<id>  the duplicate window's record of a Delay-Id or Nats-Msg-Id (see dedup.go)
//	metadata/event-repo/dedup-at/<expire_at><kind>...  the same records in expiry order
//	metadata/event-repo/fleet-record                   the record of a fleet cell that is a cluster (see fleetrecord.go)
//
// # Why a due index
//
// Memory and start-up must follow what is due and in flight, not how many
// subjects have messages pending: users address entities by subject, one
// message each, by the million. Event keys start with the subject's hash,
// so they answer "what is due on this subject" with one range, which keeps
// each subject's delivery order, but "what is due anywhere" only with a
// seek per subject and the time of every subject's head held in memory.
// The due index is the same keys with time first: one range read from a
// cursor gives everything due, over all subjects, in time order, and a
// store with ten million subjects opens by reading a few fixed keys. The
// dispatcher reads it to learn which subjects have work, then reads those
// subjects' own ranges, so delivery order per subject stays the event
// keys'. The per-second due counts answer INFO's due windows with a few
// hundred reads at most, and the totals answer pending and subjects from
// memory, with no map of every subject. Each costs a key per message (or
// per second), written in the batch that writes the message, like the
// expiry index: a commit keeps them exact, a crash loses them with it.
//
// A store written before the due index existed has none of it; the first
// open builds it from the messages and the registry and then records
// index-version (see OpenRepository).
//
// An occurrence of a recurring schedule is an ordinary pending message
// whose Recurrence field carries the schedule; Advance stores its successor
// in the batch that marks it planned (see package recur for why that keeps
// schedules whole across crashes). The occurrences still to plan have an
// index of their own in the due index's order, so the dispatcher, which
// plans them ahead of their time, reads them and not every message due
// with them; a store written before it gets it at its first open, as for
// the due index.
//
// The time bucket is written once, when a store is first opened, and
// checked at every later open. Numbers are big-endian uint64, so the expiry
// index is ordered by time and everything expired is one range.
//
// # Caveats
//
// Only event keys are exactly 24 bytes long: every other key starts with a
// prefix longer than that. Code that scans events must skip keys of any
// other length, as the Repository does.
//
// Subjects and client ids may not contain NUL bytes and, like header names
// and values, must be UTF-8, because StoredMessage is a proto3 message.
package delaystore
