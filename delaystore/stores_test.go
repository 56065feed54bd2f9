package delaystore_test

import (
	"bytes"
	"errors"
	"slices"
	"sync"
	"sync/atomic"

	"natsdelay/delaystore"
)

// memStore is a minimal in-test Store: a sorted slice under a mutex. Scans
// read a copy, which makes them one consistent snapshot.
type memStore struct {
	mu   sync.Mutex
	kvs  []kv
	shut bool
}

type kv struct{ k, v []byte }

var _ delaystore.Store = (*memStore)(nil)

func newMemStore() *memStore { return &memStore{} }

func (s *memStore) find(k []byte) (int, bool) {
	return slices.BinarySearchFunc(s.kvs, k, func(e kv, k []byte) int { return bytes.Compare(e.k, k) })
}

func (s *memStore) Get(k []byte) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shut {
		return nil, delaystore.ErrClosed
	}
	i, ok := s.find(k)
	if !ok {
		return nil, delaystore.ErrNotFound
	}
	return bytes.Clone(s.kvs[i].v), nil
}

func (s *memStore) NewBatch() delaystore.Batch { return &memBatch{s: s} }

func (s *memStore) NewIter(opts delaystore.IterOptions) (delaystore.Iterator, error) {
	return nil, errors.New("memStore: NewIter not implemented")
}

func (s *memStore) Scan(opts delaystore.IterOptions, yield func(k, v []byte) bool) error {
	s.mu.Lock()
	if s.shut {
		s.mu.Unlock()
		return delaystore.ErrClosed
	}
	lo := 0
	if opts.LowerBound != nil {
		lo, _ = s.find(opts.LowerBound)
	}
	hi := len(s.kvs)
	if opts.UpperBound != nil {
		hi, _ = s.find(opts.UpperBound)
	}
	var snap []kv
	if lo < hi {
		snap = slices.Clone(s.kvs[lo:hi])
	}
	s.mu.Unlock()
	for _, e := range snap {
		if !yield(bytes.Clone(e.k), bytes.Clone(e.v)) {
			break
		}
	}
	return nil
}

func (s *memStore) Flush() error { return nil }

func (s *memStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.shut = true
	return nil
}

type memBatch struct {
	s    *memStore
	ops  []kv // v nil means delete
	dels []bool
	done bool
}

func (b *memBatch) Set(k, v []byte) error {
	if b.done {
		return delaystore.ErrBatchCommitted
	}
	b.ops = append(b.ops, kv{bytes.Clone(k), append([]byte{}, v...)})
	b.dels = append(b.dels, false)
	return nil
}

func (b *memBatch) Delete(k []byte) error {
	if b.done {
		return delaystore.ErrBatchCommitted
	}
	b.ops = append(b.ops, kv{k: bytes.Clone(k)})
	b.dels = append(b.dels, true)
	return nil
}

func (b *memBatch) Len() int { return len(b.ops) }

func (b *memBatch) Commit(delaystore.SyncMode) error {
	if b.done {
		return delaystore.ErrBatchCommitted
	}
	b.done = true
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shut {
		return delaystore.ErrClosed
	}
	for i, op := range b.ops {
		j, ok := s.find(op.k)
		switch {
		case b.dels[i] && ok:
			s.kvs = slices.Delete(s.kvs, j, j+1)
		case b.dels[i]:
		case ok:
			s.kvs[j].v = op.v
		default:
			s.kvs = slices.Insert(s.kvs, j, op)
		}
	}
	return nil
}

func (b *memBatch) Close() error { b.done = true; return nil }

// failStore wraps a Store so that commits fail while fail is set, as a full
// disk or a failed fsync would.
type failStore struct {
	delaystore.Store
	fail atomic.Bool
}

var errInjected = errors.New("injected commit failure")

func (s *failStore) NewBatch() delaystore.Batch { return &failBatch{Batch: s.Store.NewBatch(), s: s} }

type failBatch struct {
	delaystore.Batch
	s *failStore
}

func (b *failBatch) Commit(sync delaystore.SyncMode) error {
	if b.s.fail.Load() {
		return errInjected
	}
	return b.Batch.Commit(sync)
}

// countStore wraps a Store and counts every key its scans yield, to prove
// what a read touched.
type countStore struct {
	delaystore.Store
	yielded atomic.Int64
}

func (s *countStore) Scan(opts delaystore.IterOptions, yield func(k, v []byte) bool) error {
	return s.Store.Scan(opts, func(k, v []byte) bool {
		s.yielded.Add(1)
		return yield(k, v)
	})
}

// scribbleStore wraps a Store and overwrites the slices it yields once yield
// returns, as an engine reusing its buffers may; whatever a caller kept
// without copying is then garbage.
type scribbleStore struct{ delaystore.Store }

func (s scribbleStore) Scan(opts delaystore.IterOptions, yield func(k, v []byte) bool) error {
	return s.Store.Scan(opts, func(k, v []byte) bool {
		k, v = bytes.Clone(k), bytes.Clone(v)
		ok := yield(k, v)
		for i := range k {
			k[i] = 0xee
		}
		for i := range v {
			v[i] = 0xee
		}
		return ok
	})
}
