package delaystore_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/natsdelay/natsdelay/delaystore"
)

const window = 2 * time.Minute

func once(m *delaystore.StoredMessage, msgID string, sum byte) delaystore.Once {
	return delaystore.Once{Msg: m, MsgID: msgID, Sum: delaystore.DedupSum{sum}}
}

func scheduleOnce(tb testing.TB, r *delaystore.Repository, nowNs int64, in ...delaystore.Once) []delaystore.Outcome {
	tb.Helper()
	out, err := r.ScheduleOnce(in, window, nowNs, delaystore.Sync)
	if err != nil {
		tb.Fatalf("ScheduleOnce: %v", err)
	}
	return out
}

// dedupKeys counts the keys of the duplicate window: records and their
// time entries.
func dedupKeys(tb testing.TB, s delaystore.Store) int {
	tb.Helper()
	n := 0
	for _, k := range allKeys(tb, s) {
		if bytes.HasPrefix(k, []byte("metadata/event-repo/dedup")) {
			n++
		}
	}
	return n
}

// A resend (same subject, client id and sum) within the window gets the
// first key and fire time and stores nothing, also once the first was
// delivered (deleted); another sum replaces; after the window a resend is
// a new message.
func TestScheduleOnce_ResendWithinWindow(t *testing.T) {
	r, s := newRepo(t)
	now := t0
	first := scheduleOnce(t, r, now, once(withID(msg("a", now), "x"), "", 1))[0]
	if first.Duplicate || first.FireAtNs != now {
		t.Fatalf("first: %+v", first)
	}
	apply(t, r, delaystore.Op{Key: first.Key}) // delivered and ACKed
	resend := scheduleOnce(t, r, now+int64(time.Second), once(withID(msg("a", now+int64(time.Second)), "x"), "", 1))[0]
	if !resend.Duplicate || resend.Key != first.Key || resend.FireAtNs != now {
		t.Fatalf("resend: %+v, want the first (%v at %d) as a duplicate", resend, first.Key, first.FireAtNs)
	}
	if p := r.Pending(); p != 0 {
		t.Fatalf("pending %d after a resend, want 0", p)
	}

	// Another sum is a replacement, answered as new.
	repl := scheduleOnce(t, r, now+int64(2*time.Second), once(withID(msg("a", t0+int64(time.Hour)), "x"), "", 2))[0]
	if repl.Duplicate || repl.Key == first.Key {
		t.Fatalf("replacement: %+v", repl)
	}
	// The record now holds the replacement.
	again := scheduleOnce(t, r, now+int64(3*time.Second), once(withID(msg("a", t0), "x"), "", 2))[0]
	if !again.Duplicate || again.Key != repl.Key {
		t.Fatalf("resend of the replacement: %+v, want %v", again, repl.Key)
	}

	// Past the window of the replacement's record: a new message, which
	// replaces the pending one as Schedule does.
	late := now + int64(2*time.Second) + int64(window)
	fresh := scheduleOnce(t, r, late, once(withID(msg("a", late), "x"), "", 2))[0]
	if fresh.Duplicate || fresh.Key == repl.Key {
		t.Fatalf("after the window: %+v", fresh)
	}
	if p := r.Pending(); p != 1 {
		t.Fatalf("pending %d, want 1", p)
	}
	// One record and its time entry: rewriting moved its entry.
	if n := dedupKeys(t, s); n != 2 {
		t.Fatalf("%d keys of the duplicate window, want 2", n)
	}
}

// A Nats-Msg-Id seen within the window makes any message a duplicate;
// the zero sum keeps no record of a client id.
func TestScheduleOnce_MsgIDAndZeroSum(t *testing.T) {
	r, _ := newRepo(t)
	first := scheduleOnce(t, r, t0, once(msg("a", t0), "m1", 0))[0]
	other := scheduleOnce(t, r, t0+1, delaystore.Once{Msg: &delaystore.StoredMessage{Subject: "a", FireAtNs: t0 + 5, Payload: []byte("else")}, MsgID: "m1"})[0]
	if !other.Duplicate || other.Key != first.Key {
		t.Fatalf("same Nats-Msg-Id: %+v, want a duplicate of %v", other, first.Key)
	}
	if o := scheduleOnce(t, r, t0+2, once(msg("b", t0), "m1", 0))[0]; o.Duplicate {
		t.Fatalf("same Nats-Msg-Id on another subject: a duplicate")
	}
	a := scheduleOnce(t, r, t0+3, delaystore.Once{Msg: withID(msg("c", t0), "x")})[0]
	b := scheduleOnce(t, r, t0+4, delaystore.Once{Msg: withID(msg("c", t0), "x")})[0]
	if a.Duplicate || b.Duplicate || a.Key == b.Key {
		t.Fatalf("zero sums: %+v then %+v, want a replacement", a, b)
	}
}

// Within one batch: a resend of an earlier message gets its key, a
// replacement in between is not undone by the resend of the first.
func TestScheduleOnce_WithinOneBatch(t *testing.T) {
	r, _ := newRepo(t)
	out := scheduleOnce(t, r, t0,
		once(withID(msg("a", t0), "x"), "", 1),
		once(withID(msg("a", t0+1), "x"), "", 1), // resend
		once(withID(msg("a", t0+2), "y"), "n", 3),
		once(msg("a", t0+3), "n", 4), // same Nats-Msg-Id
	)
	if out[0].Duplicate || !out[1].Duplicate || out[1].Key != out[0].Key || out[1].FireAtNs != t0 {
		t.Fatalf("resend in the batch: %+v then %+v", out[0], out[1])
	}
	if out[2].Duplicate || !out[3].Duplicate || out[3].Key != out[2].Key {
		t.Fatalf("Nats-Msg-Id in the batch: %+v then %+v", out[2], out[3])
	}
	if p := r.Pending(); p != 2 {
		t.Fatalf("pending %d, want 2", p)
	}
}

// Expired records go, a bounded number per batch, and the window's keys
// come back to those of the last window.
func TestScheduleOnce_SweepsExpired(t *testing.T) {
	r, s := newRepo(t)
	const n = 300
	for i := range n {
		scheduleOnce(t, r, t0, once(msg("a", t0), fmt.Sprintf("m%d", i), 0))
	}
	if got := dedupKeys(t, s); got != 2*n {
		t.Fatalf("%d keys, want %d", got, 2*n)
	}
	late := t0 + int64(window)
	scheduleOnce(t, r, late, once(msg("a", late), "", 0))
	// One message sweeps 64+2 records.
	if got, want := dedupKeys(t, s), 2*(n-66); got != want {
		t.Fatalf("after one batch past the window: %d keys, want %d", got, want)
	}
	scheduleOnce(t, r, late, once(msg("a", late), "z", 0))
	// A batch of resends alone stores nothing and sweeps nothing; each
	// of these stores a message.
	for i := 0; dedupKeys(t, s) > 2; i++ {
		if i > n {
			t.Fatalf("%d keys left after %d batches", dedupKeys(t, s), i)
		}
		scheduleOnce(t, r, late, once(msg("a", late), "", 0))
	}
	// The last record is z's, which is live.
	if o := scheduleOnce(t, r, late+1, once(msg("a", late), "z", 0))[0]; !o.Duplicate {
		t.Fatalf("z: %+v, want a duplicate", o)
	}
	if o := scheduleOnce(t, r, late+1, once(msg("a", late), "m0", 0))[0]; o.Duplicate {
		t.Fatalf("m0 after its window: a duplicate")
	}
}

// A record survives a reopen of the store, and a window of 0 keeps none.
func TestScheduleOnce_DurableAndOff(t *testing.T) {
	forEachEngine(t, true, func(t *testing.T, e engine) {
		dir := t.TempDir()
		s := e.open(t, dir)
		r := openRepo(t, s, delaystore.RepositoryConfig{})
		first := scheduleOnce(t, r, t0, once(withID(msg("a", t0), "x"), "", 1))[0]
		r.Close()
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		r = openRepo(t, e.open(t, dir), delaystore.RepositoryConfig{})
		if o := scheduleOnce(t, r, t0+1, once(withID(msg("a", t0+1), "x"), "", 1))[0]; !o.Duplicate || o.Key != first.Key {
			t.Fatalf("after reopen: %+v, want a duplicate of %v", o, first.Key)
		}
		out, err := r.ScheduleOnce([]delaystore.Once{once(withID(msg("a", t0+2), "x"), "m", 1)}, 0, t0+2, delaystore.Sync)
		if err != nil || out[0].Duplicate {
			t.Fatalf("window 0: %+v, %v", out, err)
		}
	})
}

// sweepReads counts the reads of the duplicate window's time entries, the
// sweep's.
type sweepReads struct {
	delaystore.Store
	n int
}

func (s *sweepReads) Scan(opts delaystore.IterOptions, yield func(k, v []byte) bool) error {
	if bytes.HasPrefix(opts.LowerBound, []byte("metadata/event-repo/dedup-at/")) {
		s.n++
	}
	return s.Store.Scan(opts, yield)
}

// A batch reads the time entries only once one may have expired: the
// first after opening, then the first at or past the earliest expiry
// written, which sweeps it; a record moved in from another cell with an
// earlier expiry is swept at the next batch past it, not left behind.
func TestScheduleOnce_SweepReadsOnlyOnceSomethingExpired(t *testing.T) {
	s := &sweepReads{Store: newStore(t)}
	r := openRepo(t, s, delaystore.RepositoryConfig{})
	scheduleOnce(t, r, t0, once(msg("a", t0), "first", 0))
	if s.n != 1 {
		t.Fatalf("first batch: %d reads, want 1", s.n)
	}
	for i := range 10 {
		scheduleOnce(t, r, t0+1+int64(i), once(msg("a", t0), fmt.Sprintf("m%d", i), 0))
	}
	if s.n != 1 {
		t.Fatalf("10 batches within the window: %d reads, want 1", s.n)
	}
	if got := dedupKeys(t, s); got != 2*11 {
		t.Fatalf("%d keys, want %d", got, 2*11)
	}
	late := t0 + int64(window) // "first" expires now
	scheduleOnce(t, r, late, once(msg("a", late), "", 0))
	if s.n != 2 {
		t.Fatalf("batch at the first expiry: %d reads, want 2", s.n)
	}
	if got := dedupKeys(t, s); got != 2*10 {
		t.Fatalf("after the first expiry: %d keys, want %d", got, 2*10)
	}
	scheduleOnce(t, r, late, once(msg("a", late), "", 0))
	if s.n != 2 {
		t.Fatalf("batch before the next expiry: %d reads, want 2", s.n)
	}

	// A record of another repository, moved in while it lives there, with
	// an expiry this one's sweep has passed.
	other, _ := newRepo(t)
	scheduleOnce(t, other, t0-int64(window)/2, once(msg("b", t0), "moved", 0))
	var recs []delaystore.SideRecord
	if err := other.ScanSideRecords(nil, func(uint64) bool { return true }, t0, func(rec delaystore.SideRecord) bool {
		recs = append(recs, rec)
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 {
		t.Fatalf("%d side records, want 1", len(recs))
	}
	if _, err := r.ImportSideRecords(recs, delaystore.Sync); err != nil {
		t.Fatal(err)
	}
	if got := dedupKeys(t, s); got != 2*10+2 {
		t.Fatalf("after the move: %d keys, want %d", got, 2*10+2)
	}
	scheduleOnce(t, r, late, once(msg("a", late), "", 0))
	if got := dedupKeys(t, s); s.n != 3 || got != 2*10 {
		t.Fatalf("after a batch past the moved record's expiry: %d reads, %d keys, want 3 and %d", s.n, got, 2*10)
	}
}
