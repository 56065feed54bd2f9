package raftstore

import (
	"encoding/binary"
	"errors"
)

// The term an entry was proposed in
//
// A leader proposes each entry with the Raft term of the leadership its
// store handle belongs to, in the entry's Extensions, and every node's FSM
// applies it only if Raft appended it in that same term. Checking the
// handle's leadership before proposing (store.proposalTerm) is not enough
// alone: between that check and Raft's leader loop taking the proposal,
// this node can lose its leadership and win it again, and the entry would
// then be appended in the new term, written from what was read in the
// old. The comparison is deterministic (the term an entry was appended in
// is part of the log), so every node, and a replay after a restart, takes
// the same decision; the proposing leader reads it from the apply future
// as ErrNotLeader.
//
// Layout: a version byte (1), then the term as a uvarint. Entries without
// Extensions (from versions before this one) and Extensions of an unknown
// version apply unchecked, so that nodes of two versions can run side by
// side during a rolling upgrade.

const proposalVersion byte = 1

// errStaleProposal is an entry's FSM answer when it was appended in
// another term than its proposal's: it applied nowhere.
var errStaleProposal = errors.New("raftstore: proposed in a leadership that had ended when it was appended: applied nowhere")

// errOpenedAsFollower is why a commit through a handle opened while this
// node did not lead is refused.
var errOpenedAsFollower = errors.New("raftstore: the store handle was opened while this node did not lead")

// errLeadershipEnded is why a commit through a handle whose leadership has
// ended is refused before it is proposed.
var errLeadershipEnded = errors.New("raftstore: the leadership this store handle belongs to has ended")

// proposedIn is the Extensions of an entry proposed in term.
func proposedIn(term uint64) []byte {
	return binary.AppendUvarint([]byte{proposalVersion}, term)
}

// proposalTermOf returns the term an entry's Extensions say it was
// proposed in, and false if they say none this version knows.
func proposalTermOf(ext []byte) (uint64, bool) {
	if len(ext) < 2 || ext[0] != proposalVersion {
		return 0, false
	}
	term, n := binary.Uvarint(ext[1:])
	if n <= 0 {
		return 0, false
	}
	return term, true
}
