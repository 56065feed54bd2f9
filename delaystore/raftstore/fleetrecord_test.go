package raftstore

import (
	"context"
	"testing"
	"time"
)

// A cluster cell's record of the fleet is one more key of the store: the
// leader's write commits through the log, and the node that leads after
// it stops reads the record as the last leader wrote it.
func TestCluster_FleetRecord_SurvivesLeaderChange(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, enginePebble, testConfig())
	w := c.newWriter()
	for _, rec := range []string{`{"epoch":2}`, `{"epoch":3,"out":{}}`} {
		if err := w.repo().SetFleetRecord([]byte(rec)); err != nil {
			t.Fatal(err)
		}
	}
	w.close()
	c.appliedEverywhere()
	old := c.waitLeader()
	old.stop()
	w.follow()
	if w.leader == old {
		t.Fatal("the stopped node still leads")
	}
	got, err := w.repo().FleetRecord()
	if err != nil || string(got) != `{"epoch":3,"out":{}}` {
		t.Fatalf("the record on the new leader %s: %q, %v; want the last the old leader wrote", w.leader.id, got, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	old.reopen(ctx)
}
