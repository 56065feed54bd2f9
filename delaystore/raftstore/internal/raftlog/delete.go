package raftlog

import "fmt"

// DeleteRange removes the entries from lo to hi, both included, which
// must not leave a hole: a head of the log (compaction), a suffix (a
// deposed leader's conflicting entries), or all of it (after Raft
// installs a snapshot). Entries outside the log are ignored. Each case
// is crash-safe as the package doc says. It returns an error wrapping
// ErrNotConsecutive for a range strictly inside the log, removing
// nothing.
func (l *Log) DeleteRange(lo, hi uint64) error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	l.mu.RLock()
	first, last, err := l.mu.first, l.mu.last, l.writable()
	l.mu.RUnlock()
	switch {
	case err != nil:
		return err
	case last == 0 || lo > hi || hi < first || lo > last:
		return nil
	case lo <= first && hi >= last:
		err = l.deleteAll(last)
	case lo <= first:
		err = l.deleteHead(hi + 1)
	case hi >= last:
		err = l.deleteSuffix(lo)
	default:
		return fmt.Errorf("%w: deleting entries %d to %d of %d to %d would leave a hole", ErrNotConsecutive, lo, hi, first, last)
	}
	if err != nil {
		return l.fail(err)
	}
	return nil
}

// deleteAll empties the log, whose last entry is last. wmu must be held.
func (l *Log) deleteAll(last uint64) error {
	if err := l.setFloor(last + 1); err != nil {
		return err
	}
	l.mu.Lock()
	segs := l.mu.segs
	l.mu.segs, l.mu.first, l.mu.last = nil, 0, 0
	l.mu.Unlock()
	for i := len(segs) - 1; i >= 0; i-- {
		if err := removeSegment(l.dir, segs[i]); err != nil {
			return err
		}
	}
	return nil
}

// deleteHead makes first the log's first entry, first not past its last.
// wmu must be held.
func (l *Log) deleteHead(first uint64) error {
	if err := l.setFloor(first); err != nil {
		return err
	}
	l.mu.Lock()
	segs := l.mu.segs
	n := 0
	for n < len(segs)-1 && segs[n].last() < first {
		n++
	}
	l.mu.segs, l.mu.first = segs[n:], first
	l.mu.Unlock()
	for _, s := range segs[:n] {
		if err := removeSegment(l.dir, s); err != nil {
			return err
		}
	}
	return nil
}

// deleteSuffix makes the entry before lo the log's last, lo past its
// first. wmu must be held.
func (l *Log) deleteSuffix(lo uint64) error {
	l.mu.Lock()
	segs := l.mu.segs
	n := len(segs)
	for segs[n-1].first >= lo {
		n--
	}
	// cut keeps the entries before lo; lo may be the first of the next
	// segment, when cut loses none.
	cut := segs[n-1]
	i := int(lo - cut.first)
	off := cut.size
	if i < len(cut.offsets) {
		off = cut.offsets[i]
	}
	cut.offsets, cut.size = cut.offsets[:i:i], off
	l.mu.segs, l.mu.last = segs[:n], lo-1
	l.mu.Unlock()
	// NB: from the highest down, each removal synced, so that a crash
	// leaves a prefix of the segments.
	for j := len(segs) - 1; j >= n; j-- {
		if err := removeSegment(l.dir, segs[j]); err != nil {
			return err
		}
	}
	if err := cut.f.Truncate(off); err != nil {
		return fmt.Errorf("raftlog: cut %s at entry %d: %w", cut.path, lo, err)
	}
	if err := cut.f.Sync(); err != nil {
		return fmt.Errorf("raftlog: cut %s at entry %d: %w", cut.path, lo, err)
	}
	return nil
}
