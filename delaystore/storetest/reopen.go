package storetest

import (
	"testing"

	"github.com/natsdelay/natsdelay/delaystore"
)

// RunReopen checks that what a store keeps on disk survives Close and a
// reopen. open must open the store kept in dir, creating it if needed, and
// register its Close with t.Cleanup; the suite closes it first, so a second
// Close must be harmless.
func RunReopen(t *testing.T, open func(t *testing.T, dir string) delaystore.Store) {
	cases := []struct {
		name string
		test func(t *testing.T, reopen func() delaystore.Store)
	}{
		{"Reopen_SyncCommit_Survives", testReopenSync},
		{"Reopen_NoSyncThenFlush_Survives", testReopenNoSyncFlush},
		{"Reopen_NoSyncThenClose_Survives", testReopenNoSyncClose},
		{"Reopen_OverwritesAndDeletes_Survive", testReopenDeletes},
		{"Reopen_CommitAfterClose_AppliesNothing", testReopenFailedCommit},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			c.test(t, func() delaystore.Store { return open(t, dir) })
		})
	}
}

func mustClose(t *testing.T, s delaystore.Store) {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// A Sync commit is durable once Commit returns.
func testReopenSync(t *testing.T, reopen func() delaystore.Store) {
	s := reopen()
	commit(t, s, delaystore.Sync, set("a", "1"), set("b", "2"))
	mustClose(t, s)
	s = reopen()
	wantPairs(t, s, pair("a", "1"), pair("b", "2"))
	commit(t, s, delaystore.Sync, set("c", "3"))
	mustClose(t, s)
	wantPairs(t, reopen(), pair("a", "1"), pair("b", "2"), pair("c", "3"))
}

// NoSync commits are durable once Flush returns.
func testReopenNoSyncFlush(t *testing.T, reopen func() delaystore.Store) {
	s := reopen()
	commit(t, s, delaystore.NoSync, set("a", "1"))
	commit(t, s, delaystore.NoSync, set("b", "2"))
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	mustClose(t, s)
	wantPairs(t, reopen(), pair("a", "1"), pair("b", "2"))
}

// Close makes every committed write durable, NoSync ones included.
func testReopenNoSyncClose(t *testing.T, reopen func() delaystore.Store) {
	s := reopen()
	commit(t, s, delaystore.NoSync, set("a", "1"), set("b", "2"))
	commit(t, s, delaystore.NoSync, del("a"))
	mustClose(t, s)
	wantPairs(t, reopen(), pair("b", "2"))
}

// Overwrites and deletes, the deleter's NoSync kind included, are what a
// reopened store shows; deleted keys do not come back.
func testReopenDeletes(t *testing.T, reopen func() delaystore.Store) {
	s := reopen()
	commit(t, s, delaystore.Sync, set("a", "1"), set("b", "1"), set("c", "1"))
	commit(t, s, delaystore.Sync, set("a", "2"), del("b"))
	commit(t, s, delaystore.NoSync, del("c"), del("missing"))
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	mustClose(t, s)
	s = reopen()
	wantPairs(t, s, pair("a", "2"))
	wantNotFound(t, s, []byte("b"))
}

// A batch whose commit failed because the store was closed is not there
// after a reopen.
func testReopenFailedCommit(t *testing.T, reopen func() delaystore.Store) {
	s := reopen()
	commit(t, s, delaystore.Sync, set("a", "1"))
	b := s.NewBatch()
	_ = b.Set([]byte("b"), []byte("2"))
	_ = b.Delete([]byte("a"))
	mustClose(t, s)
	wantErrIs(t, "Commit after Close", b.Commit(delaystore.Sync), delaystore.ErrClosed)
	_ = b.Close()
	wantPairs(t, reopen(), pair("a", "1"))
}
