package raftstore

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// The Raft log is written without its freelist synced (see boltOptions).
// That file opens with raft-boltdb's defaults, as an earlier version opens
// it, with every entry there; and once that version wrote it back (with
// the freelist synced again) it opens in this one, which goes on
// appending.
func TestRaftLog_FreelistUnsynced_OpensEitherWay(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 1, enginePebble, oneNodeConfig())
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

	n.reopen(context.Background())
	c.commitOnLeader("after", "reopen")
	if st := n.node.Status(); st.LastLogIndex <= last {
		t.Fatalf("last index after the reopen %d, want above %d", st.LastLogIndex, last)
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
