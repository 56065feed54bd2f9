package storetest

import (
	"errors"
	"testing"

	"natsdelay/delaystore"
)

// RunFaults checks that a batch whose commit fails because a write to disk
// failed applies nothing. open must open the store kept in dir and register
// its Close with t.Cleanup. It also returns inject: once called, the file
// writes a commit makes (to a WAL, or to the database file) fail until the
// store is closed.
//
// After a failed commit the store either goes on serving the state from
// before the batch, or refuses every call with an error wrapping
// delaystore.ErrClosed; either way the batch is never visible, and after a
// reopen the data committed before the fault is intact.
func RunFaults(t *testing.T, open func(t *testing.T, dir string) (s delaystore.Store, inject func())) {
	t.Run("Fault_WriteFailsDuringCommit_AppliesNothing", func(t *testing.T) {
		dir := t.TempDir()
		base := []kv{pair("a", "1"), pair("b", "1"), pair("c", "1")}

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
		if err := b.Commit(delaystore.Sync); err == nil {
			t.Fatalf("Commit with failing writes returned nil")
		}
		_ = b.Close()

		// Either the old state, or no state at all.
		if _, err := s.Get([]byte("a")); errors.Is(err, delaystore.ErrClosed) {
			t.Logf("the store failed itself after the fault: %v", err)
			_, err = s.NewIter(delaystore.IterOptions{})
			wantErrIs(t, "NewIter on a failed store", err, delaystore.ErrClosed)
			wantErrIs(t, "Flush on a failed store", s.Flush(), delaystore.ErrClosed)
		} else {
			wantPairs(t, s, base...)
		}
		// Close may report the fault again; the point is what survives.
		if err := s.Close(); err != nil {
			t.Logf("Close after the fault: %v", err)
		}

		s, _ = open(t, dir)
		wantPairs(t, s, base...)
		wantNotFound(t, s, []byte("d"))
		commit(t, s, delaystore.Sync, set("e", "3"))
		wantPairs(t, s, append(base, pair("e", "3"))...)
	})
}
