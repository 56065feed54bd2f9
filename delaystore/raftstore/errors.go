package raftstore

import (
	"errors"

	"github.com/natsdelay/natsdelay/delaystore"
)

var (
	// ErrNotLeader is wrapped by Commit, AddVoter and RemoveServer on a node
	// that is not the leader, or that lost leadership before the write was
	// committed: the write may still be committed later by the new leader
	// (at-least-once), or never. It is delaystore.ErrNotLeader, and the
	// error wrapping it is a *delaystore.NotLeaderError naming the leader
	// this node knows of.
	ErrNotLeader = delaystore.ErrNotLeader

	// ErrEntryTooLarge is wrapped by Commit when the batch would make a log
	// entry larger than Config.MaxEntryBytes, which the other nodes would
	// refuse to read. Nothing is written.
	ErrEntryTooLarge = errors.New("raftstore: entry too large")

	// ErrInvalidConfig is wrapped by every error of Config.Validate.
	ErrInvalidConfig = errors.New("raftstore: invalid config")

	// ErrClusterMismatch is wrapped by Open when the peers, or the state in
	// Dir, do not make one cluster with this node: two peers answer with
	// one id, a peer answers with this node's id, a peer or Dir belongs to
	// another cluster, or the peers were given different peer lists. Open
	// returns it before writing anything.
	ErrClusterMismatch = errors.New("raftstore: cluster mismatch")

	// ErrLocalNotEmpty is returned by Open when Dir holds no Raft state
	// (a fresh node, bootstrapping or joining) but the local store already holds
	// data, such as a single node's messages: the other members build
	// their stores from the Raft log alone and would never have them, and
	// a joining node's snapshot would delete them. Open returns it before
	// writing anything.
	ErrLocalNotEmpty = errors.New("raftstore: local store not empty")

	// ErrApplyFailed is wrapped, with delaystore.ErrFailed, by Commit and
	// by Status.Err once this node could not apply a committed log entry to
	// its local store. The node has stopped: applying later entries would
	// make it diverge from the others. Close it, repair or replace its
	// store, and start it again (see the package doc).
	ErrApplyFailed = errors.New("raftstore: apply to local store failed")

	// errCorruptEntry is returned when a log entry or a snapshot does not
	// decode.
	errCorruptEntry = errors.New("raftstore: corrupt log entry")
)
