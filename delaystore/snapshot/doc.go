// Package snapshot writes the whole content of a delaystore.Store as one
// stream, and reads it back: the format of a cluster's Raft snapshots
// (package raftstore) and of backups (package bridge/backup). It knows
// keys and values only, not what they mean, so one stream serves every
// engine: a Pebble store's stream restores into bbolt as well.
//
// # Format
//
//	magic "NDRS" | version byte | index of the last Raft command applied, 8 bytes BE (0 outside a cluster)
//	records, in key order: key length uvarint (> 0) | key | value length uvarint | value
//	end: a zero key length | record count, 8 bytes BE | CRC-32C of all before, 4 bytes BE
//
// The count and the checksum at the end let a reader tell a whole stream
// from a cut or damaged one: Reader reports ErrCorrupt for either, and
// only once it reached the end does it report a stream whole.
package snapshot
