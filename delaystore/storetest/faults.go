package storetest

import (
	"testing"

	"github.com/natsdelay/natsdelay/delaystore"
)

// RunFaults checks what a store does when a write to disk fails. open must
// open the store kept in dir and register its Close with t.Cleanup. It
// also returns inject: once called, the file writes or syncs a commit
// makes (to a WAL, or to the database file) fail. open is called again,
// after the fault, to reopen the same dir in the same process; the faults
// of an earlier open must not reach it.
//
// The contract: the commit that meets the fault returns an error wrapping
// delaystore.ErrFailed, and so does every later call but Close; Close
// returns without hanging or panicking; a reopen of the same files in the
// same process sees the data committed before the fault intact, and the
// failed batch whole or not at all (whole is possible only if its write
// reached the file and something after it failed, such as the fsync), and
// takes new commits.
func RunFaults(t *testing.T, open func(t *testing.T, dir string) (s delaystore.Store, inject func())) {
	t.Run("Fault_WriteFailsDuringCommit_FailsStoreUntilReopened", func(t *testing.T) {
		dir := t.TempDir()
		base := []kv{pair("a", "1"), pair("b", "1"), pair("c", "1")}
		after := []kv{pair("a", "2"), pair("c", "1"), pair("d", "2")}

		s, _ := open(t, dir)
		commit(t, s, delaystore.Sync, set("a", "1"), set("b", "1"), set("c", "1"))
		mustClose(t, s)

		s, inject := open(t, dir)
		wantPairs(t, s, base...)
		inject()
		b := s.NewBatch()
		for _, o := range []op{set("a", "2"), del("b"), set("d", "2")} {
			var err error
			if o.del {
				err = b.Delete(o.key)
			} else {
				err = b.Set(o.key, o.value)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		err := b.Commit(delaystore.Sync)
		wantErrIs(t, "Commit with failing writes", err, delaystore.ErrFailed)
		t.Logf("the commit failed: %v", err)
		_ = b.Close()

		// Nothing reads or writes a failed store: what it holds in memory
		// may show a batch that is not on disk.
		_, err = s.Get([]byte("a"))
		wantErrIs(t, "Get on a failed store", err, delaystore.ErrFailed)
		_, err = s.NewIter(delaystore.IterOptions{})
		wantErrIs(t, "NewIter on a failed store", err, delaystore.ErrFailed)
		err = s.Scan(delaystore.IterOptions{}, func(k, v []byte) bool { return true })
		wantErrIs(t, "Scan on a failed store", err, delaystore.ErrFailed)
		wantErrIs(t, "Flush on a failed store", s.Flush(), delaystore.ErrFailed)
		b = s.NewBatch()
		_ = b.Set([]byte("e"), []byte("3"))
		wantErrIs(t, "Commit on a failed store", b.Commit(delaystore.Sync), delaystore.ErrFailed)
		_ = b.Close()
		// Close may report the fault again; the point is that it returns
		// and lets go of the files.
		if err := s.Close(); err != nil {
			t.Logf("Close after the fault: %v", err)
		}

		s, _ = open(t, dir)
		got := scanAll(t, s, delaystore.IterOptions{})
		switch {
		case samePairs(got, base):
		case samePairs(got, after):
			t.Logf("the failed batch survived the reopen, whole")
		default:
			t.Fatalf("after reopen the store holds %v, want %v or, whole, %v", got, base, after)
		}
		commit(t, s, delaystore.Sync, set("e", "3"))
		wantPairs(t, s, append(got, pair("e", "3"))...)
	})
}
