// Package backup takes a backup of a running natsdelay through its API,
// and restores one into an empty data directory.
//
// # Basics
//
// A backup is the whole store, every key and value, read from one
// consistent view and written in the format of package
// delaystore/snapshot, which the cluster's Raft snapshots use too: one
// format for every engine. The service (Send) streams it over NATS in
// chunks of at most the server's max_payload: each chunk is a request to
// the requester's inbox, numbered by the Delay-Backup-Seq header, and the
// next is sent only once the requester acknowledged it, so a slow disk
// holds the service up rather than filling the connection. A last message
// with Delay-Backup-End closes the stream. The stream's own trailer holds
// its record count and a CRC-32C of everything before it.
//
// Fetch asks for a backup and writes it to a temporary file beside the
// target, which it renames into place only once the stream ended and the
// file read back whole; a failure leaves no file behind. Restore checks
// the file whole before it writes anything, then writes its keys into a
// new store of the chosen engine in an empty or absent directory, and
// checks the result with the store's own consistency check.
//
// # Caveats
//
// A backup holds what was committed when the service opened its view:
// everything acknowledged to a publisher before the request, and some of
// what was acknowledged while the stream ran. The messages' attempts are
// those stored, which may lag the deliveries in flight by the last
// unflushed counts (at-least-once allows the redelivery).
//
// A restored directory is the data directory of a single node: a node
// started on it with --cluster-peers refuses it (raftstore's
// ErrLocalNotEmpty), since the other members would not hold its messages.
package backup
