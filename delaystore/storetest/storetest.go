package storetest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/keys"
)

// Run checks that the stores open returns keep the delaystore.Store
// contract. open must return a new, empty store each time and register its
// Close with t.Cleanup; the suite may Close it first, so a second Close
// must be harmless. The cases run in parallel, so open is called from
// several of them at once.
func Run(t *testing.T, open func(t *testing.T) delaystore.Store) {
	cases := []struct {
		name string
		test func(t *testing.T, s delaystore.Store)
	}{
		{"Get_MissingKey_ReturnsErrNotFound", testGetMissing},
		{"Get_ReturnsCopy", testGetReturnsCopy},
		{"Batch_Set_CopiesKeyAndValue", testSetCopies},
		{"Batch_Set_OverwritesValue", testSetOverwrites},
		{"Batch_LastOpPerKeyWins", testLastOpWins},
		{"Batch_Delete_MissingKeySucceeds", testDeleteMissing},
		{"Batch_SingleDelete_RemovesKeySetOnce", testSingleDelete},
		{"Batch_EmptyKey_Rejected", testEmptyKey},
		{"Batch_EmptyValue_RoundTrips", testEmptyValue},
		{"Batch_Len_CountsOps", testBatchLen},
		{"Batch_Empty_CommitSucceeds", testEmptyBatch},
		{"Batch_UsedAfterCommit_ErrBatchCommitted", testBatchAfterCommit},
		{"Batch_Close_DiscardsUncommitted", testBatchCloseDiscards},
		{"Batch_Large_AllVisible", testLargeBatch},
		{"Scan_KeyOrder_Bytewise", testOrder},
		{"Scan_Bounds_LowerInclusiveUpperExclusive", testBounds},
		{"Scan_YieldFalse_Stops", testScanStops},
		{"Scan_CopiesMadeInYield_StayIntact", testScanCopies},
		{"Scan_CommitDuringScan_SeesSnapshot", testScanSnapshot},
		{"Iter_Positioning_RespectsBounds", testIterPositioning},
		{"Iter_EmptyStoreAndEmptyRange_NotValid", testIterEmpty},
		{"Iter_CommitWhileOpen_SeesSnapshot", testIterSnapshot},
		{"Store_ConcurrentReadersAndWriter_SeeWholeBatches", testConcurrent},
		{"Store_FlushAfterNoSync_Succeeds", testFlush},
		{"Store_UseAfterClose_ErrClosed", testUseAfterClose},
		{"Store_CloseWithOpenIterator_ClosesItAndReports", testCloseLeakedIter},
		{"Store_CloseDuringScan_WaitsForItAndRefusesNewCalls", testCloseDuringScan},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// Each case opens its own store, so the cases run side by
			// side: a replicated store spends most of a case electing
			// its node and stopping it.
			t.Parallel()
			c.test(t, open(t))
		})
	}
}

// Get on a missing key reports ErrNotFound, including for an empty key.
func testGetMissing(t *testing.T, s delaystore.Store) {
	wantNotFound(t, s, []byte("missing"))
	wantNotFound(t, s, []byte{})
	commit(t, s, delaystore.Sync, set("present", "v"))
	wantNotFound(t, s, []byte("missing"))
	wantNotFound(t, s, []byte("presen"))
	wantNotFound(t, s, []byte("present\x00"))
}

// The slice Get returns belongs to the caller: changing it changes nothing
// stored.
func testGetReturnsCopy(t *testing.T, s delaystore.Store) {
	commit(t, s, delaystore.Sync, set("k", "value"))
	v, err := s.Get([]byte("k"))
	if err != nil {
		t.Fatal(err)
	}
	copy(v, "XXXXX")
	wantPairs(t, s, pair("k", "value"))
}

// Set copies its arguments, so a caller may reuse its buffers at once, even
// before Commit.
func testSetCopies(t *testing.T, s delaystore.Store) {
	key, value := []byte("key1"), []byte("value1")
	b := s.NewBatch()
	defer b.Close()
	if err := b.Set(key, value); err != nil {
		t.Fatal(err)
	}
	copy(key, "key2")
	copy(value, "value2")
	if err := b.Set(key, value); err != nil {
		t.Fatal(err)
	}
	copy(key, "XXXX")
	copy(value, "XXXXXX")
	if err := b.Commit(delaystore.Sync); err != nil {
		t.Fatal(err)
	}
	wantPairs(t, s, pair("key1", "value1"), pair("key2", "value2"))
}

// A later commit replaces the value of an existing key.
func testSetOverwrites(t *testing.T, s delaystore.Store) {
	commit(t, s, delaystore.Sync, set("k", "old, and longer than the new one"), set("other", "o"))
	commit(t, s, delaystore.Sync, set("k", "new"))
	wantPairs(t, s, pair("k", "new"), pair("other", "o"))
}

// Within one batch, the last operation on a key decides its fate.
func testLastOpWins(t *testing.T, s delaystore.Store) {
	commit(t, s, delaystore.Sync, set("deleted-then-set", "old"), set("set-then-deleted", "old"))
	commit(t, s, delaystore.Sync,
		set("twice", "first"), set("twice", "second"),
		set("set-then-deleted", "new"), del("set-then-deleted"),
		del("deleted-then-set"), set("deleted-then-set", "new"),
		set("fresh-then-deleted", "x"), del("fresh-then-deleted"),
	)
	wantPairs(t, s, pair("deleted-then-set", "new"), pair("twice", "second"))
}

// Deleting a key that does not exist succeeds and disturbs nothing.
func testDeleteMissing(t *testing.T, s delaystore.Store) {
	commit(t, s, delaystore.Sync, del("never-existed"))
	commit(t, s, delaystore.Sync, set("a", "1"), del("b"), set("c", "3"))
	commit(t, s, delaystore.NoSync, del("a"), del("a"))
	wantPairs(t, s, pair("c", "3"))
}

// A key set once and single-deleted is gone, in a later batch or the same
// one, and a missing key single-deletes as Delete does; an empty key is
// rejected.
func testSingleDelete(t *testing.T, s delaystore.Store) {
	commit(t, s, delaystore.Sync, set("a", "1"), set("b", "2"), set("c", "3"))
	b := s.NewBatch()
	defer b.Close()
	for _, k := range []string{"a", "never-existed"} {
		if err := b.SingleDelete([]byte(k)); err != nil {
			t.Fatalf("SingleDelete(%s): %v", k, err)
		}
	}
	if err := b.Set([]byte("d"), []byte("4")); err != nil {
		t.Fatal(err)
	}
	if err := b.SingleDelete([]byte("d")); err != nil {
		t.Fatal(err)
	}
	if err := b.SingleDelete(nil); err == nil {
		t.Errorf("SingleDelete(nil key) succeeded, want an error")
	}
	if err := b.Commit(delaystore.NoSync); err != nil {
		t.Fatal(err)
	}
	wantPairs(t, s, pair("b", "2"), pair("c", "3"))
}

// An empty key is rejected when it is added, for every engine, because
// bbolt cannot store one.
func testEmptyKey(t *testing.T, s delaystore.Store) {
	b := s.NewBatch()
	defer b.Close()
	if err := b.Set(nil, []byte("v")); err == nil {
		t.Errorf("Set(nil key) succeeded, want an error")
	}
	if err := b.Set([]byte{}, []byte("v")); err == nil {
		t.Errorf("Set(empty key) succeeded, want an error")
	}
	if err := b.Delete([]byte{}); err == nil {
		t.Errorf("Delete(empty key) succeeded, want an error")
	}
	if err := b.Set([]byte("ok"), []byte("v")); err != nil {
		t.Fatalf("Set after a rejected key: %v", err)
	}
	if err := b.Commit(delaystore.Sync); err != nil {
		t.Fatal(err)
	}
	wantPairs(t, s, pair("ok", "v"))
}

// An empty or nil value is stored and read back as an empty value, not
// as a missing key.
func testEmptyValue(t *testing.T, s delaystore.Store) {
	commit(t, s, delaystore.Sync, op{key: []byte("nil")}, op{key: []byte("empty"), value: []byte{}})
	for _, k := range []string{"nil", "empty"} {
		v, err := s.Get([]byte(k))
		if err != nil || len(v) != 0 {
			t.Errorf("Get(%q) = %q, %v; want an empty value", k, v, err)
		}
	}
	if got := scanAll(t, s, delaystore.IterOptions{}); len(got) != 2 {
		t.Errorf("scan: got %v, want two keys with empty values", got)
	}
}

// Len counts every Set and Delete added, duplicates included.
func testBatchLen(t *testing.T, s delaystore.Store) {
	b := s.NewBatch()
	defer b.Close()
	if n := b.Len(); n != 0 {
		t.Fatalf("new batch Len = %d, want 0", n)
	}
	_ = b.Set([]byte("a"), nil)
	_ = b.Set([]byte("a"), nil)
	_ = b.Delete([]byte("b"))
	if n := b.Len(); n != 3 {
		t.Fatalf("Len = %d, want 3", n)
	}
}

// Committing an empty batch succeeds and changes nothing.
func testEmptyBatch(t *testing.T, s delaystore.Store) {
	commit(t, s, delaystore.Sync, set("a", "1"))
	for _, mode := range []delaystore.SyncMode{delaystore.Sync, delaystore.NoSync} {
		commit(t, s, mode)
	}
	wantPairs(t, s, pair("a", "1"))
}

// A batch can be committed once; using it afterwards fails with
// ErrBatchCommitted and changes nothing.
func testBatchAfterCommit(t *testing.T, s delaystore.Store) {
	b := s.NewBatch()
	if err := b.Set([]byte("a"), []byte("1")); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(delaystore.Sync); err != nil {
		t.Fatal(err)
	}
	wantErrIs(t, "Set after Commit", b.Set([]byte("b"), []byte("2")), delaystore.ErrBatchCommitted)
	wantErrIs(t, "Delete after Commit", b.Delete([]byte("a")), delaystore.ErrBatchCommitted)
	wantErrIs(t, "second Commit", b.Commit(delaystore.Sync), delaystore.ErrBatchCommitted)
	if err := b.Close(); err != nil {
		t.Fatalf("Close after Commit: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	wantPairs(t, s, pair("a", "1"))
}

// Closing a batch without committing it discards it; it cannot be used
// afterwards.
func testBatchCloseDiscards(t *testing.T, s delaystore.Store) {
	b := s.NewBatch()
	if err := b.Set([]byte("a"), []byte("1")); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	wantErrIs(t, "Set after Close", b.Set([]byte("b"), []byte("2")), delaystore.ErrClosed)
	wantErrIs(t, "Commit after Close", b.Commit(delaystore.Sync), delaystore.ErrClosed)
	wantPairs(t, s)
}

// A large batch becomes visible whole.
func testLargeBatch(t *testing.T, s delaystore.Store) {
	const n = 5000
	b := s.NewBatch()
	defer b.Close()
	value := bytes.Repeat([]byte{'v'}, 256)
	for i := range uint64(n) {
		k := keys.New(7, i/100, i)
		if err := b.Set(k[:], value); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Commit(delaystore.Sync); err != nil {
		t.Fatal(err)
	}
	var count int
	err := s.Scan(delaystore.IterOptions{}, func(k, v []byte) bool {
		if !bytes.Equal(v, value) {
			t.Fatalf("key %x: value of %d bytes, want %d", k, len(v), len(value))
		}
		count++
		return true
	})
	if err != nil || count != n {
		t.Fatalf("scan: %d keys, %v; want %d", count, err, n)
	}
}

// orderKeys are keys whose order a byte comparison gets right and a naive
// one (by length, as strings with NUL terminators, signed bytes) gets wrong:
// 0x00 and 0xff bytes, keys that are prefixes of each other, and event keys
// whose big-endian fields must sort as (topic, bucket, id).
func orderKeys() [][]byte {
	ks := [][]byte{
		{0x00}, {0x00, 0x00}, {0x00, 0x00, 0x00}, {0x00, 0x01}, {0x01}, {0x01, 0x00},
		{0x7f}, {0x7f, 0xff}, {0x80}, {0x80, 0x00}, {0xfe, 0xff}, {0xff}, {0xff, 0x00},
		{0xff, 0xff}, {0xff, 0xff, 0xff},
		[]byte("a"), []byte("a\x00"), []byte("ab"), []byte("abc"), []byte("abd"), []byte("b"),
	}
	for _, k := range eventKeysInOrder() {
		ks = append(ks, k[:])
	}
	return ks
}

// eventKeysInOrder are event keys in the order dispatch relies on.
func eventKeysInOrder() []keys.Key {
	return []keys.Key{
		keys.New(1, 0, 1),
		keys.New(1, 255, 9),
		keys.New(1, 256, 1),
		keys.New(1, 256, 2),
		keys.New(1, 1<<40, 0),
		keys.New(2, 0, 0),
		keys.New(1<<63, 5, 5),
		keys.New(math.MaxUint64, math.MaxUint64, math.MaxUint64),
	}
}

// Scan and iterators return keys in bytes.Compare order whatever order they
// were written in, and event keys in (topic, bucket, id) order.
func testOrder(t *testing.T, s delaystore.Store) {
	written := orderKeys()
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(written), func(i, j int) {
		written[i], written[j] = written[j], written[i]
	})
	// Two batches, so order does not hinge on one batch's internal sort.
	half := len(written) / 2
	for _, part := range [][][]byte{written[:half], written[half:]} {
		var ops []op
		for _, k := range part {
			ops = append(ops, op{key: k, value: k})
		}
		commit(t, s, delaystore.Sync, ops...)
	}
	want := slices.Clone(written)
	slices.SortFunc(want, bytes.Compare)

	scanned := scanAll(t, s, delaystore.IterOptions{})
	if got := keysOf(scanned); !sameKeys(got, want) {
		t.Fatalf("scan order:\n got %s\nwant %s", fmtKeys(got), fmtKeys(want))
	}
	for _, p := range scanned {
		if !bytes.Equal(p.key, p.value) {
			t.Fatalf("key %x has value %x", p.key, p.value)
		}
	}
	if got := keysOf(iterAll(t, s, delaystore.IterOptions{})); !sameKeys(got, want) {
		t.Fatalf("iterator order:\n got %s\nwant %s", fmtKeys(got), fmtKeys(want))
	}

	var events []keys.Key
	for _, p := range scanned {
		if k, err := keys.Decode(p.key); err == nil {
			events = append(events, k)
		}
	}
	if want := eventKeysInOrder(); !slices.Equal(events, want) {
		t.Fatalf("event keys out of (topic, bucket, id) order: got %v, want %v", events, want)
	}
}

// A bound selects [LowerBound, UpperBound): lower inclusive, upper
// exclusive, nil unbounded, an empty lower bound the whole keyspace, and an
// empty or inverted range nothing.
func testBounds(t *testing.T, s delaystore.Store) {
	all := [][]byte{{0x00}, []byte("a"), []byte("ab"), []byte("b"), []byte("c"), {0xff}, {0xff, 0xff}}
	var ops []op
	for _, k := range all {
		ops = append(ops, op{key: k, value: []byte("v")})
	}
	commit(t, s, delaystore.Sync, ops...)

	b := func(s string) []byte { return []byte(s) }
	cases := []struct {
		name   string
		lo, hi []byte
		want   [][]byte
	}{
		{"both nil", nil, nil, all},
		{"nil lower", nil, b("b"), all[:3]},
		{"nil upper", b("b"), nil, all[3:]},
		{"lower inclusive", b("ab"), nil, all[2:]},
		{"upper exclusive", b("a"), b("b"), all[1:3]},
		{"bounds between keys", b("aa"), b("bb"), all[2:4]},
		{"lower is a prefix of keys", b("a"), b("a\x01"), all[1:2]},
		{"one key wide", b("ab"), b("ab\x00"), all[2:3]},
		{"lower equals upper", b("b"), b("b"), nil},
		{"lower above upper", b("c"), b("a"), nil},
		{"lower above upper, both missing", b("bb"), b("aa"), nil},
		{"empty lower is unbounded", []byte{}, nil, all},
		{"empty upper excludes all", nil, []byte{}, nil},
		{"empty lower and upper", []byte{}, []byte{}, nil},
		{"upper 0x00 excludes all", nil, []byte{0x00}, nil},
		{"lower 0x00", []byte{0x00}, []byte{0x00, 0x00}, all[:1]},
		{"upper 0xffff", nil, []byte{0xff, 0xff}, all[:6]},
		{"lower 0xff", []byte{0xff}, nil, all[5:]},
		{"past every key", []byte{0xff, 0xff, 0x00}, nil, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			opts := delaystore.IterOptions{LowerBound: c.lo, UpperBound: c.hi}
			if got := keysOf(scanAll(t, s, opts)); !sameKeys(got, c.want) {
				t.Errorf("scan [%x, %x): got %s, want %s", c.lo, c.hi, fmtKeys(got), fmtKeys(c.want))
			}
			if got := keysOf(iterAll(t, s, opts)); !sameKeys(got, c.want) {
				t.Errorf("iterator [%x, %x): got %s, want %s", c.lo, c.hi, fmtKeys(got), fmtKeys(c.want))
			}
		})
	}
}

// Scan stops as soon as yield returns false, and that is not an error.
func testScanStops(t *testing.T, s delaystore.Store) {
	commit(t, s, delaystore.Sync, set("a", "1"), set("b", "2"), set("c", "3"), set("d", "4"))
	var seen []string
	err := s.Scan(delaystore.IterOptions{}, func(k, _ []byte) bool {
		seen = append(seen, string(k))
		return len(seen) < 2
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(seen, []string{"a", "b"}) {
		t.Fatalf("yield saw %q, want [a b]", seen)
	}
	calls := 0
	if err := s.Scan(delaystore.IterOptions{}, func(_, _ []byte) bool { calls++; return false }); err != nil {
		t.Fatal(err)
	}
	if calls != 1 {
		t.Fatalf("yield called %d times after returning false at once, want 1", calls)
	}
}

// Slices passed to yield are valid only inside it; copies made there stay
// right after the scan moves on and ends, however the engine reuses its
// buffers.
func testScanCopies(t *testing.T, s delaystore.Store) {
	var want []kv
	var ops []op
	for i := range 300 {
		k := binary.BigEndian.AppendUint32([]byte("k"), uint32(i))
		v := bytes.Repeat([]byte{byte(i)}, 1+i%64)
		want = append(want, kv{k, v})
		ops = append(ops, op{key: k, value: v})
	}
	commit(t, s, delaystore.Sync, ops...)
	var kept []kv
	err := s.Scan(delaystore.IterOptions{}, func(k, v []byte) bool {
		kept = append(kept, kv{bytes.Clone(k), bytes.Clone(v)})
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	// Write more, so that an engine reusing freed memory would clobber a
	// slice kept without copying.
	commit(t, s, delaystore.Sync, set("k", "overwrite"), del(string(want[0].key)))
	if !samePairs(kept, want) {
		t.Fatalf("copies made inside yield changed: got %d pairs, want %d", len(kept), len(want))
	}
}

// A scan reads the store as it was when the scan began, even when yield
// itself commits changes.
func testScanSnapshot(t *testing.T, s delaystore.Store) {
	commit(t, s, delaystore.Sync, set("a", "1"), set("b", "1"), set("c", "1"))
	var got []kv
	err := s.Scan(delaystore.IterOptions{}, func(k, v []byte) bool {
		got = append(got, kv{bytes.Clone(k), bytes.Clone(v)})
		if len(got) == 1 {
			commit(t, s, delaystore.Sync, set("a", "2"), del("b"), set("c", "2"), set("d", "2"))
		}
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []kv{pair("a", "1"), pair("b", "1"), pair("c", "1")}; !samePairs(got, want) {
		t.Fatalf("scan saw %v, want the state before the commit %v", got, want)
	}
	wantPairs(t, s, pair("a", "2"), pair("c", "2"), pair("d", "2"))
}

// An iterator's First, SeekGE and Next stay inside its bounds: a seek below
// the lower bound lands on it, a seek at or past the upper bound is not
// valid, and Next past the end stays not valid until the next seek.
func testIterPositioning(t *testing.T, s delaystore.Store) {
	commit(t, s, delaystore.Sync,
		set("a", "va"), set("ab", "vab"), set("abc", "vabc"), set("b", "vb"), set("c", "vc"), set("d", "vd"))
	it, err := s.NewIter(delaystore.IterOptions{LowerBound: []byte("ab"), UpperBound: []byte("c")})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()

	if it.Valid() {
		t.Fatalf("new iterator is Valid before positioning")
	}
	at := func(what string, ok bool, wantKey string) {
		t.Helper()
		if wantKey == "" {
			if ok || it.Valid() {
				t.Fatalf("%s: at %q, want not valid", what, it.Key())
			}
			return
		}
		if !ok || !it.Valid() {
			t.Fatalf("%s: not valid (err %v), want %q", what, it.Error(), wantKey)
		}
		if string(it.Key()) != wantKey || string(it.Value()) != "v"+wantKey {
			t.Fatalf("%s: at %q=%q, want %q=%q", what, it.Key(), it.Value(), wantKey, "v"+wantKey)
		}
	}
	at("First", it.First(), "ab")
	at("Next", it.Next(), "abc")
	at("Next", it.Next(), "b")
	at("Next at the last key", it.Next(), "")
	at("Next past the end", it.Next(), "")
	at("SeekGE below the lower bound", it.SeekGE([]byte("a")), "ab")
	at("SeekGE on a key", it.SeekGE([]byte("abc")), "abc")
	at("SeekGE between keys", it.SeekGE([]byte("abd")), "b")
	at("SeekGE at the upper bound", it.SeekGE([]byte("c")), "")
	at("SeekGE past the upper bound", it.SeekGE([]byte("zz")), "")
	at("SeekGE after exhaustion", it.SeekGE([]byte("b")), "b")
	at("First again", it.First(), "ab")
	if err := it.Error(); err != nil {
		t.Fatalf("Error = %v", err)
	}
	if err := it.Close(); err != nil {
		t.Fatalf("Close = %v", err)
	}
	if err := it.Close(); err != nil {
		t.Fatalf("second Close = %v", err)
	}

	// Without bounds, seeking to the empty key is First.
	it, err = s.NewIter(delaystore.IterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	at("SeekGE(empty key)", it.SeekGE([]byte{}), "a")
	at("SeekGE(nil)", it.SeekGE(nil), "a")
}

// Iterators over an empty store or an empty range are never valid and
// close cleanly.
func testIterEmpty(t *testing.T, s delaystore.Store) {
	check := func(what string, opts delaystore.IterOptions) {
		t.Helper()
		it, err := s.NewIter(opts)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if it.First() || it.SeekGE([]byte("a")) || it.Next() || it.Valid() || it.Key() != nil {
			t.Fatalf("%s: iterator found a key %q", what, it.Key())
		}
		if err := it.Close(); err != nil {
			t.Fatalf("%s: Close = %v", what, err)
		}
	}
	check("empty store", delaystore.IterOptions{})
	commit(t, s, delaystore.Sync, set("a", "1"), set("b", "2"))
	check("lower equals upper", delaystore.IterOptions{LowerBound: []byte("a"), UpperBound: []byte("a")})
	check("lower above upper", delaystore.IterOptions{LowerBound: []byte("b"), UpperBound: []byte("a")})
	check("range without keys", delaystore.IterOptions{LowerBound: []byte("a\x00"), UpperBound: []byte("b")})
}

// An open iterator keeps reading the state from when it was created while
// writes, overwrites and deletes are committed; new reads see the new state.
func testIterSnapshot(t *testing.T, s delaystore.Store) {
	commit(t, s, delaystore.Sync, set("a", "1"), set("b", "1"), set("c", "1"))
	it, err := s.NewIter(delaystore.IterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	if !it.First() || string(it.Key()) != "a" {
		t.Fatalf("First: at %q, want a", it.Key())
	}

	commit(t, s, delaystore.Sync, set("a", "2"), del("b"), set("bb", "2"), set("d", "2"))
	commit(t, s, delaystore.NoSync, del("c"))

	var got []kv
	for ok := it.First(); ok; ok = it.Next() {
		got = append(got, kv{bytes.Clone(it.Key()), bytes.Clone(it.Value())})
	}
	if want := []kv{pair("a", "1"), pair("b", "1"), pair("c", "1")}; !samePairs(got, want) {
		t.Fatalf("open iterator saw %v, want the old state %v", got, want)
	}
	if !it.SeekGE([]byte("b")) || string(it.Value()) != "1" || string(it.Key()) != "b" {
		t.Fatalf("SeekGE(b) on the old state: at %q=%q, want b=1", it.Key(), it.Value())
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	wantPairs(t, s, pair("a", "2"), pair("bb", "2"), pair("d", "2"))
}

// Readers running beside a writer see each batch whole or not at all, and
// never go back in time, under the race detector.
func testConcurrent(t *testing.T, s delaystore.Store) {
	const readers = 3
	writeGeneration(t, s, 0)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(done)
		for g := uint64(1); g <= genCount; g++ {
			writeGeneration(t, s, g)
		}
	})
	for r := range readers {
		wg.Go(func() { readGenerations(t, s, r, done) })
	}
	wg.Wait()
	for i := range genWidth {
		v, err := s.Get(genKey(i))
		if err != nil || genOf(v) != genCount {
			t.Fatalf("after the writer: Get(%x) = %x, %v; want generation %d", genKey(i), v, err, genCount)
		}
	}
}

// testConcurrent's writer writes generations 0 to genCount, each as
// one batch that sets genWidth keys to the generation's number.
const (
	genWidth = 8
	genCount = 60
)

// genKey is testConcurrent's key i.
func genKey(i int) []byte { return []byte{'g', byte(i)} }

// genOf decodes a value of testConcurrent; it runs on reader goroutines,
// so it cannot call t.Fatal, and a malformed value decodes to MaxUint64,
// which the readers' checks reject.
func genOf(v []byte) uint64 {
	if len(v) != 8 {
		return math.MaxUint64
	}
	return binary.BigEndian.Uint64(v)
}

// writeGeneration writes generation g in one batch.
func writeGeneration(t *testing.T, s delaystore.Store, g uint64) {
	b := s.NewBatch()
	defer b.Close()
	v := binary.BigEndian.AppendUint64(nil, g)
	for i := range genWidth {
		if err := b.Set(genKey(i), v); err != nil {
			t.Error(err)
			return
		}
	}
	// A key that comes and goes, so deletes race with readers too.
	if g%2 == 0 {
		_ = b.Delete([]byte("flip"))
	} else {
		_ = b.Set([]byte("flip"), v)
	}
	if err := b.Commit(delaystore.NoSync); err != nil {
		t.Error(err)
	}
}

// readGenerations is reader r of testConcurrent: until done, it reads the
// whole store (by Scan for even r, an iterator for odd), then a key by
// Get, and checks that each read saw one whole generation, none older
// than the last.
func readGenerations(t *testing.T, s delaystore.Store, r int, done <-chan struct{}) {
	var last uint64
	for {
		select {
		case <-done:
			return
		default:
		}
		seen := map[uint64]int{}
		read := func(k, v []byte) bool {
			if k[0] == 'g' {
				seen[genOf(v)]++
			}
			return true
		}
		var err error
		if r%2 == 0 {
			err = s.Scan(delaystore.IterOptions{}, read)
		} else {
			err = iterate(s, read)
		}
		if err != nil {
			t.Error(err)
			return
		}
		if len(seen) != 1 {
			t.Errorf("reader %d saw parts of several batches: %v", r, seen)
			return
		}
		for g, n := range seen {
			if n != genWidth || g < last || g > genCount {
				t.Errorf("reader %d saw generation %d on %d keys after %d", r, g, n, last)
				return
			}
			last = g
		}
		v, err := s.Get(genKey(0))
		if err != nil {
			t.Error(err)
			return
		}
		if g := genOf(v); g < last || g > genCount {
			t.Errorf("reader %d: Get saw generation %d after a scan saw %d", r, g, last)
			return
		}
	}
}

// iterate walks the whole store with an iterator, like Scan.
func iterate(s delaystore.Store, yield func(k, v []byte) bool) error {
	it, err := s.NewIter(delaystore.IterOptions{})
	if err != nil {
		return err
	}
	for ok := it.First(); ok && yield(it.Key(), it.Value()); ok = it.Next() {
	}
	return it.Close()
}

// Flush after NoSync commits succeeds and leaves them readable.
func testFlush(t *testing.T, s delaystore.Store) {
	if err := s.Flush(); err != nil {
		t.Fatalf("Flush on an empty store: %v", err)
	}
	commit(t, s, delaystore.NoSync, set("a", "1"))
	commit(t, s, delaystore.NoSync, set("b", "2"), del("a"))
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	wantPairs(t, s, pair("b", "2"))
}

// After Close every call fails with ErrClosed, a batch made before Close
// cannot be committed, and a second Close returns nil.
func testUseAfterClose(t *testing.T, s delaystore.Store) {
	commit(t, s, delaystore.Sync, set("a", "1"))
	early := s.NewBatch()
	if err := early.Set([]byte("b"), []byte("2")); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	wantErrIs(t, "Commit of a batch made before Close", early.Commit(delaystore.Sync), delaystore.ErrClosed)
	_ = early.Close()

	_, err := s.Get([]byte("a"))
	wantErrIs(t, "Get", err, delaystore.ErrClosed)
	_, err = s.NewIter(delaystore.IterOptions{})
	wantErrIs(t, "NewIter", err, delaystore.ErrClosed)
	called := false
	err = s.Scan(delaystore.IterOptions{}, func(_, _ []byte) bool { called = true; return true })
	wantErrIs(t, "Scan", err, delaystore.ErrClosed)
	if called {
		t.Errorf("Scan on a closed store called yield")
	}
	wantErrIs(t, "Flush", s.Flush(), delaystore.ErrClosed)
	b := s.NewBatch()
	defer b.Close()
	if err := b.Set([]byte("c"), []byte("3")); err == nil {
		err = b.Commit(delaystore.Sync)
		wantErrIs(t, "Commit of a batch made after Close", err, delaystore.ErrClosed)
	} else {
		wantErrIs(t, "Set on a batch made after Close", err, delaystore.ErrClosed)
	}
}

// Close does not wait for iterators its caller forgot: it closes them,
// reports them in its error, and they are no longer valid.
func testCloseLeakedIter(t *testing.T, s delaystore.Store) {
	commit(t, s, delaystore.Sync, set("a", "1"), set("b", "2"))
	it, err := s.NewIter(delaystore.IterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !it.First() {
		t.Fatal("First: not valid")
	}
	if err := s.Close(); err == nil {
		t.Errorf("Close with an open iterator returned nil, want an error reporting it")
	}
	if it.Next() || it.Valid() || it.SeekGE([]byte("a")) {
		t.Errorf("iterator still valid after its store closed")
	}
	if it.Error() == nil {
		t.Errorf("iterator Error is nil after its store closed it")
	}
	_ = it.Close()
}

// Close waits for a Scan in flight, while calls made once it has begun fail
// with ErrClosed at once instead of waiting too.
func testCloseDuringScan(t *testing.T, s delaystore.Store) {
	commit(t, s, delaystore.Sync, set("a", "1"), set("b", "2"))
	closed := make(chan error, 1)
	var seen []string
	err := s.Scan(delaystore.IterOptions{}, func(k, _ []byte) bool {
		seen = append(seen, string(k))
		if len(seen) > 1 {
			return true
		}
		go func() { closed <- s.Close() }()
		// Poll, with a bound, until Close has begun.
		deadline := time.Now().Add(10 * time.Second)
		for {
			_, err := s.Get([]byte("a"))
			if errors.Is(err, delaystore.ErrClosed) {
				break
			}
			if err != nil || time.Now().After(deadline) {
				t.Errorf("Get while Close waits = %v, want ErrClosed within 10s", err)
				break
			}
		}
		select {
		case err := <-closed:
			t.Errorf("Close returned (%v) while a Scan was in flight", err)
		default:
		}
		return true
	})
	if err != nil {
		t.Fatalf("Scan that Close waited for: %v", err)
	}
	if !slices.Equal(seen, []string{"a", "b"}) {
		t.Fatalf("Scan saw %q, want [a b]", seen)
	}
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return after the Scan ended")
	}
}
