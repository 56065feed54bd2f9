// Package raftstore replicates a delaystore.Store across a cluster of
// nodes with Raft (github.com/hashicorp/raft, its log in segment files,
// internal/raftlog, and its stable store on raft-boltdb/v2).
//
// # Basics
//
// Each node keeps a whole copy of the data in its own local store (pebble
// with its WAL off, or bolt) and applies the replicated log to it. The
// Store a Node hands out reads from the local store; a Batch's Commit
// encodes its Set and Delete operations once, as one Raft log entry (see
// command.go for the layout), proposes it, and returns once a quorum has
// stored the entry and this node has applied it. One group commit of the
// service is one entry, whatever the number of messages in it. Only the
// leader commits: elsewhere Commit fails with ErrNotLeader, and the service
// serves only while WatchLeadership says it leads.
//
// The finite-state machine applies each entry to the local store in one
// batch, with NoSync. Operations in an entry are absolute (a value, or a
// removal, computed by the leader), never increments, so the local store
// depends only on which entries were applied, in log order.
//
// # Durability and restarts
//
// The Raft log is the write-ahead log: a node acknowledges an entry once
// the Raft log has synced it, and the local store is written without sync.
// A crash can therefore lose the last writes to the local store (pebble
// keeps them in its memtable), but never the log.
//
// Raft runs with NoSnapshotRestoreOnStart, so a restart does not rebuild
// the local store from a snapshot: Raft takes the latest snapshot's index as
// applied and replays the log entries after it. That is correct because of
// two facts:
//
//   - A snapshot is taken only after the local store is durable up to it:
//     the FSM's Snapshot flushes the local store on the FSM goroutine, before any
//     later entry is applied, and Raft drops log entries only once they are
//     covered by a snapshot. So after a crash the local store holds at
//     least every entry up to the latest snapshot, and the log holds every
//     entry after it.
//   - Replaying an entry that the local store already holds is harmless.
//     The engines recover a prefix of their commits (pebble flushes its
//     memtables in order; bolt syncs every commit), so after a crash the
//     store holds exactly the entries up to some index k at or above the
//     snapshot's. Replaying from the snapshot onwards rewrites keys the
//     entries up to k wrote, each ending at the value of the last entry up
//     to k that wrote it, which is the value the store already held;
//     entries after k then apply as they would have. Intermediate states
//     during the replay may mix old and new values, which is why nothing
//     serves from a node before it has caught up (the leader waits for a
//     barrier).
//
// Writes are absolute, and so computed from what their writer read: a
// writer must not commit what it read in one leadership of this node in
// a later one, when another leader may have written in between. Each
// Store handle belongs to the leadership it was opened in and commits only
// during it, and each entry carries the term it was proposed in, which
// every FSM compares with the term Raft appended it in (see proposal.go).
//
// The Repository's writes qualify: it writes the last event ID, pending
// counts, the schedule count and every index entry as absolute values it
// computed from its own state, and messages and index entries as Sets and
// Deletes of whole keys.
//
// Installing a snapshot (on a node too far behind the leader's log)
// replaces the whole local store: Restore deletes every key the snapshot
// lacks and writes every key whose value differs, in bounded batches, then
// flushes. Raft records the snapshot before it calls Restore, so a crash
// half way would leave a store that NoSnapshotRestoreOnStart would trust: a
// marker file in Dir stands while Restore runs, and the next Open restores
// the latest snapshot again when it finds it.
//
// A node that cannot apply a committed entry (its local store failed, or
// the entry does not decode) must not apply the entries after it: it would
// silently diverge. It logs the error, shuts Raft down (so it neither
// votes nor leads), reports the error in Status.Err and fails Commit with
// ErrApplyFailed and delaystore.ErrFailed. The others go on without it.
//
// # Snapshots and log compaction
//
// Snapshot opens an iterator on the local store, on the FSM goroutine, and
// Persist streams that point-in-time view (key, value pairs in order,
// length-prefixed, with a count and a CRC-32C at the end) while Apply goes
// on. Raft snapshots when SnapshotThreshold entries have accumulated,
// checked every SnapshotInterval, and keeps TrailingLogs entries after it,
// so under constant load the log stays bounded (see Config). NB: with bolt
// as the local store, a long Persist holds a read transaction, and bolt
// cannot grow its memory map meanwhile: a commit that needs it waits.
//
// # Forming a cluster
//
// Config.Peers lists addresses; Raft needs server IDs. The Raft port
// therefore carries two protocols, told apart by the first byte of each
// connection: Raft's RPCs, and "identify", which answers with the node's
// id, its cluster (if it has one) and its peer list.
//
// A fresh node (no Raft log in Dir) asks every peer until all have
// answered, then bootstraps with the configuration they form: every peer's
// id and address, sorted by address. Every node computes the same
// configuration, and hashicorp/raft allows every node to bootstrap with one
// identical configuration. The cluster's name is a hash of that
// configuration; it is written to Dir (node.json) before the Raft log is
// created, and exchanged by identify. A node with a Raft log rejoins at
// once, without bootstrap: Raft holds the membership.
//
// Open refuses to start, before writing anything, when NodeID is empty,
// Peers lacks this node's own address, two peers answer with one id or a
// peer with this node's id, a peer belongs to another cluster, the peers
// were started with different peer lists, Dir holds the state of another
// node or cluster than the peers', or Dir holds no Raft state while the local store
// already holds data (ErrLocalNotEmpty: a single node's store, whose
// messages the others would never have).
//
// # Membership
//
// AddVoter and RemoveServer change the membership at run time, on the
// leader. A new node is started with Config.Join and Peers naming the
// cluster's members and itself: it does not bootstrap, but waits until a
// peer answers with its cluster, records that cluster, and waits for the
// leader to add it (AddVoter first checks that the node at that address
// answers with the id given and no other cluster). It then catches up from
// the leader's log, or from a snapshot if the log no longer reaches back.
// Without Join, a fresh node whose peers already form another cluster is
// refused rather than bootstrapping a second cluster beside it.
//
// # Leadership
//
// WatchLeadership reports true only once the new leader has applied every
// entry committed before (a Barrier), and false as soon as Raft reports the
// loss. A leader that cannot reach a quorum steps down within
// LeaderLeaseTimeout, so an isolated leader stops serving; its pending
// Commits fail with ErrNotLeader and may or may not commit later, which the
// service's at-least-once delivery allows.
//
// Raft's leadership is a belief that a paused process keeps while it is
// paused. HoldsLease is the fact that effects others observe are checked
// against: a lease on the monotonic clock, granted by commits and renewed
// by barriers, that ends before any other node can be elected (see
// lease.go). WatchLeadership reports true only once the lease is held.
//
// TransferLeadership hands the leadership to the most up-to-date other
// voter before a planned stop (serve does so on SIGTERM), so that the
// others need no election timeout.
//
// A refused write wraps delaystore.ErrNotLeader in a
// *delaystore.NotLeaderError naming the leader this node knows of, so
// that the service answers "not the leader: leader is <id>" rather than a
// storage fault.
//
// # Commit index on a follower
//
// Raft's heartbeats carry no commit index: a follower learns it from the
// leader's replication, which sends it every CommitTimeout even when
// there is nothing new. After failed attempts to reach a node that is
// down, the leader waits between retries, doubling from 10 ms up to about
// 10 s, while its heartbeats retry within half a HeartbeatTimeout. A node
// restarted after a long absence therefore hears the leader at once but
// reports a commit index of 0, and an applied index at its latest
// snapshot, for up to about 10 s; its log is whole (Status.LastLogIndex).
//
// A follower's own commit index stops with its log, so it cannot tell
// from it that it is behind. The node therefore notes the leader's
// commit index from each AppendEntries as it arrives, and Status.Lag says
// the node is behind once an entry the leader committed has waited
// unapplied longer than Config.MaxLag, or no leader was heard for as long
// (see lag.go for why that rule does not flap).
//
// # Caveats
//
// Without Config.TLS the Raft port has no authentication: anyone who
// reaches it can ask a node who it is, or speak Raft to it and replace its
// data. With it, only holders of a certificate from the cluster's CA get
// past the handshake (see tls.go).
//
// Commit waits for a quorum whatever its sync mode: NoSync writes (deletes,
// attempt counts) cost a round trip too, so callers keep them off the
// paths that answer publishers.
//
// Every node must have the same Repository configuration (time bucket);
// the Repository on the leader checks it. MaxKeySize is bbolt's key limit
// whatever the engine, so that every node can apply every entry. An entry
// holds a whole group commit, so its size follows the service's batch
// limits.
package raftstore
