package raftlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync"

	"github.com/hashicorp/raft"
)

var (
	_ raft.LogStore          = (*Log)(nil)
	_ raft.MonotonicLogStore = (*Log)(nil)
)

// DefaultSegmentBytes is the size past which a StoreLogs starts a new
// segment. A segment is removed whole once compaction has passed it, so
// this bounds the space a compacted log keeps besides its entries.
const DefaultSegmentBytes = 64 << 20

// maxKeptBuffer bounds the encoding buffer StoreLogs keeps for the next
// call: a group commit's entries are kilobytes to a few megabytes, and a
// rare larger batch's buffer is let go rather than held for good.
const maxKeptBuffer = 16 << 20

// firstIndexFile holds the log's first index (see the package doc).
const firstIndexFile = "first-index"

// Options are the log's settings. The zero value is the defaults.
type Options struct {
	// SegmentBytes is the size past which a StoreLogs starts a new
	// segment; 0 means DefaultSegmentBytes.
	SegmentBytes int64
	// Logger receives a warning when Open cuts off a torn last write. Nil
	// discards it.
	Logger *slog.Logger
}

// Log is a raft.LogStore in a directory of segment files. It is safe for
// concurrent use: Raft appends from its main loop, compacts from its
// snapshot goroutine and reads from its replication goroutines.
type Log struct {
	dir          string
	segmentBytes int64
	log          *slog.Logger

	// wmu serialises the writers, StoreLogs and DeleteRange, across their
	// writes and syncs; they take mu only to publish what they wrote.
	wmu sync.Mutex
	buf []byte // the records of one StoreLogs, reused; under wmu

	mu struct {
		sync.RWMutex
		// segs are the segments in index order; StoreLogs appends to the
		// last.
		segs []*segment
		// first and last are the log's first and last index, both 0 when
		// it is empty; floor is the first index on disk (first-index),
		// which an empty log keeps.
		first, last, floor uint64
		// err, once set, is returned by every write: a write or sync
		// that failed leaves the disk unknown, and only Open finds out
		// what it holds.
		err    error
		closed bool
	}
}

// Open opens the log in dir, creating dir if it does not exist. It checks
// every record; it cuts off a torn last write (see the package doc) and
// returns an error wrapping ErrCorrupt for any other bad record.
func Open(dir string, opts Options) (*Log, error) {
	l := &Log{dir: dir, segmentBytes: opts.SegmentBytes, log: opts.Logger}
	if l.segmentBytes <= 0 {
		l.segmentBytes = DefaultSegmentBytes
	}
	if l.log == nil {
		l.log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("raftlog: %w", err)
	}
	if err := syncDir(filepath.Dir(dir)); err != nil {
		return nil, err
	}
	if err := l.load(); err != nil {
		for _, s := range l.mu.segs {
			s.f.Close()
		}
		return nil, err
	}
	return l, nil
}

// load reads first-index and the segments into l.
func (l *Log) load() error {
	floor, err := readFirstIndex(l.dir)
	if err != nil {
		return err
	}
	firsts, err := listSegments(l.dir)
	if err != nil {
		return err
	}
	for i, first := range firsts {
		s, data, bad, err := openSegment(l.dir, first)
		if err != nil {
			return err
		}
		l.mu.segs = append(l.mu.segs, s)
		if bad < 0 {
			continue
		}
		if i < len(firsts)-1 || !tornTail(data, bad, s.last()+1) {
			return fmt.Errorf("%w: %s at offset %d: a bad record before the last write (%d bytes follow)", ErrCorrupt, s.path, bad, int64(len(data))-bad)
		}
		l.log.Warn("cutting off a torn last write of the Raft log", "file", s.path, "offset", bad, "bytes", int64(len(data))-bad)
		if err := s.f.Truncate(bad); err != nil {
			return fmt.Errorf("raftlog: cut off a torn write: %w", err)
		}
		if err := s.f.Sync(); err != nil {
			return fmt.Errorf("raftlog: cut off a torn write: %w", err)
		}
	}
	return l.settle(floor)
}

// settle removes the segments that hold no entry of the log, those wholly
// below floor and an empty last one, and sets first and last.
func (l *Log) settle(floor uint64) error {
	segs := l.mu.segs
	for len(segs) > 0 && segs[len(segs)-1].last() < max(floor, segs[len(segs)-1].first) {
		if err := removeSegment(l.dir, segs[len(segs)-1]); err != nil {
			return err
		}
		segs = segs[:len(segs)-1]
	}
	for len(segs) > 0 && segs[0].last() < floor {
		if err := removeSegment(l.dir, segs[0]); err != nil {
			return err
		}
		segs = segs[1:]
	}
	l.mu.segs, l.mu.floor = segs, floor
	if len(segs) == 0 {
		return nil
	}
	for i := 1; i < len(segs); i++ {
		if segs[i].first != segs[i-1].last()+1 {
			return fmt.Errorf("%w: %s starts at entry %d, but %s ends at %d", ErrCorrupt, segs[i].path, segs[i].first, segs[i-1].path, segs[i-1].last())
		}
	}
	if segs[0].first > floor {
		return fmt.Errorf("%w: %s starts at entry %d, but the log starts at %d (%s): a segment is missing", ErrCorrupt, segs[0].path, segs[0].first, floor, firstIndexFile)
	}
	l.mu.first, l.mu.last = floor, segs[len(segs)-1].last()
	return nil
}

// IsMonotonic reports true: the log takes only entries that follow its
// last one, so Raft clears it after installing a snapshot rather than
// leave a gap (see raft.MonotonicLogStore).
func (l *Log) IsMonotonic() bool { return true }

// FirstIndex returns the first index of the log, 0 if it is empty.
func (l *Log) FirstIndex() (uint64, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.mu.closed {
		return 0, ErrClosed
	}
	return l.mu.first, nil
}

// LastIndex returns the last index of the log, 0 if it is empty.
func (l *Log) LastIndex() (uint64, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.mu.closed {
		return 0, ErrClosed
	}
	return l.mu.last, nil
}

// GetLog reads the entry at index into out. out's Data and Extensions are
// the caller's. It returns raft.ErrLogNotFound for an index outside the
// log, and an error wrapping ErrCorrupt for a record that fails its check.
func (l *Log) GetLog(index uint64, out *raft.Log) error {
	// NB: the read runs under the read lock, so that no writer closes
	// the segment under it; writers take the lock only to publish.
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.mu.closed {
		return ErrClosed
	}
	if l.mu.last == 0 || index < l.mu.first || index > l.mu.last {
		return raft.ErrLogNotFound
	}
	segs := l.mu.segs
	s := segs[sort.Search(len(segs), func(i int) bool { return segs[i].first > index })-1]
	i := int(index - s.first)
	off := s.offsets[i]
	rec := make([]byte, s.recordEnd(i)-off)
	if _, err := s.f.ReadAt(rec, off); err != nil {
		return fmt.Errorf("raftlog: read entry %d from %s: %w", index, s.path, err)
	}
	if recordLen(rec) != len(rec) || recordIndex(rec) != index {
		return fmt.Errorf("%w: %s at offset %d: entry %d fails its check", ErrCorrupt, s.path, off, index)
	}
	decodeRecord(rec, out)
	return nil
}

// StoreLog appends one entry; see StoreLogs.
func (l *Log) StoreLog(e *raft.Log) error { return l.StoreLogs([]*raft.Log{e}) }

// StoreLogs appends entries, which must be consecutive and follow the
// log's last entry (an empty log takes any first index), with one write
// and one fdatasync. It returns once they are durable, and an error
// wrapping ErrNotConsecutive for entries out of place, storing nothing.
// It does not keep entries or their slices.
func (l *Log) StoreLogs(entries []*raft.Log) error {
	if len(entries) == 0 {
		return nil
	}
	l.wmu.Lock()
	defer l.wmu.Unlock()
	l.mu.RLock()
	last, floor, err := l.mu.last, l.mu.floor, l.writable()
	segs := l.mu.segs
	l.mu.RUnlock()
	if err != nil {
		return err
	}
	first := entries[0].Index
	if (last != 0 && first != last+1) || first == 0 {
		return fmt.Errorf("%w: entry %d after entry %d", ErrNotConsecutive, first, last)
	}
	for i, e := range entries[1:] {
		if e.Index != first+uint64(i)+1 {
			return fmt.Errorf("%w: entry %d after entry %d in one call", ErrNotConsecutive, e.Index, first+uint64(i))
		}
	}
	if last == 0 && floor != first {
		// An empty log starts anew at first: record it before the
		// segment that holds it exists.
		if err := l.setFloor(first); err != nil {
			return l.fail(err)
		}
	}
	var s *segment
	if len(segs) > 0 && last != 0 && segs[len(segs)-1].size < l.segmentBytes {
		s = segs[len(segs)-1]
	} else if s, err = createSegment(l.dir, first); err != nil {
		return l.fail(err)
	}
	l.buf = l.buf[:0]
	offsets := make([]int64, len(entries))
	for i, e := range entries {
		offsets[i] = s.size + int64(len(l.buf))
		l.buf = appendRecord(l.buf, e, first)
	}
	if _, err := s.f.WriteAt(l.buf, s.size); err != nil {
		return l.fail(fmt.Errorf("raftlog: write entries %d to %d: %w", first, first+uint64(len(entries))-1, err))
	}
	if err := datasync(s.f); err != nil {
		return l.fail(fmt.Errorf("raftlog: sync entries %d to %d: %w", first, first+uint64(len(entries))-1, err))
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.mu.segs) == 0 || l.mu.segs[len(l.mu.segs)-1] != s {
		l.mu.segs = append(l.mu.segs, s)
	}
	s.offsets = append(s.offsets, offsets...)
	s.size += int64(len(l.buf))
	if l.mu.last == 0 {
		l.mu.first = first
	}
	l.mu.last = s.last()
	if cap(l.buf) > maxKeptBuffer {
		l.buf = nil
	}
	return nil
}

// writable returns why the log takes no writes, or nil. mu must be held.
func (l *Log) writable() error {
	if l.mu.closed {
		return ErrClosed
	}
	return l.mu.err
}

// fail records err as the log's: every later write returns it.
func (l *Log) fail(err error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mu.err == nil {
		l.mu.err = err
	}
	return err
}

// setFloor replaces first-index with first. wmu must be held.
func (l *Log) setFloor(first uint64) error {
	if err := writeFirstIndex(l.dir, first); err != nil {
		return err
	}
	l.mu.Lock()
	l.mu.floor = first
	l.mu.Unlock()
	return nil
}

// Close closes the segment files. Later calls return ErrClosed; closing
// twice is harmless.
func (l *Log) Close() error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mu.closed {
		return nil
	}
	l.mu.closed = true
	var errs []error
	for _, s := range l.mu.segs {
		errs = append(errs, s.f.Close())
	}
	l.mu.segs = nil
	return errors.Join(errs...)
}

// readFirstIndex reads first-index in dir, 0 if there is none.
func readFirstIndex(dir string) (uint64, error) {
	path := filepath.Join(dir, firstIndexFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("raftlog: read first index: %w", err)
	}
	if len(b) != 12 || crc32.Checksum(b[:8], castagnoli) != binary.BigEndian.Uint32(b[8:]) {
		return 0, fmt.Errorf("%w: %s holds %x, want 8 bytes and their CRC-32C", ErrCorrupt, path, b)
	}
	return binary.BigEndian.Uint64(b), nil
}

// writeFirstIndex replaces first-index in dir: a temporary file, synced,
// renamed over it, and the directory synced.
func writeFirstIndex(dir string, first uint64) error {
	b := binary.BigEndian.AppendUint64(nil, first)
	b = binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
	path := filepath.Join(dir, firstIndexFile)
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("raftlog: write first index: %w", err)
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		return fmt.Errorf("raftlog: write first index: %w", err)
	}
	return syncDir(dir)
}
