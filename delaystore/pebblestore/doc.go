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
// Pebble treats a failed WAL write or fsync as fatal. By then it may have
// applied the batch to its memtable, where readers could see it, and it
// cannot take it back, so it calls its logger's Fatalf. Here Fatalf panics,
// and the Store recovers that one panic on the committing goroutine: the
// commit returns an error wrapping delaystore.ErrFailed, and so does every
// later call, reads included, so the batch is never served. Close then
// releases the database and its directory lock, so the directory can be
// opened again in the same process. After the reopen the batch is gone if
// its write failed; if only the fsync failed it may be there, whole. Either
// way no caller was told it was durable. NB: Pebble's other fatal errors,
// such as a MANIFEST write failing in a background flush or compaction,
// still stop the process: they happen on Pebble's own goroutines.
//
// A full disk is worse: a WAL rotation that fails panics inside Pebble in
// a way no recover can undo. So on disk the Store keeps a reserve file
// (Config.DiskFullReserve) and deletes it at the first ENOSPC, through
// Pebble's vfs.OnDiskFull: the write that met the full disk is retried and
// fits, the commit under way completes, and every later call returns an
// error wrapping delaystore.ErrFailed and ENOSPC. Open recreates the reserve
// and refuses, with the same errors, a disk without room for it and as much
// again, so a service that reopens the store waits for space to return.
//
// Commits that were already waiting inside Pebble when another commit
// failed may never return, and Close waits for them, so give the Store one
// committer at a time, as the event repository does.
//
// A long-lived iterator pins the memtables and files it reads, so memory and
// disk use grow while it is open. Close iterators promptly.
package pebblestore
