package raftlog

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

const segmentExt = ".seg"

// segment is one segment file.
type segment struct {
	first uint64 // index of its first record, and its name
	path  string
	f     *os.File
	// offsets[i] is where the record of entry first+i starts; size is
	// where the last one ends. Both change under Log.mu.
	offsets []int64
	size    int64
}

func segmentName(first uint64) string { return fmt.Sprintf("%020d%s", first, segmentExt) }

// last is the index of the segment's last record, first-1 if it has none.
func (s *segment) last() uint64 { return s.first + uint64(len(s.offsets)) - 1 }

// recordEnd is where the record at offsets[i] ends.
func (s *segment) recordEnd(i int) int64 {
	if i+1 < len(s.offsets) {
		return s.offsets[i+1]
	}
	return s.size
}

// listSegments returns the first indexes of the segments in dir, in
// order.
func listSegments(dir string) ([]uint64, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("raftlog: list %s: %w", dir, err)
	}
	var firsts []uint64
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), segmentExt)
		if !ok {
			continue
		}
		first, err := strconv.ParseUint(name, 10, 64)
		if err != nil || segmentName(first) != e.Name() || first == 0 {
			return nil, fmt.Errorf("%w: %s in %s is not a segment's name", ErrCorrupt, e.Name(), dir)
		}
		firsts = append(firsts, first)
	}
	slices.Sort(firsts)
	return firsts, nil
}

// openSegment opens the segment of first in dir and reads its records. A
// bad record ends the scan: bad is its offset, -1 if there was none, and
// data is the file's bytes. The caller decides what a bad record means.
func openSegment(dir string, first uint64) (s *segment, data []byte, bad int64, err error) {
	path := filepath.Join(dir, segmentName(first))
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("raftlog: open segment: %w", err)
	}
	data, err = io.ReadAll(f)
	if err != nil {
		f.Close()
		return nil, nil, 0, fmt.Errorf("raftlog: read %s: %w", path, err)
	}
	s = &segment{first: first, path: path, f: f}
	bad = -1
	for off := 0; off < len(data); {
		n := recordLen(data[off:])
		if n == 0 {
			bad = int64(off)
			break
		}
		if got, want := recordIndex(data[off:]), first+uint64(len(s.offsets)); got != want {
			// A whole record is never out of place after a crash.
			f.Close()
			return nil, nil, 0, fmt.Errorf("%w: %s at offset %d: entry %d where %d follows", ErrCorrupt, path, off, got, want)
		}
		s.offsets = append(s.offsets, int64(off))
		off += n
	}
	s.size = int64(len(data))
	if bad >= 0 {
		s.size = bad
	}
	return s, data, bad, nil
}

// tornTail reports whether the bad record at offset bad of the last
// segment, data, can be a part of the last write, cut short by a crash:
// no whole record after it was written by a later StoreLogs. A record's
// batch is the first index of its write, so a later write's records have
// a batch past the bad record's index, next.
func tornTail(data []byte, bad int64, next uint64) bool {
	for off := bad + 1; off < int64(len(data)); off++ {
		if n := recordLen(data[off:]); n > 0 && recordBatch(data[off:]) > next {
			return false
		}
	}
	return true
}

// createSegment creates the empty segment of first in dir and syncs dir,
// so that the file is there after a crash once a write to it is synced.
func createSegment(dir string, first uint64) (*segment, error) {
	path := filepath.Join(dir, segmentName(first))
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("raftlog: create segment: %w", err)
	}
	if err := syncDir(dir); err != nil {
		return nil, errors.Join(err, f.Close())
	}
	return &segment{first: first, path: path, f: f}, nil
}

// removeSegment closes s and removes its file, then syncs dir.
func removeSegment(dir string, s *segment) error {
	err := s.f.Close()
	if rerr := os.Remove(s.path); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
		return errors.Join(err, fmt.Errorf("raftlog: remove segment: %w", rerr))
	}
	return errors.Join(err, syncDir(dir))
}

// syncDir syncs dir, making the creation, removal or renaming of a file
// in it durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("raftlog: sync directory: %w", err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("raftlog: sync directory %s: %w", dir, err)
	}
	return nil
}
