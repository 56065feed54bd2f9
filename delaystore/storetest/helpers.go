package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/natsdelay/natsdelay/delaystore"
)

// kv is one copied key and value.
type kv struct {
	key, value []byte
}

func (p kv) String() string { return fmt.Sprintf("%x=%q", p.key, p.value) }

// op is one write for commit: a delete when del is set.
type op struct {
	key, value []byte
	del        bool
}

func set(key, value string) op { return op{key: []byte(key), value: []byte(value)} }
func del(key string) op        { return op{key: []byte(key), del: true} }

// commit applies ops in one batch with mode.
func commit(tb testing.TB, s delaystore.Store, mode delaystore.SyncMode, ops ...op) {
	tb.Helper()
	b := s.NewBatch()
	defer b.Close()
	for _, o := range ops {
		var err error
		if o.del {
			err = b.Delete(o.key)
		} else {
			err = b.Set(o.key, o.value)
		}
		if err != nil {
			tb.Fatalf("batch op %v: %v", o, err)
		}
	}
	if err := b.Commit(mode); err != nil {
		tb.Fatalf("commit %d ops: %v", len(ops), err)
	}
}

// scanAll returns copies of every pair Scan yields in [lo, hi).
func scanAll(tb testing.TB, s delaystore.Store, opts delaystore.IterOptions) []kv {
	tb.Helper()
	var got []kv
	err := s.Scan(opts, func(k, v []byte) bool {
		// The slices are only valid inside yield.
		got = append(got, kv{bytes.Clone(k), bytes.Clone(v)})
		return true
	})
	if err != nil {
		tb.Fatalf("scan [%x, %x): %v", opts.LowerBound, opts.UpperBound, err)
	}
	return got
}

// iterAll returns copies of every pair an iterator visits from First.
func iterAll(tb testing.TB, s delaystore.Store, opts delaystore.IterOptions) []kv {
	tb.Helper()
	it, err := s.NewIter(opts)
	if err != nil {
		tb.Fatalf("new iterator [%x, %x): %v", opts.LowerBound, opts.UpperBound, err)
	}
	var got []kv
	for ok := it.First(); ok; ok = it.Next() {
		if !it.Valid() {
			tb.Fatalf("iterator moved to a key but is not Valid")
		}
		got = append(got, kv{bytes.Clone(it.Key()), bytes.Clone(it.Value())})
	}
	if it.Valid() {
		tb.Errorf("iterator is Valid after Next returned false")
	}
	if err := it.Error(); err != nil {
		tb.Fatalf("iterator error: %v", err)
	}
	if err := it.Close(); err != nil {
		tb.Fatalf("iterator close: %v", err)
	}
	return got
}

// keysOf returns the keys of pairs.
func keysOf(pairs []kv) [][]byte {
	out := make([][]byte, len(pairs))
	for i, p := range pairs {
		out[i] = p.key
	}
	return out
}

func sameKeys(a, b [][]byte) bool { return slices.EqualFunc(a, b, bytes.Equal) }

func fmtKeys(ks [][]byte) string {
	parts := make([]string, len(ks))
	for i, k := range ks {
		parts[i] = fmt.Sprintf("%x", k)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func samePairs(a, b []kv) bool {
	return slices.EqualFunc(a, b, func(x, y kv) bool {
		return bytes.Equal(x.key, y.key) && bytes.Equal(x.value, y.value)
	})
}

// wantPairs fails unless the store holds exactly want, checked with both
// Scan and an iterator over the whole keyspace and with Get for each key.
func wantPairs(tb testing.TB, s delaystore.Store, want ...kv) {
	tb.Helper()
	if got := scanAll(tb, s, delaystore.IterOptions{}); !samePairs(got, want) {
		tb.Fatalf("scan: got %v, want %v", got, want)
	}
	if got := iterAll(tb, s, delaystore.IterOptions{}); !samePairs(got, want) {
		tb.Fatalf("iterator: got %v, want %v", got, want)
	}
	for _, p := range want {
		v, err := s.Get(p.key)
		if err != nil || !bytes.Equal(v, p.value) {
			tb.Fatalf("Get(%x) = %q, %v; want %q", p.key, v, err, p.value)
		}
	}
}

// pair builds a kv from strings.
func pair(key, value string) kv { return kv{[]byte(key), []byte(value)} }

// wantNotFound fails unless Get reports key missing.
func wantNotFound(tb testing.TB, s delaystore.Store, key []byte) {
	tb.Helper()
	v, err := s.Get(key)
	if !errors.Is(err, delaystore.ErrNotFound) {
		tb.Fatalf("Get(%x) = %q, %v; want ErrNotFound", key, v, err)
	}
}

// wantErrIs fails unless errors.Is(err, target).
func wantErrIs(tb testing.TB, what string, err, target error) {
	tb.Helper()
	if !errors.Is(err, target) {
		tb.Fatalf("%s: got error %v, want one wrapping %v", what, err, target)
	}
}
