package raftlog_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/natsdelay/natsdelay/delaystore/raftstore/internal/raftlog"
)

// entry is the entry at index of term, with data that says both, so that
// a test tells any entry read back from the one it wrote.
func entry(index, term uint64) *raft.Log {
	l := &raft.Log{
		Index: index,
		Term:  term,
		Type:  raft.LogCommand,
		Data:  fmt.Appendf(nil, "entry %d of term %d %s", index, term, bytes.Repeat([]byte{'x'}, int(index%37))),
	}
	if index%3 == 0 {
		l.Extensions = []byte("ext")
		l.AppendedAt = time.Unix(1700000000, int64(index))
	}
	if index%5 == 0 {
		l.Type = raft.LogNoop
		l.Data = nil
	}
	return l
}

func batch(from, to, term uint64) []*raft.Log {
	var ls []*raft.Log
	for i := from; i <= to; i++ {
		ls = append(ls, entry(i, term))
	}
	return ls
}

func open(t testing.TB, dir string, segmentBytes int64) *raftlog.Log {
	t.Helper()
	l, err := raftlog.Open(dir, raftlog.Options{SegmentBytes: segmentBytes, Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func store(t testing.TB, l *raftlog.Log, ls []*raft.Log) {
	t.Helper()
	if err := l.StoreLogs(ls); err != nil {
		t.Fatalf("store %d to %d: %v", ls[0].Index, ls[len(ls)-1].Index, err)
	}
}

// checkLog checks that l holds exactly the entries first to last, each
// the one entry() makes of the term termOf gives.
func checkLog(t testing.TB, l *raftlog.Log, first, last uint64, termOf func(uint64) uint64) {
	t.Helper()
	gotFirst, _ := l.FirstIndex()
	gotLast, _ := l.LastIndex()
	if gotFirst != first || gotLast != last {
		t.Fatalf("log is %d to %d, want %d to %d", gotFirst, gotLast, first, last)
	}
	for i := first; i <= last && last != 0; i++ {
		var got raft.Log
		if err := l.GetLog(i, &got); err != nil {
			t.Fatalf("get %d: %v", i, err)
		}
		want := entry(i, termOf(i))
		if got.Index != want.Index || got.Term != want.Term || got.Type != want.Type ||
			!bytes.Equal(got.Data, want.Data) || !bytes.Equal(got.Extensions, want.Extensions) || !got.AppendedAt.Equal(want.AppendedAt) {
			t.Fatalf("entry %d is %+v, want %+v", i, got, *want)
		}
	}
	var out raft.Log
	for _, i := range []uint64{first - 1, last + 1} {
		if i == 0 {
			continue
		}
		if err := l.GetLog(i, &out); !errors.Is(err, raft.ErrLogNotFound) {
			t.Fatalf("get %d outside %d to %d: %v, want raft.ErrLogNotFound", i, first, last, err)
		}
	}
}

func term(t uint64) func(uint64) uint64 { return func(uint64) uint64 { return t } }

func segments(t testing.TB, dir string) []string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*.seg"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range names {
		names[i] = filepath.Base(names[i])
	}
	return names
}

func TestLog_StoreLogs_ReadBackAndReopen(t *testing.T) {
	dir := t.TempDir()
	l := open(t, dir, 0)
	checkLog(t, l, 0, 0, term(1))
	// Raft clears a MonotonicLogStore after installing a snapshot; its
	// LogCache, which the node puts in front, must say so too.
	cache, err := raft.NewLogCache(8, l)
	if err != nil {
		t.Fatal(err)
	}
	if !l.IsMonotonic() || !cache.IsMonotonic() {
		t.Fatalf("IsMonotonic: %v, through raft.LogCache %v; want true", l.IsMonotonic(), cache.IsMonotonic())
	}
	store(t, l, batch(1, 1, 1))
	store(t, l, batch(2, 40, 1))
	if err := l.StoreLog(entry(41, 1)); err != nil {
		t.Fatal(err)
	}
	checkLog(t, l, 1, 41, term(1))
	l.Close()
	checkLog(t, open(t, dir, 0), 1, 41, term(1))
}

func TestLog_StoreLogs_NotConsecutive_StoresNothing(t *testing.T) {
	dir := t.TempDir()
	l := open(t, dir, 0)
	store(t, l, batch(1, 10, 1))
	for name, ls := range map[string][]*raft.Log{
		"gap":         batch(12, 13, 1),
		"overlap":     batch(10, 11, 1),
		"hole inside": {entry(11, 1), entry(13, 1)},
	} {
		if err := l.StoreLogs(ls); !errors.Is(err, raftlog.ErrNotConsecutive) {
			t.Errorf("%s: %v, want ErrNotConsecutive", name, err)
		}
	}
	checkLog(t, l, 1, 10, term(1))
	store(t, l, batch(11, 12, 1))
	l.Close()
	checkLog(t, open(t, dir, 0), 1, 12, term(1))
}

func TestLog_StoreLogs_RollsSegments(t *testing.T) {
	dir := t.TempDir()
	l := open(t, dir, 512)
	for i := uint64(1); i <= 100; i += 4 {
		store(t, l, batch(i, i+3, 1))
	}
	if n := len(segments(t, dir)); n < 5 {
		t.Fatalf("%d segments of 512 bytes for 100 entries, want more", n)
	}
	checkLog(t, l, 1, 100, term(1))
	l.Close()
	checkLog(t, open(t, dir, 512), 1, 100, term(1))
}

func TestLog_DeleteRange_Head(t *testing.T) {
	dir := t.TempDir()
	l := open(t, dir, 512)
	for i := uint64(1); i <= 100; i += 4 {
		store(t, l, batch(i, i+3, 1))
	}
	before := segments(t, dir)
	if err := l.DeleteRange(1, 60); err != nil {
		t.Fatal(err)
	}
	checkLog(t, l, 61, 100, term(1))
	after := segments(t, dir)
	if len(after) >= len(before) || after[0] > fmt.Sprintf("%020d.seg", 61) {
		t.Fatalf("segments %q after cutting the head at 61, from %q", after, before)
	}
	store(t, l, batch(101, 110, 1))
	l.Close()
	l = open(t, dir, 512)
	checkLog(t, l, 61, 110, term(1))
	// A head that ends inside the last segment keeps it.
	if err := l.DeleteRange(61, 109); err != nil {
		t.Fatal(err)
	}
	checkLog(t, l, 110, 110, term(1))
	l.Close()
	checkLog(t, open(t, dir, 512), 110, 110, term(1))
}

func TestLog_DeleteRange_Suffix(t *testing.T) {
	dir := t.TempDir()
	l := open(t, dir, 512)
	for i := uint64(1); i <= 100; i += 4 {
		store(t, l, batch(i, i+3, 1))
	}
	if err := l.DeleteRange(70, 100); err != nil {
		t.Fatal(err)
	}
	checkLog(t, l, 1, 69, term(1))
	l.Close()
	l = open(t, dir, 512)
	checkLog(t, l, 1, 69, term(1))
	// A new leader's entries replace the cut ones.
	store(t, l, batch(70, 90, 2))
	termOf := func(i uint64) uint64 { return map[bool]uint64{true: 1, false: 2}[i < 70] }
	checkLog(t, l, 1, 90, termOf)
	l.Close()
	l = open(t, dir, 512)
	checkLog(t, l, 1, 90, termOf)
	// A cut at a segment's first entry removes the segment.
	first := segments(t, dir)[len(segments(t, dir))-1]
	var idx uint64
	fmt.Sscanf(first, "%d.seg", &idx)
	if err := l.DeleteRange(idx, 90); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(segments(t, dir), first) {
		t.Fatalf("segment %s still there after cutting at its first entry", first)
	}
	checkLog(t, l, 1, idx-1, termOf)
	if err := l.DeleteRange(10, 20); !errors.Is(err, raftlog.ErrNotConsecutive) {
		t.Fatalf("delete inside the log: %v, want ErrNotConsecutive", err)
	}
	checkLog(t, l, 1, idx-1, termOf)
}

// Raft clears a monotonic log after installing a snapshot; the next
// append starts where the snapshot ends, below or past the old log's end.
func TestLog_DeleteRange_All_NextAppendAtAnyIndex(t *testing.T) {
	dir := t.TempDir()
	l := open(t, dir, 512)
	store(t, l, batch(1, 50, 1))
	if err := l.DeleteRange(1, 50); err != nil {
		t.Fatal(err)
	}
	checkLog(t, l, 0, 0, term(1))
	if n := len(segments(t, dir)); n != 0 {
		t.Fatalf("%d segments left in an empty log", n)
	}
	l.Close()
	l = open(t, dir, 512)
	checkLog(t, l, 0, 0, term(1))
	store(t, l, batch(500, 520, 3))
	checkLog(t, l, 500, 520, term(3))
	l.Close()
	l = open(t, dir, 512)
	checkLog(t, l, 500, 520, term(3))
	if err := l.DeleteRange(0, 1000); err != nil {
		t.Fatal(err)
	}
	store(t, l, batch(30, 40, 4))
	l.Close()
	checkLog(t, open(t, dir, 512), 30, 40, term(4))
}

// writeBatches writes the entries 1 to 23 in batches of 10, 10 and 3 into
// a fresh log in dir and returns the path of its one segment and the offset where
// the last batch starts.
func writeBatches(t *testing.T, dir string) (string, int64) {
	t.Helper()
	l := open(t, dir, 0)
	store(t, l, batch(1, 10, 1))
	store(t, l, batch(11, 20, 1))
	path := filepath.Join(dir, segments(t, dir)[0])
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	store(t, l, batch(21, 23, 1))
	l.Close()
	return path, fi.Size()
}

func copyDir(t *testing.T, from string) string {
	t.Helper()
	to := t.TempDir()
	if err := os.CopyFS(to, os.DirFS(from)); err != nil {
		t.Fatal(err)
	}
	return to
}

// checkPrefix checks that the log in dir opens to the entries 1 to some
// last at least least, and returns last.
func checkPrefix(t *testing.T, dir string, least uint64) uint64 {
	t.Helper()
	l, err := raftlog.Open(dir, raftlog.Options{})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer l.Close()
	last, _ := l.LastIndex()
	if last < least {
		t.Fatalf("log ends at %d, want at least %d", last, least)
	}
	checkLog(t, l, 1, last, term(1))
	// It takes the next entry where it ends.
	store(t, l, batch(last+1, last+1, 1))
	return last
}

// A crash during a write leaves part of it: the log opens to the entries
// before the torn record, never fewer than the writes before.
func TestLog_Open_TornLastWrite_OpensToPrefix(t *testing.T) {
	orig := t.TempDir()
	path, start := writeBatches(t, orig)
	full, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	name := filepath.Base(path)
	for size := start; size < int64(len(full)); size++ {
		dir := copyDir(t, orig)
		if err := os.Truncate(filepath.Join(dir, name), size); err != nil {
			t.Fatal(err)
		}
		if last := checkPrefix(t, dir, 20); last == 23 {
			t.Fatalf("cut at %d of %d: all 23 entries", size, len(full))
		}
	}
	for off := start; off < int64(len(full)); off++ {
		dir := copyDir(t, orig)
		b := slices.Clone(full)
		b[off] ^= 0x5a
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
		if last := checkPrefix(t, dir, 20); last == 23 {
			t.Fatalf("byte %d flipped: all 23 entries", off)
		}
	}
}

// A bad record before the last write cannot be a crash's: it is an error
// that names the file and the offset, in the last segment or another.
func TestLog_Open_CorruptBeforeLastWrite_Refuses(t *testing.T) {
	orig := t.TempDir()
	path, start := writeBatches(t, orig)
	name := filepath.Base(path)
	for _, off := range []int64{0, 3, 100, start - 1} {
		dir := copyDir(t, orig)
		b, _ := os.ReadFile(path)
		b[off] ^= 0x01
		os.WriteFile(filepath.Join(dir, name), b, 0o600)
		_, err := raftlog.Open(dir, raftlog.Options{})
		if !errors.Is(err, raftlog.ErrCorrupt) || !bytes.Contains([]byte(err.Error()), []byte(name)) {
			t.Fatalf("byte %d flipped: %v, want ErrCorrupt naming %s", off, err, name)
		}
	}

	dir := t.TempDir()
	l := open(t, dir, 256)
	for i := uint64(1); i <= 40; i += 2 {
		store(t, l, batch(i, i+1, 1))
	}
	l.Close()
	segs := segments(t, dir)
	for _, seg := range segs[:len(segs)-1] {
		p := filepath.Join(dir, seg)
		b, _ := os.ReadFile(p)
		fi, _ := os.Stat(p)
		// The last byte of a segment before the last: its last record.
		b[fi.Size()-1] ^= 0x01
		os.WriteFile(p, b, 0o600)
		_, err := raftlog.Open(dir, raftlog.Options{})
		if !errors.Is(err, raftlog.ErrCorrupt) || !bytes.Contains([]byte(err.Error()), []byte(seg)) {
			t.Fatalf("last byte of %s flipped: %v, want ErrCorrupt naming it", seg, err)
		}
		b[fi.Size()-1] ^= 0x01
		os.WriteFile(p, b, 0o600)
	}
	checkPrefix(t, dir, 40)
}

func TestLog_Open_MissingSegment_Refuses(t *testing.T) {
	dir := t.TempDir()
	l := open(t, dir, 256)
	for i := uint64(1); i <= 40; i += 2 {
		store(t, l, batch(i, i+1, 1))
	}
	l.Close()
	segs := segments(t, dir)
	for _, i := range []int{0, 1} {
		d := copyDir(t, dir)
		os.Remove(filepath.Join(d, segs[i]))
		if _, err := raftlog.Open(d, raftlog.Options{}); !errors.Is(err, raftlog.ErrCorrupt) {
			t.Fatalf("without %s: %v, want ErrCorrupt", segs[i], err)
		}
	}
}

func TestLog_Close_Twice_ThenErrClosed(t *testing.T) {
	l := open(t, t.TempDir(), 0)
	store(t, l, batch(1, 2, 1))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.StoreLogs(batch(3, 3, 1)); !errors.Is(err, raftlog.ErrClosed) {
		t.Fatalf("store after close: %v", err)
	}
	var out raft.Log
	if err := l.GetLog(1, &out); !errors.Is(err, raftlog.ErrClosed) {
		t.Fatalf("get after close: %v", err)
	}
}
