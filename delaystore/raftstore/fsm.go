package raftstore

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"

	"github.com/natsdelay/natsdelay/delaystore"
	snapfmt "github.com/natsdelay/natsdelay/delaystore/snapshot"
)

// fsm applies the Raft log to the local store. Raft calls Apply, Snapshot
// and Restore serially, from one goroutine; Persist and Release of a
// snapshot run concurrently with Apply.
type fsm struct {
	local delaystore.Store
	log   *slog.Logger
	// restoreMarker is the path of a file that exists while Restore
	// rewrites the local store (see Restore).
	restoreMarker string
	// onFail is called once, from the FSM goroutine, when an entry cannot
	// be applied. It must not block on Raft.
	onFail func(error)

	// failed is the error every Apply returns once one entry failed:
	// applying later entries without it would diverge.
	failed atomic.Pointer[error]
	// restores counts Restore calls; tests read it.
	restores atomic.Int64
	// applied is the index of the last command entry applied to the local
	// store. Raft's own applied index counts entries handed to the
	// FSM, which may not be applied yet.
	applied atomic.Uint64
}

var _ raft.FSM = (*fsm)(nil)

// Apply applies one committed entry to the local store, in one batch with
// NoSync: the Raft log already holds the entry durably, and Snapshot makes
// the local store durable before Raft may drop the entries it covers. It
// skips an entry appended in a later term than it was proposed in (see
// proposal.go). It returns nil, errStaleProposal for an entry skipped, or
// the error that stopped the node; the leader's Commit reads it from the
// apply future.
func (f *fsm) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil
	}
	if err := f.failed.Load(); err != nil {
		return *err
	}
	if term, ok := proposalTermOf(l.Extensions); ok && term != l.Term {
		// NB: not a failure of this node: every node skips it alike.
		f.applied.Store(l.Index)
		return fmt.Errorf("%w (entry %d: proposed in term %d, appended in %d)", errStaleProposal, l.Index, term, l.Term)
	}
	b := f.local.NewBatch()
	defer b.Close()
	err := applyCommand(l.Data, b)
	if err == nil {
		err = b.Commit(delaystore.NoSync)
	}
	if err != nil {
		return f.fail(fmt.Errorf("%w: entry %d of term %d: %w", ErrApplyFailed, l.Index, l.Term, err))
	}
	f.applied.Store(l.Index)
	return nil
}

// fail records err as the reason this node stopped and returns it wrapped
// in delaystore.ErrFailed, as a failed local commit is.
func (f *fsm) fail(err error) error {
	if !errors.Is(err, delaystore.ErrFailed) {
		err = fmt.Errorf("%w: %w", delaystore.ErrFailed, err)
	}
	if f.failed.CompareAndSwap(nil, &err) {
		f.log.Error("cannot apply the replicated log; stopping this node", "err", err)
		f.onFail(err)
	}
	return *f.failed.Load()
}

// err returns why the FSM stopped, or nil.
func (f *fsm) err() error {
	if err := f.failed.Load(); err != nil {
		return *err
	}
	return nil
}

// Snapshot makes the local store durable up to the last applied entry and
// opens an iterator on it: a point-in-time view that Persist streams while
// Apply goes on. NB: the Flush is what makes NoSnapshotRestoreOnStart
// correct: once Raft records this snapshot it may drop the entries it
// covers, so the local store must hold them on disk.
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	if err := f.err(); err != nil {
		return nil, err
	}
	if err := f.local.Flush(); err != nil {
		return nil, fmt.Errorf("raftstore: snapshot: flush local store: %w", err)
	}
	it, err := f.local.NewIter(delaystore.IterOptions{})
	if err != nil {
		return nil, fmt.Errorf("raftstore: snapshot: %w", err)
	}
	return &snapshot{it: it, applied: f.applied.Load()}, nil
}

// A snapshot is a stream of the whole local store in key order, in the
// format of package snapshot, with the index of the last command applied
// in its header.
type snapshot struct {
	// mu serialises Persist and Release, which Raft may call from
	// different goroutines.
	mu      sync.Mutex
	it      delaystore.Iterator
	applied uint64
}

// Persist writes the view to sink and closes sink; on error it cancels it.
func (s *snapshot) Persist(sink raft.SnapshotSink) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.write(sink); err != nil {
		return errors.Join(fmt.Errorf("raftstore: persist snapshot: %w", err), sink.Cancel())
	}
	return sink.Close()
}

func (s *snapshot) write(sink io.Writer) error {
	_, err := snapfmt.Write(sink, s.it, s.applied)
	return err
}

// Release closes the iterator, letting the store drop the view.
func (s *snapshot) Release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.it.Close()
}

// restoreChunkOps and restoreChunkBytes bound each batch Restore commits, so
// that restoring a large store does not build one batch of its whole size.
const (
	restoreChunkOps   = 4096
	restoreChunkBytes = 4 << 20
)

// Restore replaces the whole content of the local store with the snapshot
// in rc: it deletes every key the snapshot lacks and writes every key whose
// value differs, in bounded batches, then flushes. The local store is
// inconsistent while it runs, so a marker file stands in Dir until it is
// done: if the node stops half way, the next Open restores the latest
// snapshot again instead of trusting the local store (see the package doc).
func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	f.restores.Add(1)
	if err := f.err(); err != nil {
		return err
	}
	if err := writeFileSync(f.restoreMarker, nil); err != nil {
		return fmt.Errorf("raftstore: restore: %w", err)
	}
	n, err := f.restore(rc)
	if err != nil {
		// NB: the local store is now part old, part new, and the marker
		// stays. Raft goes on with its old state; the node must not apply
		// entries on top of this.
		return f.fail(fmt.Errorf("%w: restore snapshot: %w", ErrApplyFailed, err))
	}
	if err := os.Remove(f.restoreMarker); err != nil {
		return f.fail(fmt.Errorf("%w: restore snapshot: %w", ErrApplyFailed, err))
	}
	f.log.Info("restored snapshot", "keys", n)
	return nil
}

// restore reads the snapshot in rc into the local store and returns the
// number of keys it holds.
func (f *fsm) restore(rc io.Reader) (uint64, error) {
	r, err := snapfmt.NewReader(rc)
	if err != nil {
		return 0, err
	}
	// NB: no iterator stays open across the writes: bbolt cannot grow its
	// memory map while a read transaction is open, and the writer would wait
	// for the reader on this same goroutine. old holds the local keys in a
	// window read ahead of the snapshot's position instead.
	old := oldKeys{local: f.local}
	w := chunkWriter{local: f.local}
	defer w.close()
	if err := restoreRecords(r, &old, &w); err != nil {
		return r.Count(), err
	}
	if err := deleteRest(&old, &w); err != nil {
		return r.Count(), err
	}
	if err := w.commit(); err != nil {
		return r.Count(), err
	}
	if err := f.local.Flush(); err != nil {
		return r.Count(), err
	}
	f.applied.Store(r.Applied())
	return r.Count(), nil
}

// restoreRecords reads the snapshot's records to its end, checked whole,
// and writes each key whose value differs from the local one, deleting
// the local keys between them that the snapshot lacks.
func restoreRecords(r *snapfmt.Reader, old *oldKeys, w *chunkWriter) error {
	for {
		// NB: key and value are valid until the next record: the
		// writer's batch copies what it is given.
		key, value, ok, err := r.Next()
		if err != nil || !ok {
			return err
		}
		if err := restoreRecord(old, w, key, value); err != nil {
			return err
		}
		old.passed(key)
	}
}

// restoreRecord writes key, value unless the local store holds it
// already, and deletes the local keys that sort before key: the snapshot
// lacks them.
func restoreRecord(old *oldKeys, w *chunkWriter, key, value []byte) error {
	for {
		k, v, ok, err := old.peek()
		if err != nil {
			return err
		}
		c := 1
		if ok {
			c = bytes.Compare(k, key)
		}
		if c > 0 {
			err = w.set(key, value)
		} else if c < 0 {
			err = w.del(k)
		} else if !bytes.Equal(v, value) {
			err = w.set(key, value)
		}
		if err != nil {
			return err
		}
		if c >= 0 {
			if c == 0 {
				old.next()
			}
			return nil
		}
		old.next()
	}
}

// deleteRest deletes the local keys above the snapshot's last one.
func deleteRest(old *oldKeys, w *chunkWriter) error {
	for {
		k, _, ok, err := old.peek()
		if err != nil || !ok {
			return err
		}
		if err := w.del(k); err != nil {
			return err
		}
		old.next()
	}
}

// chunkWriter writes to the local store in batches of bounded size.
type chunkWriter struct {
	local delaystore.Store
	b     delaystore.Batch
	bytes int
}

func (w *chunkWriter) set(key, value []byte) error {
	w.open()
	if err := w.b.Set(key, value); err != nil {
		return err
	}
	w.bytes += len(key) + len(value)
	return w.maybeCommit()
}

func (w *chunkWriter) del(key []byte) error {
	w.open()
	if err := w.b.Delete(key); err != nil {
		return err
	}
	w.bytes += len(key)
	return w.maybeCommit()
}

func (w *chunkWriter) open() {
	if w.b == nil {
		w.b = w.local.NewBatch()
		w.bytes = 0
	}
}

func (w *chunkWriter) maybeCommit() error {
	if w.b.Len() < restoreChunkOps && w.bytes < restoreChunkBytes {
		return nil
	}
	return w.commit()
}

func (w *chunkWriter) commit() error {
	if w.b == nil {
		return nil
	}
	err := w.b.Commit(delaystore.NoSync)
	w.close()
	return err
}

func (w *chunkWriter) close() {
	if w.b != nil {
		w.b.Close()
		w.b = nil
	}
}

// oldKeys reads the local store's keys in order, a window at a time, each
// window from an iterator opened and closed at once, so that the writes
// Restore makes in between never wait for an open read.
type oldKeys struct {
	local  delaystore.Store
	window []kv
	// from is where the next window starts: past every key the snapshot
	// has reached, since Restore has written those and they are no longer
	// old keys.
	from []byte
	done bool
}

type kv struct{ key, value []byte }

// passed records that the snapshot reached key: the next window starts
// above it, or above the last key read, whichever is higher. The window
// then holds only keys above key, since peek and next consumed the others.
func (o *oldKeys) passed(key []byte) {
	if bytes.Compare(key, o.from) >= 0 {
		o.from = append(append(o.from[:0], key...), 0)
	}
}

func (o *oldKeys) peek() (key, value []byte, ok bool, err error) {
	if len(o.window) == 0 && !o.done {
		if err := o.fill(); err != nil {
			return nil, nil, false, err
		}
	}
	if len(o.window) == 0 {
		return nil, nil, false, nil
	}
	return o.window[0].key, o.window[0].value, true, nil
}

func (o *oldKeys) next() { o.window = o.window[1:] }

func (o *oldKeys) fill() error {
	it, err := o.local.NewIter(delaystore.IterOptions{LowerBound: o.from})
	if err != nil {
		return err
	}
	o.window = o.window[:0]
	size := 0
	ok := it.First()
	for ; ok && len(o.window) < restoreChunkOps && size < restoreChunkBytes; ok = it.Next() {
		k, v := bytes.Clone(it.Key()), bytes.Clone(it.Value())
		o.window = append(o.window, kv{k, v})
		size += len(k) + len(v)
	}
	o.done = !ok
	if len(o.window) > 0 {
		o.from = append(append(o.from[:0], o.window[len(o.window)-1].key...), 0)
	}
	return errors.Join(it.Error(), it.Close())
}
