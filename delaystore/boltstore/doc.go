// Package boltstore implements delaystore.Store on bbolt, the B+tree
// key-value store that etcd uses, in one file with one flat bucket.
//
// # Basics
//
// Open takes a Config naming the file. Get runs in its own read-only
// transaction and copies the value out. NewIter keeps a read-only
// transaction open until Close, and Scan runs in one, so both read a single
// consistent state. A batch is buffered in memory and applied in one
// read-write transaction, which bbolt always fsyncs: Sync and NoSync
// commits are equally durable, and Flush has nothing to do.
//
// # Caveats
//
// bbolt has one writer at a time, and every commit pays at least two
// fsyncs (the pages, then the meta page), so batch writes: throughput comes
// from group commit.
//
// A read transaction never blocks a writer while the file fits in the
// memory map. When a commit must grow the map past Config.InitialMmapSize,
// it waits until every open iterator and Scan has finished, so close
// iterators promptly, and never commit from the goroutine that holds one
// open once the file has grown that large. Pages a long-lived reader can
// still see cannot be reused, so the file grows meanwhile.
//
// A commit that fails on I/O leaves the Store failed: that commit and
// every later call but Close return an error wrapping delaystore.ErrFailed
// and the cause; Close releases the file, which can then be opened again. NB: bbolt
// rolls a failed transaction back in memory, but if it failed after writing
// the meta page (in the fsync), that page is already in the file and in
// the memory map, and the next reader would see the batch. Refusing further
// use keeps it invisible; after a reopen it may be there, whole.
package boltstore
