package raftstore

import (
	"errors"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/natsdelay/natsdelay/delaystore"
)

// The FSM applies an entry only in the term it was proposed in: an entry
// Raft appended in a later term (its leader lost and won its leadership
// between the handle's check and the proposal) is skipped, with
// errStaleProposal and without stopping the node; an entry of an earlier
// version (no Extensions) or with Extensions of an unknown version applies
// as before, so that two versions can run side by side.
func TestFSM_AppliesAnEntryOnlyInTheTermItWasProposedIn(t *testing.T) {
	local := memStore(t)
	f := &fsm{local: local, log: slog.New(slog.DiscardHandler), restoreMarker: filepath.Join(t.TempDir(), "restoring"), onFail: func(err error) { t.Errorf("the FSM failed: %v", err) }}
	entry := func(key string) []byte {
		c := newCommand()
		if err := c.set([]byte(key), []byte("v")); err != nil {
			t.Fatal(err)
		}
		return c.bytes()
	}
	for i, tc := range []struct {
		key   string
		term  uint64
		ext   []byte
		apply bool
	}{
		{"stale", 5, proposedIn(4), false},
		{"same-term", 5, proposedIn(5), true},
		{"no-extensions", 6, nil, true},
		{"unknown-version", 6, []byte{9, 1}, true},
		{"truncated-term", 6, []byte{proposalVersion}, true},
	} {
		index := uint64(i + 1)
		got := f.Apply(&raft.Log{Index: index, Term: tc.term, Type: raft.LogCommand, Data: entry(tc.key), Extensions: tc.ext})
		err, _ := got.(error)
		_, gerr := local.Get([]byte(tc.key))
		switch {
		case tc.apply && (err != nil || gerr != nil):
			t.Errorf("%s: Apply answered %v, the key reads %v; want it applied", tc.key, err, gerr)
		case !tc.apply && !errors.Is(err, errStaleProposal):
			t.Errorf("%s: Apply answered %v, want errStaleProposal", tc.key, err)
		case !tc.apply && !errors.Is(gerr, delaystore.ErrNotFound):
			t.Errorf("%s: the key reads %v, want ErrNotFound: the entry must apply nowhere", tc.key, gerr)
		}
		if a := f.applied.Load(); a != index {
			t.Errorf("%s: applied index %d, want %d: a skipped entry is handled", tc.key, a, index)
		}
	}
	if err := f.err(); err != nil {
		t.Fatalf("the FSM stopped: %v", err)
	}
}
