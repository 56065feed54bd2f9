package delaystore_test

import (
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	"natsdelay/delaystore"
)

func occurrence(subject, id string, fireAtNs int64, seq uint64) *delaystore.StoredMessage {
	m := withID(msg(subject, fireAtNs), id)
	m.Recurrence = &delaystore.Recurrence{EveryNs: 1e9, Id: id, OccurrenceNs: fireAtNs, Seq: seq}
	return m
}

// TestRepository_Advance_StoresSuccessorOnce checks that planning an
// occurrence stores its successor and marks it planned in one batch, moves
// the Delay-Id index to the successor, and refuses to plan it twice.
func TestRepository_Advance_StoresSuccessorOnce(t *testing.T) {
	r, _ := newRepo(t)
	s := schedule(t, r, occurrence("a", "job", t0, 1))
	k := s[0].Key

	cur, err := r.Get(k)
	if err != nil {
		t.Fatal(err)
	}
	cur.Recurrence.Planned, cur.Recurrence.NextNs = true, t0+1e9
	next := occurrence("a", "job", t0+1e9, 2)
	got, err := r.Advance(k, cur, false, next, delaystore.Sync)
	if err != nil {
		t.Fatal(err)
	}
	if r.PendingFor("a") != 2 {
		t.Fatalf("pending %d, want 2", r.PendingFor("a"))
	}
	if lk, err := r.Lookup("a", "job"); err != nil || lk != got.Key {
		t.Fatalf("Lookup = %v, %v; want the successor %v", lk, err, got.Key)
	}
	stored, _ := r.Get(k)
	if !stored.Recurrence.Planned || stored.ClientId != "" {
		t.Fatalf("occurrence after Advance: %v", stored)
	}
	again := proto.Clone(stored).(*delaystore.StoredMessage)
	if _, err := r.Advance(k, again, false, occurrence("a", "", t0+2e9, 2), delaystore.Sync); !errors.Is(err, delaystore.ErrPlanned) {
		t.Fatalf("second Advance: %v, want ErrPlanned", err)
	}
	// Deleting the delivered occurrence leaves the successor's index entry.
	if _, err := r.Apply([]delaystore.Op{{Key: k}}, delaystore.Sync); err != nil {
		t.Fatal(err)
	}
	if lk, err := r.Lookup("a", "job"); err != nil || lk != got.Key {
		t.Fatalf("Lookup after the ACK = %v, %v; want the successor", lk, err)
	}
	if _, err := r.Advance(k, cur, false, next, delaystore.Sync); !errors.Is(err, delaystore.ErrNotFound) {
		t.Fatalf("Advance of a deleted occurrence: %v, want ErrNotFound", err)
	}
}

// TestRepository_Advance_Drop checks that a skipped occurrence is deleted
// in the batch that stores its successor.
func TestRepository_Advance_Drop(t *testing.T) {
	r, _ := newRepo(t)
	s := schedule(t, r, occurrence("a", "job", t0, 1))
	k := s[0].Key
	cur, _ := r.Get(k)
	got, err := r.Advance(k, cur, true, occurrence("a", "job", t0+5e9, 2), delaystore.Sync)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Get(k); !errors.Is(err, delaystore.ErrNotFound) {
		t.Fatalf("skipped occurrence still there: %v", err)
	}
	if lk, err := r.Lookup("a", "job"); err != nil || lk != got.Key || r.PendingFor("a") != 1 {
		t.Fatalf("Lookup = %v, %v, pending %d; want the successor alone", lk, err, r.PendingFor("a"))
	}
}
