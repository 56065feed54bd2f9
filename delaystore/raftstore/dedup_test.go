package raftstore

import (
	"context"
	"testing"
	"time"

	"github.com/natsdelay/natsdelay/delaystore"
)

// The duplicate window's records travel in the batch of the message they
// answer for, one Raft log entry: a resend that reaches the next leader,
// after the first one's leader stopped, is answered with the first key.
func TestCluster_DedupWindow_SurvivesLeaderChange(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, enginePebble, testConfig())
	w := c.newWriter()
	now := time.Now().UnixNano()
	m := func() delaystore.Once {
		return delaystore.Once{
			Msg: &delaystore.StoredMessage{Subject: "orders.charge", ClientId: "order-1", Payload: []byte("10"), FireAtNs: now},
			Sum: delaystore.DedupSum{1},
		}
	}
	first, err := w.repo().ScheduleOnce([]delaystore.Once{m()}, time.Minute, now, delaystore.Sync)
	if err != nil {
		t.Fatal(err)
	}
	// Delivered and ACKed on the first leader.
	if _, err := w.repo().Apply([]delaystore.Op{{Key: first[0].Key}}, delaystore.Sync); err != nil {
		t.Fatal(err)
	}
	w.close()
	c.appliedEverywhere()
	old := c.waitLeader()
	old.stop()
	w.follow()
	if w.leader == old {
		t.Fatal("the stopped node still leads")
	}
	got, err := w.repo().ScheduleOnce([]delaystore.Once{m()}, time.Minute, now+int64(time.Second), delaystore.Sync)
	if err != nil {
		t.Fatal(err)
	}
	if !got[0].Duplicate || got[0].Key != first[0].Key {
		t.Fatalf("resend on %s: %+v, want a duplicate of %v", w.leader.id, got[0], first[0].Key)
	}
	if p := w.repo().Pending(); p != 0 {
		t.Fatalf("pending %d on the new leader, want 0", p)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	old.reopen(ctx)
}
