package delaystore_test

import (
	"errors"
	"testing"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/keys"
)

func dead(reason string, diedAtNs int64) *delaystore.Dead {
	return &delaystore.Dead{Reason: reason, Attempts: 3, LastAnswer: "-NAK", DiedAtNs: diedAtNs}
}

// TestRepository_Dead_SameCommitAsDelete checks, on every engine, that a
// delete with Op.Dead leaves the dead letter with its reason, attempts,
// last answer and time of death in place of the pending message, counted
// per subject and in total, and that both survive a reopen.
func TestRepository_Dead_SameCommitAsDelete(t *testing.T) {
	forEachEngine(t, false, func(t *testing.T, e engine) {
		dir := t.TempDir()
		s := e.open(t, dir)
		r := openRepo(t, s, delaystore.RepositoryConfig{})
		got := schedule(t, r, withID(msg("orders.a", t0), "x"), msg("orders.a", t0+1), msg("orders.b", t0))
		applied := apply(t, r, delaystore.Op{Key: got[0].Key, Dead: dead("max-deliver", t0+5)}, delaystore.Op{Key: got[2].Key, Dead: dead("term", t0+6)})
		if !applied[0] || !applied[1] {
			t.Fatalf("applied = %v, want both", applied)
		}
		check := func(r *delaystore.Repository) {
			t.Helper()
			if r.Pending() != 1 || r.Dead() != 2 {
				t.Fatalf("pending %d, dead %d; want 1, 2", r.Pending(), r.Dead())
			}
			if _, err := r.Get(got[0].Key); !errors.Is(err, delaystore.ErrNotFound) {
				t.Fatalf("Get of the dead message: %v, want ErrNotFound", err)
			}
			if _, err := r.Lookup("orders.a", "x"); !errors.Is(err, delaystore.ErrNotFound) {
				t.Fatalf("Lookup of the dead message's id: %v, want ErrNotFound", err)
			}
			dl, err := r.GetDead(got[0].Key)
			if err != nil {
				t.Fatalf("GetDead: %v", err)
			}
			if dl.Reason != "max-deliver" || dl.Attempts != 3 || dl.LastAnswer != "-NAK" || dl.DiedAtNs != t0+5 ||
				dl.Message.GetSubject() != "orders.a" || dl.Message.GetClientId() != "x" || string(dl.Message.GetPayload()) != "payload of orders.a" {
				t.Fatalf("dead letter = %v", dl)
			}
			if n, err := r.DeadFor("orders.a"); err != nil || n != 1 {
				t.Fatalf("DeadFor(orders.a) = %d, %v; want 1", n, err)
			}
			var subjects []string
			if err := r.ScanDeadTopics("", func(d delaystore.DeadTopic) bool {
				subjects = append(subjects, d.Subject)
				return true
			}); err != nil || len(subjects) != 2 || subjects[0] != "orders.a" || subjects[1] != "orders.b" {
				t.Fatalf("ScanDeadTopics = %v, %v; want orders.a, orders.b", subjects, err)
			}
		}
		check(r)
		if !e.durable {
			return
		}
		r.Close()
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		check(openRepo(t, e.open(t, dir), delaystore.RepositoryConfig{}))
	})
}

// TestRepository_Dead_FailedCommitKeepsPending checks that a failed
// commit of a dead-lettering delete leaves the pending message and no dead
// letter: never both, never neither.
func TestRepository_Dead_FailedCommitKeepsPending(t *testing.T) {
	fs := &failStore{Store: newStore(t)}
	r := openRepo(t, fs, delaystore.RepositoryConfig{})
	got := schedule(t, r, msg("a", t0))
	fs.fail.Store(true)
	if _, err := r.Apply([]delaystore.Op{{Key: got[0].Key, Dead: dead("term", t0)}}, delaystore.NoSync); !errors.Is(err, errInjected) {
		t.Fatalf("Apply with a failing commit: %v, want the injected error", err)
	}
	if _, err := r.Get(got[0].Key); err != nil {
		t.Fatalf("pending message after the failed commit: %v", err)
	}
	if _, err := r.GetDead(got[0].Key); !errors.Is(err, delaystore.ErrNotFound) {
		t.Fatalf("dead letter after the failed commit: %v, want ErrNotFound", err)
	}
	if r.Dead() != 0 || r.Pending() != 1 {
		t.Fatalf("dead %d, pending %d; want 0, 1", r.Dead(), r.Pending())
	}
	fs.fail.Store(false)
	apply(t, r, delaystore.Op{Key: got[0].Key, Dead: dead("term", t0)})
	if r.Dead() != 1 || r.Pending() != 0 {
		t.Fatalf("dead %d, pending %d; want 1, 0", r.Dead(), r.Pending())
	}
}

// TestRepository_Dead_OnlyPendingDies checks that a dead-lettering delete
// of a key that is not pending (ACKed or canceled first) keeps nothing, and
// that a second one of the same key keeps one dead letter.
func TestRepository_Dead_OnlyPendingDies(t *testing.T) {
	r, _ := newRepo(t)
	got := schedule(t, r, msg("a", t0), msg("a", t0+1))
	applied := apply(t, r, delaystore.Op{Key: got[0].Key}, delaystore.Op{Key: got[0].Key, Dead: dead("term", t0)},
		delaystore.Op{Key: got[1].Key, Dead: dead("term", t0)}, delaystore.Op{Key: got[1].Key, Dead: dead("term", t0)})
	if !applied[0] || applied[1] || !applied[2] || applied[3] {
		t.Fatalf("applied = %v, want [true false true false]", applied)
	}
	if r.Dead() != 1 {
		t.Fatalf("Dead = %d, want 1", r.Dead())
	}
	if _, err := r.GetDead(got[0].Key); !errors.Is(err, delaystore.ErrNotFound) {
		t.Fatalf("dead letter of an ACKed message: %v, want ErrNotFound", err)
	}
}

// TestRepository_Dead_PurgeAndDelete checks that PurgeDead removes only
// dead letters that died at or before the time given, oldest first, and
// DeleteDead only those asked for, keeping the counts exact.
func TestRepository_Dead_PurgeAndDelete(t *testing.T) {
	r, _ := newRepo(t)
	got := schedule(t, r, msg("a", t0), msg("a", t0+1), msg("b", t0+2), msg("b", t0+3))
	for i, g := range got {
		apply(t, r, delaystore.Op{Key: g.Key, Dead: dead("max-deliver", t0+int64(i)*10)})
	}
	if n, err := r.PurgeDead(t0+10, 100); err != nil || n != 2 {
		t.Fatalf("PurgeDead = %d, %v; want 2", n, err)
	}
	for i, g := range got {
		_, err := r.GetDead(g.Key)
		if gone := errors.Is(err, delaystore.ErrNotFound); gone != (i < 2) {
			t.Fatalf("dead letter %d after the purge: %v", i, err)
		}
	}
	if n, _ := r.DeadFor("a"); n != 0 || r.Dead() != 2 {
		t.Fatalf("DeadFor(a) = %d, Dead = %d; want 0, 2", n, r.Dead())
	}
	deleted, err := r.DeleteDead([]keys.Key{got[0].Key, got[3].Key, got[3].Key}, delaystore.Sync)
	if err != nil || deleted[0] || !deleted[1] || deleted[2] {
		t.Fatalf("DeleteDead = %v, %v; want [false true false]", deleted, err)
	}
	var left []keys.Key
	if err := r.ScanDead(0, false, nil, func(k keys.Key, _ *delaystore.DeadLetter) bool {
		left = append(left, k)
		return true
	}); err != nil || len(left) != 1 || left[0] != got[2].Key || r.Dead() != 1 {
		t.Fatalf("ScanDead = %v, %v, Dead = %d; want only %v", left, err, r.Dead(), got[2].Key)
	}
}
