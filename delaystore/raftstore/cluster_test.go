package raftstore

import (
	"errors"
	"fmt"
	"testing"

	"github.com/natsdelay/natsdelay/delaystore"
)

func openRepo(tb testing.TB, s delaystore.Store) *delaystore.Repository {
	tb.Helper()
	r, err := delaystore.OpenRepository(s, delaystore.RepositoryConfig{})
	if err != nil {
		tb.Fatal(err)
	}
	return r
}

// Every write committed on the leader reaches every node's local store,
// key by key, whichever engine the nodes run and whichever node leads.
func TestCluster_Repository_ReplicatedToEveryNode(t *testing.T) {
	t.Parallel()
	for _, eng := range []engine{enginePebble, engineBolt} {
		t.Run(string(eng), func(t *testing.T) {
			c := startCluster(t, 3, eng, testConfig())
			w := c.newWriter()
			w.schedule("orders.reminder", 500, 64)
			if got := w.repo().Pending(); got != 500 {
				t.Fatalf("leader pending %d, want 500", got)
			}
			w.close()
			c.appliedEverywhere()
			for _, n := range c.nodes[1:] {
				sameContent(t, n.id+" against "+c.nodes[0].id, n.local, c.nodes[0].local)
			}
			for _, n := range c.nodes {
				// A Repository opened on any node's copy sees the same
				// state (its time bucket is recorded, so opening writes
				// nothing).
				fr := openRepo(t, n.local)
				if got := fr.Pending(); got != 500 {
					t.Errorf("%s: pending %d, want 500", n.id, got)
				}
				if fr.LastID() != 500 {
					t.Errorf("%s: last id %d, want 500", n.id, fr.LastID())
				}
				fr.Close()
			}
		})
	}
}

// A follower refuses writes with ErrNotLeader, naming the leader, and
// applies nothing of them;
// the leader applies a write before Commit returns. A node that took over
// meanwhile (an election under load) is not a follower: the check is made
// again on the new roles.
func TestCluster_Commit_FollowerNotLeader(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, enginePebble, testConfig())
	checked := 0
	for attempt := 0; checked < 2; attempt++ {
		if attempt == 20 {
			t.Fatalf("leadership kept changing: only %d followers checked", checked)
		}
		leader := c.waitLeader()
		term := leader.node.Status().Term
		checked = 0
		for _, n := range c.nodes {
			if n == leader {
				continue
			}
			key := fmt.Sprintf("refused-%s-%d", n.id, attempt)
			err := commitPairs(n.node.Store(), key, "v")
			if err == nil {
				// Only a node that led since can have committed it.
				if st := n.node.Status(); st.Term == term {
					t.Fatalf("follower %s committed a write in term %d, led by %s", n.id, term, leader.id)
				}
				t.Logf("%s took over during the check; again", n.id)
				break
			}
			if !errors.Is(err, ErrNotLeader) {
				t.Fatalf("commit on follower %s: %v, want ErrNotLeader", n.id, err)
			}
			// The refusal names the leader the follower knows of.
			if known := n.node.Status().LeaderID; known == leader.id {
				if got, want := delaystore.NotLeaderText(err), "not the leader: leader is "+leader.id; got != want {
					t.Fatalf("follower %s refused with %q, want %q", n.id, got, want)
				}
			}
			if _, err := n.local.Get([]byte(key)); !errors.Is(err, delaystore.ErrNotFound) {
				t.Fatalf("follower %s applied a refused write: %v", n.id, err)
			}
			checked++
		}
	}
	leader := c.commitOnLeader("k", "v")
	// The leader applied it before Commit returned.
	if v, err := leader.local.Get([]byte("k")); err != nil || string(v) != "v" {
		t.Fatalf("leader local after commit: %q, %v", v, err)
	}
}
