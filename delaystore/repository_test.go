package delaystore_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/delaystore/storetest"
	"github.com/natsdelay/natsdelay/keys"
)

// t0 is an arbitrary fire time, in Unix nanoseconds, that tests count from.
const t0 = int64(1_800_000_000_000_000_000)

func openRepo(tb testing.TB, s delaystore.Store, cfg delaystore.RepositoryConfig) *delaystore.Repository {
	tb.Helper()
	if cfg.Logger == nil {
		cfg.Logger = testLogger(tb)
	}
	if cfg.Now == nil {
		// The tests' messages are due around t0, which the message
		// cache then takes for due soon (see cacheHorizon).
		cfg.Now = func() time.Time { return time.Unix(0, t0) }
	}
	r, err := delaystore.OpenRepository(s, cfg)
	if err != nil {
		tb.Fatalf("OpenRepository: %v", err)
	}
	tb.Cleanup(func() { r.Close() })
	return r
}

func newRepo(tb testing.TB) (*delaystore.Repository, delaystore.Store) {
	tb.Helper()
	s := newStore(tb)
	return openRepo(tb, s, delaystore.RepositoryConfig{}), s
}

func msg(subject string, fireAtNs int64) *delaystore.StoredMessage {
	return &delaystore.StoredMessage{Subject: subject, FireAtNs: fireAtNs, Payload: []byte("payload of " + subject)}
}

func withID(m *delaystore.StoredMessage, clientID string) *delaystore.StoredMessage {
	m.ClientId = clientID
	return m
}

func withExpiry(m *delaystore.StoredMessage, expireAtNs int64) *delaystore.StoredMessage {
	m.ExpireAtNs = expireAtNs
	return m
}

func schedule(tb testing.TB, r *delaystore.Repository, msgs ...*delaystore.StoredMessage) []delaystore.Scheduled {
	tb.Helper()
	out, err := r.Schedule(msgs, delaystore.Sync)
	if err != nil {
		tb.Fatalf("Schedule: %v", err)
	}
	if len(out) != len(msgs) {
		tb.Fatalf("Schedule returned %d results for %d messages", len(out), len(msgs))
	}
	return out
}

func pendingFor(tb testing.TB, r *delaystore.Repository, subject string) uint64 {
	tb.Helper()
	n, err := r.PendingFor(subject)
	if err != nil {
		tb.Fatalf("PendingFor(%q): %v", subject, err)
	}
	return n
}

func topics(tb testing.TB, r *delaystore.Repository) []delaystore.Topic {
	tb.Helper()
	ts, err := r.Topics()
	if err != nil {
		tb.Fatalf("Topics: %v", err)
	}
	return ts
}

func apply(tb testing.TB, r *delaystore.Repository, ops ...delaystore.Op) []bool {
	tb.Helper()
	applied, err := r.Apply(ops, delaystore.NoSync)
	if err != nil {
		tb.Fatalf("Apply: %v", err)
	}
	return applied
}

// allKeys returns every key in s, in order.
func allKeys(tb testing.TB, s delaystore.Store) [][]byte {
	tb.Helper()
	var out [][]byte
	if err := s.Scan(delaystore.IterOptions{}, func(k, _ []byte) bool {
		out = append(out, bytes.Clone(k))
		return true
	}); err != nil {
		tb.Fatalf("Scan: %v", err)
	}
	return out
}

// eventKeys returns every 24-byte key in s, in order.
func eventKeys(tb testing.TB, s delaystore.Store) []keys.Key {
	tb.Helper()
	var out []keys.Key
	for _, k := range allKeys(tb, s) {
		if len(k) == keys.Len {
			out = append(out, keys.Key(k))
		}
	}
	return out
}

// TestRepository_Schedule_IDsIncrease checks that event IDs start at 1 and
// strictly increase across calls, and that each message's key and EventId
// carry its ID.
func TestRepository_Schedule_IDsIncrease(t *testing.T) {
	r, _ := newRepo(t)
	if r.LastID() != 0 {
		t.Fatalf("LastID of a new repository = %d, want 0", r.LastID())
	}
	want := uint64(1)
	for _, n := range []int{1, 3, 1, 10} {
		msgs := make([]*delaystore.StoredMessage, n)
		for i := range msgs {
			msgs[i] = msg([]string{"a", "a", "b"}[i%3], t0) // runs of subjects
		}
		for i, s := range schedule(t, r, msgs...) {
			if s.Key.EventID() != want || msgs[i].EventId != want {
				t.Fatalf("message %d: key id %d, EventId %d; want %d", i, s.Key.EventID(), msgs[i].EventId, want)
			}
			if k := keys.Make(msgs[i].Subject, t0/1e6, 0, want); s.Key != k {
				t.Fatalf("message %d: key %v, want keys.Make's %v", i, s.Key, k)
			}
			want++
		}
		if r.LastID() != want-1 {
			t.Fatalf("LastID = %d, want %d", r.LastID(), want-1)
		}
	}
	if a, b := pendingFor(t, r, "a"), pendingFor(t, r, "b"); a != 11 || b != 4 {
		t.Fatalf("counts over runs of subjects: a %d, b %d; want 11, 4", a, b)
	}
}

// TestRepository_Open_IDsSurviveReopen checks, on every engine that keeps
// data on disk, that a reopened repository continues after the last ID it committed and
// reads back its counts.
func TestRepository_Open_IDsSurviveReopen(t *testing.T) {
	forEachEngine(t, true, testOpenIDsSurviveReopen)
}

func testOpenIDsSurviveReopen(t *testing.T, e engine) {
	dir := t.TempDir()
	s := e.open(t, dir)
	r := openRepo(t, s, delaystore.RepositoryConfig{})
	schedule(t, r, msg("a", t0), msg("b", t0), msg("a", t0+1))
	r.Close()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	r2 := openRepo(t, e.open(t, dir), delaystore.RepositoryConfig{})
	if r2.LastID() != 3 {
		t.Fatalf("LastID after reopen = %d, want 3", r2.LastID())
	}
	got := schedule(t, r2, msg("a", t0))
	if id := got[0].Key.EventID(); id != 4 {
		t.Fatalf("first ID after reopen = %d, want 4", id)
	}
	if r2.Pending() != 4 || pendingFor(t, r2, "a") != 3 || pendingFor(t, r2, "b") != 1 {
		t.Fatalf("counts after reopen: pending %d, a %d, b %d; want 4, 3, 1", r2.Pending(), pendingFor(t, r2, "a"), pendingFor(t, r2, "b"))
	}
}

// TestRepository_Schedule_CrashNeverReusesID checks that after a crash, with
// no clean close, the reopened repository never hands out an ID that a
// surviving message has, nor one that a Sync commit returned: the last ID is
// written in the same batch as the messages it numbers. Crashes keep only
// what was synced, or that plus a random part of what was not.
func TestRepository_Schedule_CrashNeverReusesID(t *testing.T) {
	for _, unsynced := range []int{0, 50, 100} {
		t.Run(fmt.Sprintf("unsynced %d%%", unsynced), func(t *testing.T) {
			fs := vfs.NewCrashableMem()
			r := openRepo(t, openDisk(t, "/db", fs), delaystore.RepositoryConfig{})
			var synced uint64 // highest ID whose Sync commit returned
			for i := 0; i < 6; i++ {
				mode := delaystore.Sync
				if i%2 == 1 {
					mode = delaystore.NoSync
				}
				got, err := r.Schedule([]*delaystore.StoredMessage{msg("a", t0), withExpiry(msg("b", t0), t0)}, mode)
				if err != nil {
					t.Fatal(err)
				}
				if mode == delaystore.Sync {
					synced = got[1].Key.EventID()
				}
			}

			crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: unsynced, RNG: rand.New(rand.NewPCG(uint64(unsynced), 1))})
			s2 := openDisk(t, "/db", crashed)
			r2 := openRepo(t, s2, delaystore.RepositoryConfig{})
			stored := eventKeys(t, s2)
			var highest uint64
			for _, k := range stored {
				highest = max(highest, k.EventID())
			}
			if r2.LastID() < highest || r2.LastID() < synced {
				t.Fatalf("after crash LastID = %d, but stored messages reach %d and Sync commits reached %d", r2.LastID(), highest, synced)
			}
			if uint64(len(stored)) != r2.Pending() {
				t.Fatalf("after crash %d messages stored, Pending = %d: the counts are not in the messages' batches", len(stored), r2.Pending())
			}
			t.Logf("after crash: %d of 12 messages survive, last id %d, synced %d", len(stored), r2.LastID(), synced)
			next := schedule(t, r2, msg("a", t0))[0].Key.EventID()
			if next <= highest || next <= synced {
				t.Fatalf("after crash the next ID is %d, reusing an ID up to %d", next, max(highest, synced))
			}
		})
	}
}

// TestRepository_Schedule_FailedCommit checks that a batch whose commit fails
// stores nothing, leaves the counts and LastID alone, and that its IDs are
// skipped, never reused.
func TestRepository_Schedule_FailedCommit(t *testing.T) {
	dir := t.TempDir()
	fs := &failStore{Store: openDisk(t, dir, nil)}
	r := openRepo(t, fs, delaystore.RepositoryConfig{})
	schedule(t, r, msg("a", t0))
	before := allKeys(t, fs)

	fs.fail.Store(true)
	failed := []*delaystore.StoredMessage{msg("a", t0), withID(msg("b", t0), "x"), withExpiry(msg("c", t0), t0)}
	if _, err := r.Schedule(failed, delaystore.Sync); !errors.Is(err, errInjected) {
		t.Fatalf("Schedule with failing commit: error %v, want the injected one", err)
	}
	if after := allKeys(t, fs); len(after) != len(before) {
		t.Fatalf("failed commit changed the store: %d keys before, %d after", len(before), len(after))
	}
	if r.Pending() != 1 || pendingFor(t, r, "b") != 0 || len(topics(t, r)) != 1 || r.LastID() != 1 {
		t.Fatalf("after failed commit: pending %d, topics %v, last id %d; want 1, [a], 1", r.Pending(), topics(t, r), r.LastID())
	}

	fs.fail.Store(false)
	got := schedule(t, r, msg("a", t0))
	for _, m := range failed {
		if got[0].Key.EventID() <= m.EventId {
			t.Fatalf("ID %d after a failed commit reuses or precedes failed ID %d", got[0].Key.EventID(), m.EventId)
		}
	}
	if r.Pending() != 2 {
		t.Fatalf("Pending = %d, want 2", r.Pending())
	}
}

// TestRepository_Schedule_StoreClosed checks that writes to a closed store
// fail without changing the counts, and that nothing of them is there when
// the store is reopened.
func TestRepository_Schedule_StoreClosed(t *testing.T) {
	dir := t.TempDir()
	s := openDisk(t, dir, nil)
	r := openRepo(t, s, delaystore.RepositoryConfig{})
	got := schedule(t, r, msg("a", t0), msg("a", t0))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Schedule([]*delaystore.StoredMessage{msg("b", t0)}, delaystore.Sync); !errors.Is(err, delaystore.ErrClosed) {
		t.Fatalf("Schedule on a closed store: error %v, want ErrClosed", err)
	}
	if _, err := r.Apply([]delaystore.Op{{Key: got[0].Key}}, delaystore.Sync); !errors.Is(err, delaystore.ErrClosed) {
		t.Fatalf("Apply on a closed store: error %v, want ErrClosed", err)
	}
	if r.Pending() != 2 || r.Subjects() != 1 || r.LastID() != 2 {
		t.Fatalf("after failed writes: pending %d, subjects %d, last id %d; want 2, 1, 2", r.Pending(), r.Subjects(), r.LastID())
	}
	r.Close()

	s2 := openDisk(t, dir, nil)
	r2 := openRepo(t, s2, delaystore.RepositoryConfig{})
	if n := len(eventKeys(t, s2)); n != 2 || r2.Pending() != 2 || r2.LastID() != 2 {
		t.Fatalf("after reopen: %d messages, pending %d, last id %d; want 2, 2, 2", n, r2.Pending(), r2.LastID())
	}
}

// TestRepository_ObserveID checks that IDs observed from elsewhere are never
// assigned, and that an older observation does not move IDs back.
func TestRepository_ObserveID(t *testing.T) {
	r, s := newRepo(t)
	schedule(t, r, msg("a", t0))
	r.ObserveID(100)
	r.ObserveID(50)
	if r.LastID() != 100 {
		t.Fatalf("LastID = %d, want 100", r.LastID())
	}
	if id := schedule(t, r, msg("a", t0))[0].Key.EventID(); id != 101 {
		t.Fatalf("ID after ObserveID(100) = %d, want 101", id)
	}
	// The next commit persisted the observed ID.
	r2 := openRepo(t, s, delaystore.RepositoryConfig{})
	if r2.LastID() != 101 {
		t.Fatalf("LastID after reopen = %d, want 101", r2.LastID())
	}
}

// TestRepository_Schedule_FireAtRoundsUp checks that the key time is the fire
// time rounded up to the millisecond, so a key never sorts a message before
// it is due.
func TestRepository_Schedule_FireAtRoundsUp(t *testing.T) {
	tests := []struct {
		name     string
		fireAtNs int64
		bucket   time.Duration
		want     uint64
	}{
		{"whole millisecond", 5_000_000, 0, 5},
		{"one nanosecond over", 5_000_001, 0, 6},
		{"just under", 4_999_999, 0, 5},
		{"zero", 0, 0, 0},
		{"before 1970 clamps", -1_500_000, 0, 0},
		{"bucketed", 1_999_000_001, time.Second, 2},
		{"bucketed boundary", 2_000_000_000, time.Second, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := openRepo(t, newStore(t), delaystore.RepositoryConfig{TimeBucket: tt.bucket})
			got := schedule(t, r, msg("a", tt.fireAtNs))[0].Key
			if got.Bucket() != tt.want {
				t.Fatalf("bucket of fire time %dns = %d, want %d", tt.fireAtNs, got.Bucket(), tt.want)
			}
			if got.TopicHash() != keys.TopicHash("a") {
				t.Fatalf("topic hash %x, want %x", got.TopicHash(), keys.TopicHash("a"))
			}
		})
	}
}

// TestRepository_Schedule_ReplaceByClientID checks that a message with a
// pending (subject, client id) replaces the old one atomically, also within
// one call, and only within its subject.
func TestRepository_Schedule_ReplaceByClientID(t *testing.T) {
	r, s := newRepo(t)
	first := schedule(t, r, withID(msg("a", t0), "x"), withID(msg("b", t0), "x"), msg("a", t0))
	if first[0].HasReplaced || first[1].HasReplaced {
		t.Fatalf("first schedule reports a replacement: %+v", first)
	}

	t.Run("pending", func(t *testing.T) {
		m := withExpiry(withID(msg("a", t0+5), "x"), t0+10)
		got := schedule(t, r, m)[0]
		if !got.HasReplaced || got.Replaced != first[0].Key {
			t.Fatalf("Scheduled = %+v, want it to replace %v", got, first[0].Key)
		}
		if _, err := r.Get(first[0].Key); !errors.Is(err, delaystore.ErrNotFound) {
			t.Fatalf("Get(replaced) error = %v, want ErrNotFound", err)
		}
		if k, err := r.Lookup("a", "x"); err != nil || k != got.Key {
			t.Fatalf("Lookup = %v, %v; want %v", k, err, got.Key)
		}
		if k, err := r.Lookup("b", "x"); err != nil || k != first[1].Key {
			t.Fatalf("Lookup in another subject = %v, %v; want %v (untouched)", k, err, first[1].Key)
		}
		if pendingFor(t, r, "a") != 2 || r.Pending() != 3 {
			t.Fatalf("counts: a %d, total %d; want 2, 3", pendingFor(t, r, "a"), r.Pending())
		}
	})

	t.Run("within one call", func(t *testing.T) {
		prev, _ := r.Lookup("a", "x")
		m1, m2, m3 := withExpiry(withID(msg("a", t0+1), "x"), t0+1), msg("a", t0), withID(msg("a", t0+2), "x")
		got := schedule(t, r, m1, m2, m3)
		if !got[0].HasReplaced || got[0].Replaced != prev {
			t.Fatalf("first in call = %+v, want it to replace %v", got[0], prev)
		}
		if !got[2].HasReplaced || got[2].Replaced != got[0].Key {
			t.Fatalf("last in call = %+v, want it to replace %v", got[2], got[0].Key)
		}
		if _, err := r.Get(got[0].Key); !errors.Is(err, delaystore.ErrNotFound) {
			t.Fatalf("the earlier message of the call was stored: %v", err)
		}
		if k, _ := r.Lookup("a", "x"); k != got[2].Key {
			t.Fatalf("Lookup = %v, want the later message %v", k, got[2].Key)
		}
		if ks, _ := r.Expired(t0+100, 10); len(ks) != 0 {
			t.Fatalf("expiry entries of replaced messages remain: %v", ks)
		}
		if pendingFor(t, r, "a") != 3 {
			t.Fatalf("PendingFor(a) = %d, want 3", pendingFor(t, r, "a"))
		}
	})

	t.Run("after delete", func(t *testing.T) {
		prev, _ := r.Lookup("a", "x")
		apply(t, r, delaystore.Op{Key: prev})
		if _, err := r.Lookup("a", "x"); !errors.Is(err, delaystore.ErrNotFound) {
			t.Fatalf("Lookup after delete error = %v, want ErrNotFound", err)
		}
		if got := schedule(t, r, withID(msg("a", t0), "x"))[0]; got.HasReplaced {
			t.Fatalf("Scheduled = %+v, want no replacement of a deleted message", got)
		}
	})

	// Every 24-byte key is a pending message the counts know about.
	if n := len(eventKeys(t, s)); uint64(n) != r.Pending() {
		t.Fatalf("%d event keys stored, Pending = %d", n, r.Pending())
	}
}

// TestRepository_Lookup checks the client id index's answers and its input
// validation.
func TestRepository_Lookup(t *testing.T) {
	r, _ := newRepo(t)
	got := schedule(t, r, withID(msg("a", t0), "x"), withID(msg("a.b", t0), "x"))
	tests := []struct {
		name, subject, id string
		want              keys.Key
		err               error
	}{
		{"found", "a", "x", got[0].Key, nil},
		{"other subject", "a.b", "x", got[1].Key, nil},
		{"unknown id", "a", "y", keys.Key{}, delaystore.ErrNotFound},
		{"unknown subject", "c", "x", keys.Key{}, delaystore.ErrNotFound},
		{"empty id", "a", "", keys.Key{}, delaystore.ErrInvalidMessage},
		{"empty subject", "", "x", keys.Key{}, delaystore.ErrInvalidMessage},
		{"NUL in id", "a", "x\x00", keys.Key{}, delaystore.ErrInvalidMessage},
		{"NUL in subject", "a\x00", "x", keys.Key{}, delaystore.ErrInvalidMessage},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, err := r.Lookup(tt.subject, tt.id)
			if !errors.Is(err, tt.err) || k != tt.want {
				t.Fatalf("Lookup(%q, %q) = %v, %v; want %v, %v", tt.subject, tt.id, k, err, tt.want, tt.err)
			}
		})
	}
}

// TestRepository_Schedule_RejectsInvalid checks that a subject or client id
// that would make index keys ambiguous is refused and nothing is stored.
func TestRepository_Schedule_RejectsInvalid(t *testing.T) {
	tests := map[string]*delaystore.StoredMessage{
		"empty subject":  msg("", t0),
		"NUL in subject": msg("a\x00b", t0),
		"NUL in id":      withID(msg("a", t0), "x\x00y"),
		"bad UTF-8":      msg("a\xff", t0),
		"bad header":     {Subject: "a", Headers: []*delaystore.Header{{Name: "h", Values: []string{"\xff"}}}},
	}
	for name, bad := range tests {
		t.Run(name, func(t *testing.T) {
			r, s := newRepo(t)
			before := len(allKeys(t, s))
			_, err := r.Schedule([]*delaystore.StoredMessage{msg("ok", t0), bad}, delaystore.Sync)
			if !errors.Is(err, delaystore.ErrInvalidMessage) {
				t.Fatalf("Schedule error = %v, want ErrInvalidMessage", err)
			}
			if !strings.HasPrefix(err.Error(), "delaystore: ") {
				t.Fatalf("error %q lacks the package prefix", err)
			}
			if after := len(allKeys(t, s)); after != before || r.Pending() != 0 {
				t.Fatalf("a rejected batch stored something: %d keys before, %d after, pending %d", before, after, r.Pending())
			}
		})
	}
}

// TestRepository_Apply_DropsMissing checks that an op on a key that is not
// pending is dropped: an update never resurrects a deleted message, and a
// second delete does not decrement the counts again.
func TestRepository_Apply_DropsMissing(t *testing.T) {
	r, _ := newRepo(t)
	got := schedule(t, r, msg("a", t0), msg("a", t0), msg("b", t0))
	k0, k1, k2 := got[0].Key, got[1].Key, got[2].Key
	upd := func(k keys.Key, attempt uint32) delaystore.Op {
		m, err := r.Get(k)
		if err != nil {
			t.Fatalf("Get(%v): %v", k, err)
		}
		m.Attempt = attempt
		return delaystore.Op{Key: k, Msg: m}
	}

	applied := apply(t, r, upd(k0, 1), delaystore.Op{Key: k0}, delaystore.Op{Key: k0})
	if want := []bool{true, true, false}; !equalBools(applied, want) {
		t.Fatalf("update, delete, delete in one call: applied %v, want %v", applied, want)
	}
	stale := upd(k1, 2)
	applied = apply(t, r, delaystore.Op{Key: k1}, stale)
	if want := []bool{true, false}; !equalBools(applied, want) {
		t.Fatalf("delete then update in one call: applied %v, want %v", applied, want)
	}
	applied = apply(t, r, stale, delaystore.Op{Key: k1}, delaystore.Op{Key: k0})
	if want := []bool{false, false, false}; !equalBools(applied, want) {
		t.Fatalf("ops on deleted keys in a later call: applied %v, want %v", applied, want)
	}
	for _, k := range []keys.Key{k0, k1} {
		if _, err := r.Get(k); !errors.Is(err, delaystore.ErrNotFound) {
			t.Fatalf("Get(%v) after delete = %v, want ErrNotFound: an update resurrected it", k, err)
		}
	}
	if r.Pending() != 1 || pendingFor(t, r, "a") != 0 || pendingFor(t, r, "b") != 1 {
		t.Fatalf("counts: total %d, a %d, b %d; want 1, 0, 1", r.Pending(), pendingFor(t, r, "a"), pendingFor(t, r, "b"))
	}

	applied = apply(t, r, upd(k2, 3))
	if m, err := r.Get(k2); err != nil || m.Attempt != 3 || m.EventId != k2.EventID() || !applied[0] {
		t.Fatalf("after update: %v, %v, applied %v; want attempt 3 and event id %d", m, err, applied, k2.EventID())
	}
}

func equalBools(a, b []bool) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestRepository_Counts_Exact checks that the registry counts stay exact
// through deletes, double deletes and a reopen, and that a subject's entry
// disappears, in memory and in the store, when its count reaches zero.
func TestRepository_Counts_Exact(t *testing.T) {
	forEachEngine(t, true, testCountsExact)
}

func testCountsExact(t *testing.T, e engine) {
	dir := t.TempDir()
	s := e.open(t, dir)
	r := openRepo(t, s, delaystore.RepositoryConfig{})
	a := schedule(t, r, msg("a", t0), msg("a", t0), msg("a", t0))
	b := schedule(t, r, msg("b", t0), msg("b", t0))
	apply(t, r, delaystore.Op{Key: a[0].Key}, delaystore.Op{Key: a[0].Key}, delaystore.Op{Key: b[0].Key})
	apply(t, r, delaystore.Op{Key: a[0].Key})

	check := func(r *delaystore.Repository, want map[string]uint64) {
		t.Helper()
		var total uint64
		for subject, n := range want {
			total += n
			if got := pendingFor(t, r, subject); got != n {
				t.Errorf("PendingFor(%q) = %d, want %d", subject, got, n)
			}
		}
		if r.Pending() != total {
			t.Errorf("Pending = %d, want %d", r.Pending(), total)
		}
		var subjects []string
		for _, tp := range topics(t, r) {
			if tp.Hash != keys.TopicHash(tp.Subject) || tp.Pending != want[tp.Subject] {
				t.Errorf("topic %+v, want hash %x and %d pending", tp, keys.TopicHash(tp.Subject), want[tp.Subject])
			}
			subjects = append(subjects, tp.Subject)
		}
		if len(subjects) != len(want) || r.Subjects() != uint64(len(want)) {
			t.Errorf("Topics = %v, Subjects = %d, want the subjects of %v", subjects, r.Subjects(), want)
		}
	}
	check(r, map[string]uint64{"a": 2, "b": 1})

	reopen := func() {
		t.Helper()
		r.Close()
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s = e.open(t, dir)
		r = openRepo(t, s, delaystore.RepositoryConfig{})
	}
	reopen()
	check(r, map[string]uint64{"a": 2, "b": 1})

	apply(t, r, delaystore.Op{Key: b[1].Key}, delaystore.Op{Key: b[1].Key})
	check(r, map[string]uint64{"a": 2})
	for _, k := range allKeys(t, s) {
		if bytes.Contains(k, []byte("topic/b")) {
			t.Fatalf("registry entry %q remains after the count reached zero", k)
		}
	}
	reopen()
	check(r, map[string]uint64{"a": 2})
}

// TestRepository_Expired checks that Expired returns only messages expired at
// now, in expiry order, at most limit of them, and that it reads only expired
// index entries.
func TestRepository_Expired(t *testing.T) {
	forEachEngine(t, false, testExpired)
}

func testExpired(t *testing.T, e engine) {
	cs := &countStore{Store: e.open(t, t.TempDir())}
	r := openRepo(t, cs, delaystore.RepositoryConfig{})
	// Expiry times deliberately out of publish order; some never expire.
	exp := []int64{t0 + 30, t0 + 10, 0, t0 + 20, t0 + 1000, t0 + 10, 0, t0 + 2000}
	msgs := make([]*delaystore.StoredMessage, len(exp))
	for i, e := range exp {
		msgs[i] = withExpiry(msg(fmt.Sprintf("s%d", i%3), t0), e)
	}
	got := schedule(t, r, msgs...)
	k := func(i int) keys.Key { return got[i].Key }

	tests := []struct {
		name  string
		now   int64
		limit int
		want  []keys.Key
	}{
		{"nothing yet", t0 + 9, 10, nil},
		{"at expiry time", t0 + 10, 10, []keys.Key{k(1), k(5)}},
		{"in expiry order", t0 + 999, 10, []keys.Key{k(1), k(5), k(3), k(0)}},
		{"bounded by limit", t0 + 999, 3, []keys.Key{k(1), k(5), k(3)}},
		{"everything", t0 + 5000, 100, []keys.Key{k(1), k(5), k(3), k(0), k(4), k(7)}},
		{"zero limit", t0 + 5000, 0, nil},
		{"before 1970", -1, 10, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cs.yielded.Store(0)
			ks, err := r.Expired(tt.now, tt.limit)
			if err != nil {
				t.Fatalf("Expired: %v", err)
			}
			if fmt.Sprint(ks) != fmt.Sprint(tt.want) {
				t.Fatalf("Expired(%d, %d) = %v, want %v", tt.now, tt.limit, ks, tt.want)
			}
			if n := cs.yielded.Load(); n != int64(len(tt.want)) {
				t.Fatalf("Expired read %d entries to return %d: it reads beyond what has expired", n, len(tt.want))
			}
		})
	}

	// Deleting a message removes its expiry entry; moving its expiry moves it.
	apply(t, r, delaystore.Op{Key: k(1)})
	m, err := r.Get(k(7))
	if err != nil {
		t.Fatal(err)
	}
	m.ExpireAtNs = t0 + 5
	apply(t, r, delaystore.Op{Key: k(7), Msg: m})
	ks, err := r.Expired(t0+10, 10)
	if err != nil || fmt.Sprint(ks) != fmt.Sprint([]keys.Key{k(7), k(5)}) {
		t.Fatalf("after delete and move: Expired = %v, %v; want [%v %v]", ks, err, k(7), k(5))
	}
}

// TestRepository_NonEventKeys_NeverEventLength checks, over random subject
// and client id lengths (around the 24-byte mark especially) with expiries,
// replacements and deletes, that the store's 24-byte keys are exactly the
// pending messages: no index or metadata key can be mistaken for an event.
func TestRepository_NonEventKeys_NeverEventLength(t *testing.T) {
	forEachEngine(t, false, testNonEventKeysNeverEventLength)
}

func testNonEventKeysNeverEventLength(t *testing.T, e engine) {
	rng := rand.New(rand.NewPCG(7, 11))
	str := func() string {
		// Runes of 1 to 4 bytes, anything but NUL, so byte lengths vary.
		var sb strings.Builder
		for n := 1 + rng.IntN(12); n > 0; n-- {
			r := rune(1 + rng.IntN(0x10ffff))
			if !utf8.ValidRune(r) {
				r = 'x'
			}
			sb.WriteRune(r)
		}
		return sb.String()
	}
	s := e.open(t, t.TempDir())
	r := openRepo(t, s, delaystore.RepositoryConfig{})
	pending := make(map[keys.Key]bool)

	// Every subject and client id length from 1 to 30 bytes, so every index
	// key length near the 24-byte mark is tried.
	var sweep []*delaystore.StoredMessage
	for sl := 1; sl <= 30; sl++ {
		for cl := 0; cl <= 30; cl++ {
			m := withExpiry(msg(strings.Repeat("s", sl), t0), t0+int64(cl))
			m.ClientId = strings.Repeat("c", cl)
			sweep = append(sweep, m)
		}
	}
	for _, sc := range schedule(t, r, sweep...) {
		pending[sc.Key] = true
	}
	for _, k := range allKeys(t, s) {
		if len(k) == keys.Len && !pending[keys.Key(k)] {
			t.Fatalf("length sweep: 24-byte key %x is not a pending message", k)
		}
	}

	for round := 0; round < 25; round++ {
		var msgs []*delaystore.StoredMessage
		for i := 0; i < 1+rng.IntN(8); i++ {
			m := msg(str(), t0+rng.Int64N(1e12))
			if rng.IntN(2) == 0 {
				m.ClientId = str()
			}
			if rng.IntN(2) == 0 {
				m.ExpireAtNs = m.FireAtNs + rng.Int64N(1e12)
			}
			msgs = append(msgs, m)
			if rng.IntN(4) == 0 { // same (subject, id) again: a replacement
				dup := msg(m.Subject, t0)
				dup.ClientId = m.ClientId
				msgs = append(msgs, dup)
			}
		}
		for i, sc := range schedule(t, r, msgs...) {
			if sc.HasReplaced {
				delete(pending, sc.Replaced)
			}
			pending[sc.Key] = true
			_ = i
		}
		var ops []delaystore.Op
		for k := range pending {
			if rng.IntN(3) == 0 {
				ops = append(ops, delaystore.Op{Key: k}, delaystore.Op{Key: k})
				delete(pending, k)
			}
		}
		apply(t, r, ops...)

		stored := eventKeys(t, s)
		if len(stored) != len(pending) || uint64(len(stored)) != r.Pending() {
			t.Fatalf("round %d: %d 24-byte keys stored, %d pending, Pending() = %d", round, len(stored), len(pending), r.Pending())
		}
		for _, k := range stored {
			if !pending[k] {
				t.Fatalf("round %d: 24-byte key %v is not a pending message", round, k)
			}
		}
	}
}

// TestRepository_ScanTopic checks that a topic scan yields only its own
// messages, in key order, within the bounds given, and that the messages
// stay valid after the engine reuses its buffers.
func TestRepository_ScanTopic(t *testing.T) {
	r := openRepo(t, scribbleStore{newStore(t)}, delaystore.RepositoryConfig{})
	got := schedule(t, r, msg("a", t0+3e6), msg("b", t0), msg("a", t0+1e6), msg("a", t0+2e6), msg("a", t0+1e6))
	h := keys.TopicHash("a")
	scan := func(from, upper []byte) (ks []keys.Key, ms []*delaystore.StoredMessage) {
		t.Helper()
		if err := r.ScanTopic(h, from, upper, func(k keys.Key, m *delaystore.StoredMessage) bool {
			ks, ms = append(ks, k), append(ms, m)
			return true
		}); err != nil {
			t.Fatalf("ScanTopic: %v", err)
		}
		return ks, ms
	}

	ks, ms := scan(nil, nil)
	want := []keys.Key{got[2].Key, got[4].Key, got[3].Key, got[0].Key} // fire time, then publish order
	if fmt.Sprint(ks) != fmt.Sprint(want) {
		t.Fatalf("ScanTopic = %v, want %v", ks, want)
	}
	for i, m := range ms {
		if m.Subject != "a" || string(m.Payload) != "payload of a" || m.EventId != ks[i].EventID() {
			t.Fatalf("message %d was not kept intact: %v", i, m)
		}
	}

	due := keys.DueUpperBound(h, (t0+2e6)/1e6, 0)
	if ks, _ := scan(nil, due); fmt.Sprint(ks) != fmt.Sprint(want[:3]) {
		t.Fatalf("due scan = %v, want %v", ks, want[:3])
	}
	after := append(want[1].Bytes(), 0) // just past want[1]
	if ks, _ := scan(after, due); fmt.Sprint(ks) != fmt.Sprint(want[2:3]) {
		t.Fatalf("scan from a cursor = %v, want %v", ks, want[2:3])
	}
	if ks, _ := scan(keys.TopicLowerBound(h-1), keys.TopicUpperBound(h+1)); fmt.Sprint(ks) != fmt.Sprint(want) {
		t.Fatalf("scan with bounds outside the topic = %v, want only the topic's %v", ks, want)
	}
	if ks, _ := scan(due, after); len(ks) != 0 {
		t.Fatalf("scan with inverted bounds = %v, want none", ks)
	}
	n := 0
	if err := r.ScanTopic(h, nil, nil, func(keys.Key, *delaystore.StoredMessage) bool { n++; return n < 2 }); err != nil || n != 2 {
		t.Fatalf("ScanTopic stopping after 2 yielded %d, %v", n, err)
	}
}

// TestRepository_ScanTopic_Corrupt checks that an undecodable value stops the
// scan with an error wrapping ErrCorrupt, and that Get reports it too.
func TestRepository_ScanTopic_Corrupt(t *testing.T) {
	r, s := newRepo(t)
	got := schedule(t, r, msg("a", t0), msg("a", t0+1e6))
	r.Close()
	b := s.NewBatch()
	if err := b.Set(got[1].Key[:], []byte{0xff, 0xff, 0xff}); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(delaystore.Sync); err != nil {
		t.Fatal(err)
	}
	// NB: reopened, since a Repository is its store's only writer while
	// open and serves what it wrote itself from memory.
	r = openRepo(t, s, delaystore.RepositoryConfig{})
	var seen []keys.Key
	err := r.ScanTopic(keys.TopicHash("a"), nil, nil, func(k keys.Key, _ *delaystore.StoredMessage) bool {
		seen = append(seen, k)
		return true
	})
	if !errors.Is(err, delaystore.ErrCorrupt) || len(seen) != 1 {
		t.Fatalf("ScanTopic over a corrupt value: yielded %v, error %v; want the first message, then ErrCorrupt", seen, err)
	}
	if _, err := r.Get(got[1].Key); !errors.Is(err, delaystore.ErrCorrupt) {
		t.Fatalf("Get(corrupt) error = %v, want ErrCorrupt", err)
	}
}

// TestRepository_FirstKey checks that FirstKey finds a topic's earliest key
// and nothing for an empty topic, skipping non-event keys.
func TestRepository_FirstKey(t *testing.T) {
	r, _ := newRepo(t)
	got := schedule(t, r, withID(msg("a", t0+5e6), "x"), msg("a", t0+1e6), msg("b", t0))
	if k, ok, err := r.FirstKey(keys.TopicHash("a")); err != nil || !ok || k != got[1].Key {
		t.Fatalf("FirstKey(a) = %v, %v, %v; want %v", k, ok, err, got[1].Key)
	}
	if k, ok, err := r.FirstKey(keys.TopicHash("c")); err != nil || ok {
		t.Fatalf("FirstKey(empty topic) = %v, %v, %v; want none", k, ok, err)
	}
	// The topic whose hash is the first 8 bytes of the metadata keys holds
	// only non-event keys: it must look empty.
	var meta uint64
	for _, c := range []byte("metadata") {
		meta = meta<<8 | uint64(c)
	}
	if k, ok, err := r.FirstKey(meta); err != nil || ok {
		t.Fatalf("FirstKey(metadata range) = %v, %v, %v; want none", k, ok, err)
	}
}

// TestRepository_Apply_Update checks that an update rewrites the message with
// the key's event id without touching the caller's message, and that an
// update changing what the indexes are built from is dropped on its own,
// without failing the deletes batched with it.
func TestRepository_Apply_Update(t *testing.T) {
	r, _ := newRepo(t)
	got := schedule(t, r, withID(msg("a", t0), "x"), msg("a", t0), msg("a", t0))

	fresh := msg("a", t0) // EventId 0: Apply stores the key's
	fresh.Attempt = 2
	if applied := apply(t, r, delaystore.Op{Key: got[1].Key, Msg: fresh}); !applied[0] {
		t.Fatalf("update not applied")
	}
	if m, err := r.Get(got[1].Key); err != nil || m.Attempt != 2 || m.EventId != got[1].Key.EventID() {
		t.Fatalf("after update: %v, %v; want attempt 2, event id %d", m, err, got[1].Key.EventID())
	}
	if fresh.EventId != 0 {
		t.Fatalf("Apply modified the caller's message: EventId %d", fresh.EventId)
	}

	tests := []struct {
		name   string
		change func(m *delaystore.StoredMessage)
	}{
		{"subject", func(m *delaystore.StoredMessage) { m.Subject = "b" }},
		{"client id", func(m *delaystore.StoredMessage) { m.ClientId = "y" }},
		{"event id", func(m *delaystore.StoredMessage) { m.EventId = 99 }},
		{"not encodable", func(m *delaystore.StoredMessage) {
			m.Headers = []*delaystore.Header{{Name: "h", Values: []string{"\xff"}}}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, _ := newRepo(t)
			got := schedule(t, r, withID(msg("a", t0), "x"), msg("a", t0))
			bad, _ := r.Get(got[0].Key)
			tt.change(bad)
			bad.Attempt = 5
			applied := apply(t, r, delaystore.Op{Key: got[0].Key, Msg: bad}, delaystore.Op{Key: got[1].Key})
			if !equalBools(applied, []bool{false, true}) {
				t.Fatalf("applied = %v, want the bad update dropped and the delete applied", applied)
			}
			if m, err := r.Get(got[0].Key); err != nil || m.Attempt != 0 || m.Subject != "a" || m.ClientId != "x" {
				t.Fatalf("a dropped update changed the message: %v, %v", m, err)
			}
			if r.Pending() != 1 {
				t.Fatalf("Pending = %d, want 1", r.Pending())
			}
		})
	}
}

// TestRepositoryConfig_Validate checks that bad fields are reported together
// and wrap ErrInvalidConfig.
func TestRepositoryConfig_Validate(t *testing.T) {
	tests := []struct {
		name string
		cfg  delaystore.RepositoryConfig
		want string // substring of the error; "" means valid
	}{
		{"default", delaystore.DefaultRepositoryConfig(), ""},
		{"one second", delaystore.RepositoryConfig{TimeBucket: time.Second}, ""},
		{"negative", delaystore.RepositoryConfig{TimeBucket: -time.Second}, "TimeBucket (-1s) must be >= 0"},
		{"sub-millisecond", delaystore.RepositoryConfig{TimeBucket: 1500 * time.Microsecond}, "whole number of milliseconds"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, delaystore.ErrInvalidConfig) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate = %v, want ErrInvalidConfig mentioning %q", err, tt.want)
			}
			if _, err := delaystore.OpenRepository(newStore(t), tt.cfg); !errors.Is(err, delaystore.ErrInvalidConfig) {
				t.Fatalf("OpenRepository with a bad config: error %v, want ErrInvalidConfig", err)
			}
		})
	}
}

// TestOpenRepository_TimeBucketMismatch checks that a store keyed with one
// time bucket cannot be opened with another, which would misorder its keys.
func TestOpenRepository_TimeBucketMismatch(t *testing.T) {
	s := newStore(t)
	r := openRepo(t, s, delaystore.RepositoryConfig{TimeBucket: time.Second})
	schedule(t, r, msg("a", t0))
	r.Close()
	if _, err := delaystore.OpenRepository(s, delaystore.RepositoryConfig{}); !errors.Is(err, delaystore.ErrInvalidConfig) {
		t.Fatalf("reopen with another TimeBucket: error %v, want ErrInvalidConfig", err)
	}
	r2 := openRepo(t, s, delaystore.RepositoryConfig{TimeBucket: time.Second})
	if r2.TimeBucket() != time.Second || r2.Pending() != 1 {
		t.Fatalf("reopen with the same TimeBucket: bucket %v, pending %d", r2.TimeBucket(), r2.Pending())
	}
}

// TestRepository_Close checks that calls after Close return ErrClosed and
// that a second Close is harmless.
func TestRepository_Close(t *testing.T) {
	r, _ := newRepo(t)
	got := schedule(t, r, msg("a", t0))
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatalf("second Close = %v, want nil", err)
	}
	if _, err := r.Schedule([]*delaystore.StoredMessage{msg("a", t0)}, delaystore.Sync); !errors.Is(err, delaystore.ErrClosed) {
		t.Fatalf("Schedule after Close: %v, want ErrClosed", err)
	}
	if _, err := r.Apply([]delaystore.Op{{Key: got[0].Key}}, delaystore.Sync); !errors.Is(err, delaystore.ErrClosed) {
		t.Fatalf("Apply after Close: %v, want ErrClosed", err)
	}
	if _, err := r.Get(got[0].Key); !errors.Is(err, delaystore.ErrClosed) {
		t.Fatalf("Get after Close: %v, want ErrClosed", err)
	}
}

// TestRepository_Concurrent checks, under the race detector, that concurrent
// writers and readers leave exact counts: every write is serialised.
func TestRepository_Concurrent(t *testing.T) {
	r, s := newRepo(t)
	const writers, batches, perBatch = 4, 20, 5
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Go(func() {
			subject := fmt.Sprintf("w%d", w)
			for i := 0; i < batches; i++ {
				msgs := make([]*delaystore.StoredMessage, perBatch)
				for j := range msgs {
					msgs[j] = withExpiry(msg(subject, t0), t0+int64(j))
				}
				got, err := r.Schedule(msgs, delaystore.Sync)
				if err != nil {
					t.Error(err)
					return
				}
				// Delete the first of each batch, twice.
				if _, err := r.Apply([]delaystore.Op{{Key: got[0].Key}, {Key: got[0].Key}}, delaystore.NoSync); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Go(func() {
		for i := 0; i < 50; i++ {
			if _, err := r.Topics(); err != nil {
				t.Error(err)
			}
			_ = r.Pending()
			if _, err := r.Expired(t0+3, 4); err != nil {
				t.Error(err)
			}
			_ = r.ScanTopic(keys.TopicHash("w0"), nil, nil, func(keys.Key, *delaystore.StoredMessage) bool { return true })
		}
	})
	wg.Wait()
	want := uint64(writers * batches * (perBatch - 1))
	if r.Pending() != want || uint64(len(eventKeys(t, s))) != want {
		t.Fatalf("Pending = %d, %d event keys stored; want %d", r.Pending(), len(eventKeys(t, s)), want)
	}
	if r.LastID() != writers*batches*perBatch {
		t.Fatalf("LastID = %d, want %d", r.LastID(), writers*batches*perBatch)
	}
}

// TestRepository_Apply_DeletePending checks that a delete told what is
// pending under its key removes the message, its expiry entry and its count
// exactly as a delete that reads it first does, and that the same delete in
// the same call is still applied once.
func TestRepository_Apply_DeletePending(t *testing.T) {
	r, _ := newRepo(t)
	got := schedule(t, r, withExpiry(msg("a", t0), t0+10), msg("a", t0))
	k0, k1 := got[0].Key, got[1].Key
	known := &delaystore.StoredMessage{Subject: "a", ExpireAtNs: t0 + 10}
	applied := apply(t, r, delaystore.Op{Key: k0, Pending: known}, delaystore.Op{Key: k0, Pending: known})
	if want := []bool{true, false}; !equalBools(applied, want) {
		t.Fatalf("two deletes told it is pending, in one call: applied %v, want %v", applied, want)
	}
	if _, err := r.Get(k0); !errors.Is(err, delaystore.ErrNotFound) {
		t.Fatalf("Get after delete = %v, want ErrNotFound", err)
	}
	if ks, err := r.Expired(t0+100, 10); err != nil || len(ks) != 0 {
		t.Fatalf("Expired after delete = %v, %v; want no entry left", ks, err)
	}
	if r.Pending() != 1 || pendingFor(t, r, "a") != 1 {
		t.Fatalf("counts: total %d, a %d; want 1, 1", r.Pending(), pendingFor(t, r, "a"))
	}
	if _, err := r.Get(k1); err != nil {
		t.Fatalf("the other message: %v", err)
	}
}

// TestRepository_CheckWritable checks that the probe a service runs after
// reopening a failed store changes nothing a reader sees, reports a store
// that refuses writes, and returns ErrClosed after Close.
func TestRepository_CheckWritable(t *testing.T) {
	s := storetest.NewFailingStore(newStore(t))
	r := openRepo(t, s, delaystore.RepositoryConfig{TimeBucket: 5 * time.Millisecond})
	got := schedule(t, r, msg("a", t0), msg("b", t0))
	if err := r.CheckWritable(); err != nil {
		t.Fatalf("CheckWritable on a healthy store: %v", err)
	}
	if p, id := r.Pending(), r.LastID(); p != 2 || id != got[1].Key.EventID() {
		t.Fatalf("after CheckWritable: pending %d, last id %d; want 2, %d", p, id, got[1].Key.EventID())
	}
	// The time bucket it rewrote is still the one recorded.
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	r = openRepo(t, s, delaystore.RepositoryConfig{TimeBucket: 5 * time.Millisecond})
	s.Break()
	if err := r.CheckWritable(); !errors.Is(err, delaystore.ErrFailed) {
		t.Fatalf("CheckWritable on a store that refuses commits: %v, want ErrFailed", err)
	}
	r.Close()
	if err := r.CheckWritable(); !errors.Is(err, delaystore.ErrClosed) {
		t.Fatalf("CheckWritable after Close: %v, want ErrClosed", err)
	}
}

// TestRepository_CountDue checks that counting by key gives, for each
// limit, the messages whose bucket starts at or before it: exact to the
// time bucket, and never counting another topic's keys.
func TestRepository_CountDue(t *testing.T) {
	s := newStore(t)
	r := openRepo(t, s, delaystore.RepositoryConfig{TimeBucket: time.Second})
	ms := t0 / 1e6
	schedule(t, r, msg("a", t0), msg("a", t0+500e6), msg("a", t0+1500e6), msg("a", t0+90e9), msg("b", t0))
	got, err := r.CountDue(keys.TopicHash("a"), ms, ms+1000, ms+60_000, ms+120_000)
	if err != nil {
		t.Fatalf("CountDue: %v", err)
	}
	// t0+500ms shares t0's one-second bucket, so it counts as due at t0.
	if want := []uint64{2, 3, 3, 4}; !slices.Equal(got, want) {
		t.Errorf("CountDue(a) = %v, want %v", got, want)
	}
	if got, err := r.CountDue(keys.TopicHash("c"), ms); err != nil || got[0] != 0 {
		t.Errorf("CountDue(empty topic) = %v, %v; want 0", got, err)
	}
}

// TestRepository_Schedule_CrashNeverReusesVisibleID checks that no event ID
// is ever given to two messages, even when the first of them was lost in a
// crash: a committed batch is readable before it is durable (Pebble
// publishes a batch before its WAL fsync completes), so the dispatcher may
// have delivered a message under an ID that the crash then takes away. A
// NoSync commit stands in for a Sync commit caught before its fsync: both
// are visible and not yet durable.
func TestRepository_Schedule_CrashNeverReusesVisibleID(t *testing.T) {
	fs := vfs.NewCrashableMem()
	r := openRepo(t, openDisk(t, "/db", fs), delaystore.RepositoryConfig{})
	schedule(t, r, msg("a", t0))
	var visible uint64 // highest ID a reader could have seen
	for i := 0; i < 3; i++ {
		got, err := r.Schedule([]*delaystore.StoredMessage{msg("a", t0), msg("b", t0)}, delaystore.NoSync)
		if err != nil {
			t.Fatal(err)
		}
		visible = got[1].Key.EventID()
	}

	crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	r2 := openRepo(t, openDisk(t, "/db", crashed), delaystore.RepositoryConfig{})
	next := schedule(t, r2, msg("a", t0))[0].Key.EventID()
	if next <= visible {
		t.Fatalf("after the crash the next ID is %d, but IDs up to %d were visible before it", next, visible)
	}
}
