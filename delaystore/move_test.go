package delaystore_test

import (
	"errors"
	"testing"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/keys"
)

// TestRepository_Move_KeepsIndexesAndOrder checks, on every engine, that
// Move stores the message under the key of its new time with the same
// event id, moves its client id entry and its expiry (fire time + TTL),
// keeps the counts, and leaves nothing under the old key; and that a
// refusal from the MoveFunc or a key not pending changes nothing.
func TestRepository_Move_KeepsIndexesAndOrder(t *testing.T) {
	forEachEngine(t, false, func(t *testing.T, e engine) {
		r := openRepo(t, e.open(t, t.TempDir()), delaystore.RepositoryConfig{})
		m := withID(msg("a", t0+10e9), "x")
		m.TtlNs = 5e9
		m.ExpireAtNs = m.FireAtNs + m.TtlNs
		got := schedule(t, r, m, msg("a", t0+20e9))
		before := r.Pending()

		s, err := r.Move(got[0].Key, func(*delaystore.StoredMessage) (int64, error) { return t0 + 30e9, nil }, "", delaystore.Sync)
		if err != nil {
			t.Fatalf("Move: %v", err)
		}
		if s.Key == got[0].Key || s.Key.EventID() != got[0].Key.EventID() || s.Replaced != got[0].Key {
			t.Fatalf("moved to %v from %v, want a new key with event id %d", s.Key, s.Replaced, got[0].Key.EventID())
		}
		if _, err := r.Get(got[0].Key); !errors.Is(err, delaystore.ErrNotFound) {
			t.Fatalf("old key after Move: %v, want ErrNotFound", err)
		}
		moved, err := r.Get(s.Key)
		if err != nil || moved.FireAtNs != t0+30e9 || moved.ExpireAtNs != t0+35e9 || string(moved.Payload) != "payload of a" {
			t.Fatalf("moved message = %v, %v", moved, err)
		}
		if k, err := r.Lookup("a", "x"); err != nil || k != s.Key {
			t.Fatalf("Lookup = %v, %v; want %v", k, err, s.Key)
		}
		if ks, _ := r.Expired(t0+34e9, 10); len(ks) != 0 {
			t.Fatalf("expired at the old expiry: %v, want none", ks)
		}
		if ks, _ := r.Expired(t0+35e9, 10); len(ks) != 1 || ks[0] != s.Key {
			t.Fatalf("expired at the new expiry: %v, want %v", ks, s.Key)
		}
		if r.Pending() != before {
			t.Fatalf("Pending = %d after Move, want %d", r.Pending(), before)
		}
		// In key order the moved message now follows the other one.
		var order []keys.Key
		if err := r.ScanTopic(keys.TopicHash("a"), nil, nil, func(k keys.Key, _ *delaystore.StoredMessage) bool {
			order = append(order, k)
			return true
		}); err != nil || len(order) != 2 || order[0] != got[1].Key || order[1] != s.Key {
			t.Fatalf("ScanTopic = %v, %v; want %v then %v", order, err, got[1].Key, s.Key)
		}
		if n, err := r.CountDue(keys.TopicHash("a"), (t0+25e9)/1e6, (t0+30e9)/1e6); err != nil || n[0] != 1 || n[1] != 2 {
			t.Fatalf("CountDue = %v, %v; want [1 2]", n, err)
		}

		refused := errors.New("refused")
		if _, err := r.Move(s.Key, func(*delaystore.StoredMessage) (int64, error) { return 0, refused }, "", delaystore.Sync); !errors.Is(err, refused) {
			t.Fatalf("Move refused by its func: %v", err)
		}
		if _, err := r.Move(got[0].Key, func(*delaystore.StoredMessage) (int64, error) { return t0, nil }, "", delaystore.Sync); !errors.Is(err, delaystore.ErrNotFound) {
			t.Fatalf("Move of a key not pending: %v, want ErrNotFound", err)
		}
		if k, _ := r.Lookup("a", "x"); k != s.Key {
			t.Fatalf("Lookup after refused moves = %v, want %v", k, s.Key)
		}
	})
}
