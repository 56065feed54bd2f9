// Package raftlog is the Raft log of a cluster node: a raft.LogStore that
// writes each entry once, at the end of a segment file, with one write and
// one fdatasync per StoreLogs.
//
// # Why
//
// raft-boltdb keeps the log in a B+tree whose keys only grow, so every
// append rewrites the tree's rightmost leaf, four or five entries for the
// one appended, and its meta page; it was a third of a leader's CPU and
// close to half a follower's. A log is appended at its end, cut at its
// head after a snapshot, and cut at its tail when a deposed leader's
// uncommitted entries are replaced: a file that only grows, and is only
// cut, is enough.
//
// # Files
//
// The log lives in a directory of its own:
//
//	first-index                   the first index of the log: 8 bytes big-endian, then their CRC-32C
//	00000000000000000001.seg      a segment: records of consecutive entries, from the index in its name
//	00000000000000004711.seg      the next segment, the last one appended to
//
// A segment is a run of records, each
//
//	+--------+--------+-------+------+-------+------+------------+---------+------+--------+------------+
//	| length | crc    | index | term | batch | type | appendedAt | dataLen | data | extLen | extensions |
//	| u32    | u32    | u64   | u64  | u64   | u8   | i64 (ns)   | u32     |      | u32    |            |
//	+--------+--------+-------+------+-------+------+------------+---------+------+--------+------------+
//
// all big-endian. length counts the bytes after crc; crc is the CRC-32C
// (Castagnoli) of length and of those bytes. batch is the index of the
// first entry of the StoreLogs call that wrote the record, which is how
// Open tells the last write from the ones before it. appendedAt is 0 for
// a zero time. A segment's records are consecutive from the index in its
// name; a segment starts when the one before has grown past
// SegmentBytes, at the start of a StoreLogs, so that one call writes one
// file.
//
// The log in memory is a table of record offsets per segment: GetLog reads
// one record with ReadAt and checks its CRC.
//
// # Crashes
//
// Every change leaves, at every point where a crash may stop it, a log
// that is a consecutive run of entries and holds every entry of each
// StoreLogs that returned:
//
//   - StoreLogs writes its records after the last one and returns after
//     fdatasync. A crash before that returns can leave part of the write:
//     a short record, or records whose CRC fails, all of them in the last
//     write of the last segment. Open cuts the last segment at its first
//     bad record, provided no record after it belongs to a later write
//     (its batch is past the bad record's index): those entries were never
//     acknowledged. A bad record anywhere else, or one followed by a later
//     write, is an error that names the file and the offset; Open never
//     drops it silently. A new segment's directory entry is synced before
//     anything is written to it.
//   - DeleteRange of a head (compaction after a snapshot) first replaces
//     first-index (a temporary file, synced, renamed, the directory
//     synced), then removes the segments wholly below it. Records below
//     first-index are not part of the log, and Open removes a segment
//     that holds nothing else.
//   - DeleteRange of a suffix (a deposed leader's conflicting entries)
//     removes the segments past the cut from the highest down, syncing the
//     directory after each, then truncates the segment that holds the cut
//     at the first removed record and syncs it. Each step leaves a prefix
//     of the log before it; Raft takes a log shorter than it wrote, and
//     appends again what the leader sends.
//   - DeleteRange of the whole log (Raft clears a MonotonicLogStore after
//     installing a snapshot) moves first-index past the last entry, then
//     removes every segment. The next StoreLogs may start at any index: it
//     records that index as first-index before it creates the segment.
//
// A segment that Open finds holding nothing after this (an empty last
// file, records all below first-index) is removed.
//
// # Caveats
//
// Open takes no lock on the directory: the caller keeps a second process
// out (raftstore opens raft.db first, which bbolt locks).
//
// A record of the last write that a disk corrupts later, after the write
// was acknowledged, is taken as a torn write and cut off with the rest of
// that write: nothing on disk tells the two apart. A record corrupted
// anywhere else is found.
package raftlog
