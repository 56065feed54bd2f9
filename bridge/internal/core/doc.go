// Package core runs the life of a natsdelay service without NATS: it opens
// a generation (the repository, the dispatcher, the janitor and the
// group-commit writer on one store), serves Schedule, Ack, Cancel, Get,
// List, Topics, ScheduleRefs, Counts and Stats as Go calls, recovers from a failed store
// by replacing the generation, and stops and starts a generation when told
// to for any other reason (Suspend and Resume).
//
// It sits above dispatch and janitor, which it wires together, and below
// the NATS adapter (package bridge), which is its only user. It speaks the
// error vocabulary of package wire: its errors wrap wire.ErrBadRequest,
// wire.ErrNotFound or wire.ErrUnavailable.
//
// # Goroutines
//
// A Service owns one goroutine of its own, the recovery loop, started by
// Open and stopped by Stop. Each generation owns the goroutines of its
// writer, dispatcher and janitor, and of its idle watcher (package idle),
// which hands memory back once the generation goes quiet after a burst of
// writes (Config.IdleRelease); they stop when the generation is retired
// (a storage fault, Suspend) or by Stop, the idle watcher first.
//
// # Shutdown
//
// Stop turns new work away, then stops the recovery loop and the current
// generation's work: the writer commits and answers what it took, the
// janitor stops, and the dispatcher finishes its publishes and flushes
// pending deletes. The caller may still need its publisher's transport
// during Stop. Close then closes the store; it calls Stop first if needed.
package core
