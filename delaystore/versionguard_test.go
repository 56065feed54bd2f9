package delaystore_test

import (
	"encoding/binary"
	"slices"
	"strings"
	"testing"

	"github.com/natsdelay/natsdelay/delaystore"
)

// wantVersionGuard checks that s holds the version guard that keeps earlier versions out:
// a subject registry entry whose value is not an 8-byte count (every
// version before index-version refuses such an entry at open, quoting its
// subject, which says why), and index-version 5 (every version that reads
// index-version refuses one it does not know: 5 keeps out the versions
// that read planned-ness from the stored value alone, see planned.go).
func wantVersionGuard(tb testing.TB, s delaystore.Store) {
	tb.Helper()
	v, err := s.Get([]byte(delaystore.VersionGuardKey))
	if err != nil {
		tb.Fatalf("version guard: %v", err)
	}
	subject := strings.TrimPrefix(delaystore.VersionGuardKey, "metadata/event-repo/topic/")
	if len(v) == 8 || !strings.HasPrefix(subject, "\x00") || len(subject) > 64 || !strings.Contains(subject, "newer natsdelay") {
		tb.Fatalf("version guard %q = %x: want a value that is not a count, under a subject no subject can be, that says why in 64 bytes", subject, v)
	}
	v, err = s.Get([]byte("metadata/event-repo/index-version"))
	if err != nil || len(v) != 8 || binary.BigEndian.Uint64(v) != 5 {
		tb.Fatalf("index-version %x (%v), want 5", v, err)
	}
}

// wantTopics checks that the registry lists exactly the subjects want,
// never the version guard.
func wantTopics(tb testing.TB, r *delaystore.Repository, want ...string) {
	tb.Helper()
	ts, err := r.Topics()
	if err != nil {
		tb.Fatal(err)
	}
	var got []string
	for _, tp := range ts {
		got = append(got, tp.Subject)
	}
	if !slices.Equal(got, want) {
		tb.Fatalf("subjects %q, want %q", got, want)
	}
}

// TestRepository_VersionGuard_OnEveryStoreOfThisVersion checks that a store this
// version opens, new or not, carries the version guard from its first open, and
// that the version guard is never listed or counted as a subject.
func TestRepository_VersionGuard_OnEveryStoreOfThisVersion(t *testing.T) {
	forEachEngine(t, false, func(t *testing.T, e engine) {
		s := e.open(t, t.TempDir())
		r := openRepo(t, s, delaystore.RepositoryConfig{})
		wantVersionGuard(t, s)
		schedule(t, r, msg("a.b", t0), msg("c", t0))
		wantTopics(t, r, "a.b", "c")
		if r.Subjects() != 2 || r.Pending() != 2 {
			t.Fatalf("subjects %d, pending %d; want 2, 2", r.Subjects(), r.Pending())
		}
	})
}

// TestRepository_OpensStoreOfEarlierVersion checks the upgrade path: a
// store as a version from before index-version left it (no indexes, no
// totals, no version guard) opens with every message and subject, gets the version guard,
// and opens again as a store of this version.
func TestRepository_OpensStoreOfEarlierVersion(t *testing.T) {
	forEachEngine(t, true, func(t *testing.T, e engine) {
		dir := t.TempDir()
		s := e.open(t, dir)
		r := openRepo(t, s, delaystore.RepositoryConfig{})
		schedule(t, r, msg("a.b", t0), msg("a.b", t0+1), msg("c", t0))
		r.Close()
		stripDueIndex(t, s)
		if _, err := s.Get([]byte(delaystore.VersionGuardKey)); err == nil {
			t.Fatal("the store of an earlier version still has the version guard")
		}
		for range 2 {
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s = e.open(t, dir)
			r = openRepo(t, s, delaystore.RepositoryConfig{})
			wantVersionGuard(t, s)
			wantTopics(t, r, "a.b", "c")
			if r.Subjects() != 2 || r.Pending() != 3 {
				t.Fatalf("subjects %d, pending %d; want 2, 3", r.Subjects(), r.Pending())
			}
			r.Close()
		}
	})
}
