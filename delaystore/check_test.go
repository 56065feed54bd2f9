package delaystore_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/natsdelay/natsdelay/delaystore"
)

// TestRepository_Check_FindsDisagreement checks that Check passes a store
// whose indexes agree with its messages, and fails one where a due index
// entry, a subject's count or a Delay-Id entry was lost: the check a
// restored backup must pass has to be able to fail.
func TestRepository_Check_FindsDisagreement(t *testing.T) {
	for _, lose := range []string{"metadata/event-repo/due-at/", "metadata/event-repo/topic/a", "metadata/event-repo/client-id/"} {
		t.Run(lose, func(t *testing.T) {
			s := engines[0].open(t, t.TempDir())
			r := openRepo(t, s, delaystore.RepositoryConfig{})
			schedule(t, r, msg("a", t0), withID(msg("b", t0+int64(time.Second)), "x"), msg("a", t0+int64(time.Minute)))
			if err := r.Check(); err != nil {
				t.Fatalf("Check of a consistent store: %v", err)
			}
			if err := delaystore.CheckStore(s, nil); err != nil {
				t.Fatalf("CheckStore of a consistent store: %v", err)
			}
			var victim []byte
			if err := s.Scan(delaystore.IterOptions{LowerBound: []byte(lose)}, func(k, _ []byte) bool {
				if bytes.HasPrefix(k, []byte(lose)) {
					victim = bytes.Clone(k)
				}
				return false
			}); err != nil || victim == nil {
				t.Fatalf("no key under %q: %v", lose, err)
			}
			b := s.NewBatch()
			defer b.Close()
			if err := b.Delete(victim); err != nil {
				t.Fatal(err)
			}
			if err := b.Commit(delaystore.Sync); err != nil {
				t.Fatal(err)
			}
			if err := r.Check(); !errors.Is(err, delaystore.ErrCorrupt) {
				t.Fatalf("Check after losing %q: %v, want ErrCorrupt", victim, err)
			}
		})
	}
}
