package raftstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// A fresh node keeps its Raft log on raft-wal.
func TestRaftLog_FreshNode_OnWAL(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 1, enginePebble, oneNodeConfig())
	n := c.waitLeader()
	c.commitOnLeader("k", "v")
	if _, err := os.Stat(filepath.Join(n.dir, walDir)); err != nil {
		t.Fatalf("the WAL: %v", err)
	}
	if _, err := os.Stat(filepath.Join(n.dir, logFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s of a fresh node: %v, want none", logFile, err)
	}
}

// A node created by an earlier version keeps its raft-boltdb log, which
// it now writes without its freelist synced (see boltOptions). That file
// opens with raft-boltdb's defaults, as the earlier version opens it,
// with every entry there; and once that version wrote it back (with the
// freelist synced again) it opens in this one, which goes on appending.
func TestRaftLog_EarlierNode_KeepsBoltLog(t *testing.T) {
	t.Parallel()
	cfg := oneNodeConfig()
	cfg.boltLog = true
	c := startCluster(t, 1, enginePebble, cfg)
	n := c.waitLeader()
	for i := range 20 {
		c.commitOnLeader(fmt.Sprintf("k%02d", i), "v")
	}
	last := n.node.Status().LastLogIndex
	n.stop()

	// As an earlier version opens it: the freelist synced, and an array.
	old, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(n.dir, logFile)})
	if err != nil {
		t.Fatalf("open the log with raft-boltdb's defaults: %v", err)
	}
	got, err := old.LastIndex()
	if err != nil || got != last {
		t.Fatalf("last index with raft-boltdb's defaults: %d, %v; want %d", got, err, last)
	}
	var entry raft.Log
	if err := old.GetLog(last, &entry); err != nil || entry.Type != raft.LogCommand {
		t.Fatalf("entry %d with raft-boltdb's defaults: %+v, %v; want the last commit", last, entry, err)
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}

	// Without the hook: the Dir's raft.db decides.
	n.cfg.boltLog = false
	n.reopen(context.Background())
	c.commitOnLeader("after", "reopen")
	if st := n.node.Status(); st.LastLogIndex <= last {
		t.Fatalf("last index after the reopen %d, want above %d", st.LastLogIndex, last)
	}
	if _, err := os.Stat(filepath.Join(n.dir, walDir)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a WAL beside the raft-boltdb log: %v, want none", err)
	}
	for _, k := range []string{"k00", "k19", "after"} {
		if v, err := n.node.Store().Get([]byte(k)); err != nil || v == nil {
			t.Fatalf("%s after the reopen: %q, %v", k, v, err)
		}
	}
}

// oneNodeConfig is testConfig for a cluster of one, which elects itself
// after one heartbeat timeout.
func oneNodeConfig() Config {
	cfg := testConfig()
	cfg.HeartbeatTimeout = 10 * time.Millisecond
	cfg.ElectionTimeout = 10 * time.Millisecond
	cfg.LeaderLeaseTimeout = 10 * time.Millisecond
	return cfg
}

// Commits made at once from many goroutines (the writer, the deleter and
// the planner do so) queue for the leader together (BatchApplyCh); each
// returns once its own entry is applied, and every node applies them all.
func TestCommit_Concurrent_AllAppliedEverywhere(t *testing.T) {
	t.Parallel()
	if !testConfig().withDefaults().raftConfig().BatchApplyCh {
		t.Fatal("Raft's applies are not batched")
	}
	c := startCluster(t, 3, enginePebble, testConfig())
	leader := c.waitLeader()
	const writers, commits = 16, 10
	var wg sync.WaitGroup
	errs := make(chan error, writers*commits)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := leader.node.Store()
			defer s.Close()
			for i := range commits {
				k := fmt.Sprintf("w%02d-%02d", w, i)
				if err := commitPairs(s, k, k); err != nil {
					errs <- fmt.Errorf("%s: %w", k, err)
					return
				}
				// Committed means applied here.
				if v, err := s.Get([]byte(k)); err != nil || string(v) != k {
					errs <- fmt.Errorf("%s just committed reads %q, %v", k, v, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	c.appliedEverywhere()
	for _, n := range c.nodes {
		for w := range writers {
			for i := range commits {
				k := fmt.Sprintf("w%02d-%02d", w, i)
				if v, err := n.node.Store().Get([]byte(k)); err != nil || string(v) != k {
					t.Fatalf("%s on %s: %q, %v", k, n.id, v, err)
				}
			}
		}
	}
}

// Entries a head truncation removed are gone from the WAL's log, though
// their segment file stands, so that Raft sends a follower that needs
// them the latest snapshot.
func TestWALLog_TruncatedHead_NotFound(t *testing.T) {
	t.Parallel()
	l, err := openWAL(filepath.Join(t.TempDir(), walDir), hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var logs []*raft.Log
	for i := uint64(1); i <= 10; i++ {
		logs = append(logs, &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: []byte{byte(i)}})
	}
	if err := l.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
	if err := l.DeleteRange(1, 5); err != nil {
		t.Fatal(err)
	}
	var got raft.Log
	for i := uint64(1); i <= 5; i++ {
		if err := l.GetLog(i, &got); !errors.Is(err, raft.ErrLogNotFound) {
			t.Fatalf("entry %d after the head truncation: %v, want ErrLogNotFound", i, err)
		}
	}
	if err := l.GetLog(6, &got); err != nil || got.Index != 6 || got.Data[0] != 6 {
		t.Fatalf("entry 6: %+v, %v", got, err)
	}
	if first, err := l.FirstIndex(); err != nil || first != 6 {
		t.Fatalf("first index %d, %v; want 6", first, err)
	}
}
