package delaystore_test

import (
	"testing"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/keys"
)

// TestRepository_Import_OnePartitionUnderItsKeys checks, on every engine,
// that the messages ScanEvents reads for some topics, stored in another
// repository with Import, keep their keys, client ids, expiry and counts
// there, pass Check, that importing them again stores nothing more, and
// that the next event id is above every imported one.
func TestRepository_Import_OnePartitionUnderItsKeys(t *testing.T) {
	forEachEngine(t, false, func(t *testing.T, e engine) {
		src := openRepo(t, e.open(t, t.TempDir()), delaystore.RepositoryConfig{})
		dst := openRepo(t, e.open(t, t.TempDir()), delaystore.RepositoryConfig{})
		expiring := msg("a", t0+10e9)
		expiring.TtlNs, expiring.ExpireAtNs = 5e9, t0+15e9
		schedule(t, src, withID(msg("a", t0+20e9), "x"), expiring, msg("b", t0+5e9), msg("a", t0+1e9))
		want := map[keys.Key]bool{}
		var in []delaystore.Imported
		keepA := func(h uint64) bool { return h == keys.TopicHash("a") }
		if err := src.ScanEvents(nil, keepA, func(k keys.Key, m *delaystore.StoredMessage) bool {
			want[k] = true
			in = append(in, delaystore.Imported{Key: k, Msg: m})
			return true
		}); err != nil || len(in) != 3 {
			t.Fatalf("ScanEvents = %d messages, %v; want the 3 of a", len(in), err)
		}
		var after []keys.Key
		if err := src.ScanEvents(&in[0].Key, keepA, func(k keys.Key, _ *delaystore.StoredMessage) bool {
			after = append(after, k)
			return true
		}); err != nil || len(after) != 2 || after[0] != in[1].Key {
			t.Fatalf("ScanEvents after the first = %v, %v; want the other 2", after, err)
		}
		schedule(t, dst, msg("c", t0+1e9))
		for round, wantN := range []int{3, 0} {
			stored, err := dst.Import(in, delaystore.Sync)
			if err != nil || len(stored) != wantN {
				t.Fatalf("Import round %d = %d stored, %v; want %d", round+1, len(stored), err, wantN)
			}
			for _, k := range stored {
				if !want[k] {
					t.Fatalf("stored under %v, not a key it had", k)
				}
			}
		}
		if dst.Pending() != 4 || dst.Subjects() != 2 {
			t.Fatalf("after import: %d pending on %d subjects, want 4 on 2", dst.Pending(), dst.Subjects())
		}
		for k := range want {
			if _, err := dst.Get(k); err != nil {
				t.Fatalf("Get %v after import: %v", k, err)
			}
		}
		if k, err := dst.Lookup("a", "x"); err != nil || !want[k] {
			t.Fatalf("Lookup(a, x) = %v, %v; want an imported key", k, err)
		}
		if ks, _ := dst.Expired(t0+15e9, 10); len(ks) != 1 || !want[ks[0]] {
			t.Fatalf("expired = %v, want the imported message with a TTL", ks)
		}
		if err := dst.Check(); err != nil {
			t.Fatalf("Check after import: %v", err)
		}
		next := schedule(t, dst, msg("a", t0+1e9))
		if next[0].Key.EventID() <= src.LastID() {
			t.Fatalf("event id %d after import, want above the imported ids (up to %d)", next[0].Key.EventID(), src.LastID())
		}
	})
}

// TestRepository_Import_RefusesAKeyOfAnotherMessage checks that a key that
// does not name its message (another topic, another event id) stores
// nothing.
func TestRepository_Import_RefusesAKeyOfAnotherMessage(t *testing.T) {
	forEachEngine(t, false, func(t *testing.T, e engine) {
		r := openRepo(t, e.open(t, t.TempDir()), delaystore.RepositoryConfig{})
		m := msg("a", t0)
		m.EventId = 7
		for _, k := range []keys.Key{keys.New(keys.TopicHash("b"), 1, 7), keys.New(keys.TopicHash("a"), 1, 8)} {
			if stored, err := r.Import([]delaystore.Imported{{Key: k, Msg: m}}, delaystore.Sync); err == nil || len(stored) != 0 {
				t.Fatalf("Import under %v = %v, %v; want an error", k, stored, err)
			}
		}
		if r.Pending() != 0 {
			t.Fatalf("%d pending after refused imports, want 0", r.Pending())
		}
	})
}
