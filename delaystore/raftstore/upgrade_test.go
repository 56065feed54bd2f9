package raftstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/natsdelay/natsdelay/delaystore/raftstore/internal/raftlog"
)

// toBoltLog turns dir, a stopped node's, into what a version before
// logDir leaves: the log's entries in raft.db, written by raft-boltdb, no
// logDir, and node.json's record at the top level. It returns the entries.
func toBoltLog(t *testing.T, dir string) []*raft.Log {
	t.Helper()
	l, err := raftlog.Open(filepath.Join(dir, logDir), raftlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	first, _ := l.FirstIndex()
	last, _ := l.LastIndex()
	var entries []*raft.Log
	for i := first; i <= last; i++ {
		e := new(raft.Log)
		if err := l.GetLog(i, e); err != nil {
			t.Fatal(err)
		}
		entries = append(entries, e)
	}
	l.Close()
	if len(entries) == 0 {
		t.Fatalf("no entries in %s", dir)
	}
	bolt, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, logFile)})
	if err != nil {
		t.Fatal(err)
	}
	if err := bolt.StoreLogs(entries); err != nil {
		t.Fatal(err)
	}
	if err := bolt.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, logDir)); err != nil {
		t.Fatal(err)
	}
	st, err := readDirState(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(st.node)
	if err := os.WriteFile(filepath.Join(dir, nodeFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
	return entries
}

// A cluster of the version before logDir comes up on this one with its
// log: every node loses its local store's unsynced writes (its memtable),
// so what it holds again after the restart came from the entries copied
// out of raft.db. One node's copy was cut short by a crash before, which
// left a part of it that must not be taken for the log.
func TestUpgrade_LogInRaftDB_CopiedToLogDir(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, engineCrashable, testConfig())
	var pairs []string
	for i := range 20 {
		pairs = append(pairs, fmt.Sprintf("k%02d", i), fmt.Sprintf("v%d", i))
		c.commitOnLeader(pairs[len(pairs)-2:]...)
	}
	c.appliedEverywhere()
	entries := make(map[string][]*raft.Log)
	for _, n := range c.nodes {
		n.crash()
		if got := dump(t, n.local); len(got) != 0 {
			t.Fatalf("%s holds %d keys after the crash, want none (the test needs the log to bring them back)", n.id, len(got))
		}
		entries[n.id] = toBoltLog(t, n.dir)
	}
	// A copy cut short: a first entry only, in the copy's directory.
	cut, err := raftlog.Open(filepath.Join(c.nodes[0].dir, logDir+".tmp"), raftlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := cut.StoreLogs(entries[c.nodes[0].id][:1]); err != nil {
		t.Fatal(err)
	}
	cut.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, n := range c.nodes {
		n.reopen(ctx)
	}
	for _, n := range c.nodes {
		want := entries[n.id]
		first, _ := n.node.logs.FirstIndex()
		if first != want[0].Index {
			t.Fatalf("%s: log starts at %d, want %d", n.id, first, want[0].Index)
		}
		for _, w := range want {
			var got raft.Log
			if err := n.node.logs.GetLog(w.Index, &got); err != nil || got.Term != w.Term || string(got.Data) != string(w.Data) {
				t.Fatalf("%s: entry %d: %v, term %d, want term %d and the same data", n.id, w.Index, err, got.Term, w.Term)
			}
		}
		if last, err := n.node.stable.LastIndex(); err != nil || last != 0 {
			t.Fatalf("%s: raft.db still holds entries up to %d (%v)", n.id, last, err)
		}
		if _, err := os.Stat(filepath.Join(n.dir, logDir+".tmp")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s: the copy's directory is left: %v", n.id, err)
		}
		b, _ := os.ReadFile(filepath.Join(n.dir, nodeFile))
		if !strings.Contains(string(b), nodeFileNote) {
			t.Fatalf("%s: node.json is %s, want the note that keeps earlier versions out", n.id, b)
		}
	}
	c.commitOnLeader("after", "upgrade")
	c.appliedEverywhere()
	pairs = append(pairs, "after", "upgrade")
	for _, n := range c.nodes {
		for i := 0; i < len(pairs); i += 2 {
			v, err := n.local.Get([]byte(pairs[i]))
			if err != nil || string(v) != pairs[i+1] {
				t.Fatalf("%s: %s = %q (%v), want %q", n.id, pairs[i], v, err, pairs[i+1])
			}
		}
	}
}

// A version before logDir reads node.json's record at the top level and
// refuses a file without one, quoting it: the record this version writes
// has none, and its note says why.
func TestNodeFile_EarlierVersionRefuses(t *testing.T) {
	dir := t.TempDir()
	if err := writeNodeFile(dir, nodeRecord{ID: "n1", Cluster: "c1"}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, nodeFile))
	if err != nil {
		t.Fatal(err)
	}
	// What the version before did (its readDirState).
	var old struct {
		ID      string `json:"id"`
		Cluster string `json:"cluster"`
	}
	if err := json.Unmarshal(b, &old); err != nil || old.ID != "" || old.Cluster != "" {
		t.Fatalf("the version before reads id %q and cluster %q (%v) from %s: it would not refuse", old.ID, old.Cluster, err, b)
	}
	st, err := readDirState(dir)
	if err != nil || *st.node != (nodeRecord{ID: "n1", Cluster: "c1"}) {
		t.Fatalf("this version reads %+v, %v", st.node, err)
	}
}
