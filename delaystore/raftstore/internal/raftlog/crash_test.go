package raftlog_test

import (
	"bufio"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/natsdelay/natsdelay/delaystore/raftstore/internal/raftlog"
)

// crashDirEnv makes the test binary the writer TestLog_Crash kills.
const crashDirEnv = "RAFTLOG_CRASH_DIR"

// crashEntry is the entry at index of term; its data says both.
func crashEntry(index, term uint64) *raft.Log {
	return &raft.Log{Index: index, Term: term, Type: raft.LogCommand,
		Data: fmt.Appendf(nil, "%d/%d/%s", index, term, strings.Repeat("d", int(index%200)))}
}

// TestLog_Crash_Writer is the process TestLog_Crash kills: it opens the
// log, appends after its last entry in batches, cuts a suffix as a deposed
// leader does and the head as compaction does, and says on stdout what
// returned. A line is written only after the call it reports returned.
func TestLog_Crash_Writer(t *testing.T) {
	dir := os.Getenv(crashDirEnv)
	if dir == "" {
		t.Skip("the writer TestLog_Crash starts")
	}
	l, err := raftlog.Open(dir, raftlog.Options{SegmentBytes: 16 << 10})
	if err != nil {
		fmt.Printf("error %v\n", err)
		os.Exit(1)
	}
	last, _ := l.LastIndex()
	term := uint64(1)
	if last > 0 {
		var e raft.Log
		if err := l.GetLog(last, &e); err != nil {
			fmt.Printf("error %v\n", err)
			os.Exit(1)
		}
		term = e.Term + 1
	}
	w := bufio.NewWriter(os.Stdout)
	say := func(format string, args ...any) {
		fmt.Fprintf(w, format+"\n", args...)
		w.Flush()
	}
	say("open %d %d", last, term)
	rng := rand.New(rand.NewPCG(uint64(os.Getpid()), 1))
	for i := 0; ; i++ {
		switch {
		case i%9 == 8 && last > 20:
			cut := last - uint64(rng.IntN(20))
			say("cutting %d", cut-1)
			if err := l.DeleteRange(cut, last); err != nil {
				say("error %v", err)
				os.Exit(1)
			}
			last = cut - 1
			term++
		case i%13 == 12 && last > 300:
			first, _ := l.FirstIndex()
			if err := l.DeleteRange(first, last-200); err != nil {
				say("error %v", err)
				os.Exit(1)
			}
		default:
			n := 1 + rng.IntN(30)
			var ls []*raft.Log
			for j := range n {
				ls = append(ls, crashEntry(last+1+uint64(j), term))
			}
			if err := l.StoreLogs(ls); err != nil {
				say("error %v", err)
				os.Exit(1)
			}
			last += uint64(n)
			say("ack %d", last)
		}
	}
}

// TestLog_Crash SIGKILLs a writer at a random point, many times over one
// log, and checks after each kill that the log opens to a consecutive run
// of entries that holds every entry of each StoreLogs that returned.
func TestLog_Crash(t *testing.T) {
	kills := 30
	if testing.Short() {
		kills = 8
	}
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(uint64(os.Getpid()), 2))
	for k := range kills {
		least := runWriter(t, dir, 5+rng.IntN(200))
		l, err := raftlog.Open(dir, raftlog.Options{SegmentBytes: 16 << 10})
		if err != nil {
			t.Fatalf("kill %d: open: %v", k, err)
		}
		first, _ := l.FirstIndex()
		last, _ := l.LastIndex()
		if last < least {
			t.Fatalf("kill %d: the log ends at %d, but entries up to %d were acknowledged", k, last, least)
		}
		prevTerm := uint64(0)
		for i := first; i <= last; i++ {
			var e raft.Log
			if err := l.GetLog(i, &e); err != nil {
				t.Fatalf("kill %d: get %d of %d to %d: %v", k, i, first, last, err)
			}
			want := crashEntry(i, e.Term)
			if string(e.Data) != string(want.Data) || e.Term < prevTerm {
				t.Fatalf("kill %d: entry %d is %q of term %d after term %d", k, i, e.Data, e.Term, prevTerm)
			}
			prevTerm = e.Term
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// runWriter starts the writer on dir, kills it once it has reported lines
// lines, and returns the last entry it must have kept: the last
// acknowledged, or where a cut under way may end.
func runWriter(t *testing.T, dir string, lines int) uint64 {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestLog_Crash_Writer$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashDirEnv+"="+dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// NB: the writer runs ahead of what was read, so every line it wrote
	// before the kill counts, those read after it too.
	var least uint64
	sc := bufio.NewScanner(out)
	for n := 0; sc.Scan(); n++ {
		f := strings.Fields(sc.Text())
		switch f[0] {
		case "ack", "cutting", "open":
			least, _ = strconv.ParseUint(f[1], 10, 64)
		default:
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("writer: %s", sc.Text())
		}
		if n == lines {
			if err := cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
		}
	}
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("writer ended with %v, want killed", err)
	}
	return least
}
