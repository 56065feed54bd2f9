// Package pebblestore implements delaystore.Store on Pebble, the LSM
// key-value store from CockroachDB.
//
// # Basics
//
// Open takes a Config. On disk (Config.Dir) every Sync commit waits for the
// write-ahead log to reach stable storage; NoSync commits are written to the
// log without waiting, and Flush waits for them. In memory
// (Config.InMemory) the store lives on Pebble's memory file system with the
// WAL off: it is fast, and it is gone when the process exits.
//
// Iterators and Scan read one point-in-time view of the store, taken when
// they start, so a writer committing meanwhile is invisible to them and is
// never blocked by them.
//
// # Caveats
//
// Pebble applies a batch to its memtable before the WAL write that carries it
// is known to have succeeded. When that write or its fsync fails, Commit
// returns the error but the batch could already be read, and Pebble cannot
// take it back. The Store therefore fails itself: every later call returns an
// error wrapping delaystore.ErrClosed and the cause, and the process is
// expected to stop and reopen. A batch whose fsync failed may or may not be
// there after the reopen.
//
// A long-lived iterator pins the memtables and files it reads, so memory and
// disk use grow while it is open. Close iterators promptly.
package pebblestore
