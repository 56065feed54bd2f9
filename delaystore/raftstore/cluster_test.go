package raftstore

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"natsdelay/delaystore"
)

// scheduleN schedules n messages on subject through a Repository over s,
// in batches of batchSize, and returns their event IDs.
func scheduleN(tb testing.TB, r *delaystore.Repository, subject string, n, batchSize int) []uint64 {
	tb.Helper()
	var ids []uint64
	for len(ids) < n {
		var msgs []*delaystore.StoredMessage
		for i := 0; i < batchSize && len(ids)+len(msgs) < n; i++ {
			msgs = append(msgs, &delaystore.StoredMessage{
				Subject:  subject,
				Payload:  fmt.Appendf(nil, "m%d", len(ids)+i),
				FireAtNs: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano() + int64(len(ids)+i),
			})
		}
		got, err := r.Schedule(msgs, delaystore.Sync)
		if err != nil {
			tb.Fatalf("schedule: %v", err)
		}
		for _, s := range got {
			ids = append(ids, s.Key.EventID())
		}
	}
	return ids
}

func openRepo(tb testing.TB, s delaystore.Store) *delaystore.Repository {
	tb.Helper()
	r, err := delaystore.OpenRepository(s, delaystore.RepositoryConfig{})
	if err != nil {
		tb.Fatal(err)
	}
	return r
}

// Every write committed on the leader reaches every node's local store,
// key by key, whichever engine the nodes run.
func TestCluster_Repository_ReplicatedToEveryNode(t *testing.T) {
	t.Parallel()
	for _, eng := range []engine{enginePebble, engineBolt} {
		t.Run(string(eng), func(t *testing.T) {
			c := startCluster(t, 3, eng, testConfig())
			leader := c.waitLeader()
			r := openRepo(t, leader.node.Store())
			scheduleN(t, r, "orders.reminder", 500, 64)
			if got := r.Pending(); got != 500 {
				t.Fatalf("leader pending %d, want 500", got)
			}
			r.Close()
			c.waitApplied(leader.node.fsm.applied.Load())
			for _, n := range c.nodes {
				if n == leader {
					continue
				}
				sameContent(t, n.id+" against the leader", n.local, leader.local)
				// A Repository opened on a follower's copy sees the same
				// state (its time bucket is recorded, so opening writes
				// nothing).
				fr := openRepo(t, n.local)
				if got := fr.Pending(); got != 500 {
					t.Errorf("%s: pending %d, want 500", n.id, got)
				}
				if fr.LastID() != 500 {
					t.Errorf("%s: last id %d, want 500", n.id, fr.LastID())
				}
			}
		})
	}
}

// A follower refuses writes with ErrNotLeader, and applies nothing of them.
func TestCluster_Commit_FollowerNotLeader(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, enginePebble, testConfig())
	leader := c.waitLeader()
	for _, n := range c.nodes {
		if n == leader {
			continue
		}
		err := commitPairs(n.node.Store(), "k", "v")
		if !errors.Is(err, ErrNotLeader) {
			t.Fatalf("commit on follower %s: %v, want ErrNotLeader", n.id, err)
		}
		if _, err := n.local.Get([]byte("k")); !errors.Is(err, delaystore.ErrNotFound) {
			t.Fatalf("follower %s applied a refused write: %v", n.id, err)
		}
	}
	if err := commitPairs(leader.node.Store(), "k", "v"); err != nil {
		t.Fatal(err)
	}
	// The leader applied it before Commit returned.
	if v, err := leader.local.Get([]byte("k")); err != nil || string(v) != "v" {
		t.Fatalf("leader local after commit: %q, %v", v, err)
	}
}
