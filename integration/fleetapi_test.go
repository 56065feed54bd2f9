package integration_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge/client"
	"github.com/natsdelay/natsdelay/bridge/fleet"
	"github.com/natsdelay/natsdelay/bridge/wire"
)

// cellAPI is a client of one cell's own API, past the fleet's routing.
func cellAPI(nc *nats.Conn, cell string) *client.Client {
	_, _, prefix := fleet.CellSubjects(cell)
	return client.New(nc, client.WithTimeout(wait), client.WithAPIPrefix(prefix))
}

// fleetLimits checks that LIMITS.SET, PAUSE, RESUME and LIMITS.DELETE
// through the fleet reach every cell, and that LIMITS.GET and LIMITS.LIST
// answer what every cell holds, and name the cells when they differ.
func fleetLimits(t *testing.T, nc *nats.Conn) {
	ctx := context.Background()
	c := api(nc)
	set := wire.Limit{Pattern: "fleet.lim.>", MaxInFlight: 7, Rate: 5}
	if _, err := c.SetLimit(ctx, set); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Pause(ctx, "fleet.paused.*"); err != nil {
		t.Fatal(err)
	}
	for _, cell := range fleetCells {
		got, err := cellAPI(nc, cell).Limits(ctx)
		if err != nil || len(got) != 2 || got[0] != (wire.Limit{Pattern: "fleet.paused.*", Paused: true}) || got[1] != set {
			t.Fatalf("cell %s's limits after a SET and a PAUSE through the fleet: %+v, %v", cell, got, err)
		}
	}
	if got, err := c.Limits(ctx); err != nil || len(got) != 2 || got[1] != set {
		t.Fatalf("LIMITS.LIST through the fleet: %+v, %v", got, err)
	}
	if _, err := c.Resume(ctx, "fleet.paused.*"); err != nil {
		t.Fatal(err)
	}
	if _, err := cellAPI(nc, "b").Limit(ctx, "fleet.paused.*"); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("cell b's limit after RESUME through the fleet: %v, want 404 (nothing set is deleted)", err)
	}

	// A write that reached one cell only: the fleet names the difference.
	if _, err := cellAPI(nc, "c").SetLimit(ctx, wire.Limit{Pattern: "fleet.lim.>", MaxInFlight: 9}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Limit(ctx, "fleet.lim.>"); !errors.Is(err, wire.ErrConflict) || !strings.Contains(err.Error(), `cell "c"`) {
		t.Fatalf("LIMITS.GET with cells that differ: %v, want a 409 naming cell c", err)
	}
	if _, err := c.Limits(ctx); !errors.Is(err, wire.ErrConflict) || !strings.Contains(err.Error(), `"fleet.lim.>"`) {
		t.Fatalf("LIMITS.LIST with cells that differ: %v, want a 409 naming the pattern", err)
	}
	if err := c.DeleteLimit(ctx, "fleet.lim.>"); err != nil {
		t.Fatal(err)
	}
	for _, cell := range fleetCells {
		if got, err := cellAPI(nc, cell).Limits(ctx); err != nil || len(got) != 0 {
			t.Fatalf("cell %s's limits after DELETE through the fleet: %+v, %v", cell, got, err)
		}
	}
	if err := c.DeleteLimit(ctx, "fleet.lim.>"); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("DELETE of a limit no cell holds: %v, want 404", err)
	}
	if _, err := c.SetLimit(ctx, wire.Limit{Pattern: "fleet..x"}); !errors.Is(err, wire.ErrBadRequest) || strings.Contains(err.Error(), "taken by") {
		t.Fatalf("SET of a bad pattern: %v, want the cells' own 400", err)
	}
}

// fakeCell plays a cell d of the test fleet that tells the fleet its
// record, owning nothing, and answers its API with answer. It runs until
// the test ends.
func fakeCell(t *testing.T, nc *nats.Conn, answer func(m *nats.Msg)) {
	t.Helper()
	_, _, prefix := fleet.CellSubjects("d")
	sub, err := nc.Subscribe(prefix+".>", answer)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := json.Marshal(fleet.Status{Record: fleet.Record{Cell: "d", Partitions: fleet.DefaultPartitions, Epoch: 1}, Node: "d"})
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			_ = nc.Publish(fleet.AliveSubject, st)
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() {
		close(stop)
		<-done
		_ = sub.Unsubscribe()
	})
}

// fleetLimitWriteCellFails checks that a PAUSE a cell refuses is an error
// that names that cell and the cells that took it, and that the same
// PAUSE sent again, once the cell takes it, is answered as done. It adds
// a cell d to the fleet for good, so it runs last.
func fleetLimitWriteCellFails(t *testing.T, nc *nats.Conn) {
	refuse := make(chan bool, 1)
	refuse <- true
	fakeCell(t, nc, func(m *nats.Msg) {
		r := <-refuse
		refuse <- r
		if r {
			h := nats.Header{}
			h.Set(wire.HeaderServiceError, "the store is failing")
			h.Set(wire.HeaderServiceErrorCode, "503")
			_ = m.RespondMsg(&nats.Msg{Header: h, Data: []byte(`{"error":{"code":503,"description":"the store is failing"}}`)})
			return
		}
		_ = m.Respond([]byte(`{"pattern":"fleet.fails.>","paused":true}`))
	})
	req := []byte(`{"pattern":"fleet.fails.>"}`)
	var last error
	checkFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		r, err := nc.Request(wire.DefaultAPIPrefix+"."+wire.VerbPause, req, wait)
		if err != nil {
			return err
		}
		last = wire.ParseError(r.Header, r.Data)
		if last == nil || !strings.Contains(last.Error(), `cell "d"`) {
			return fmt.Errorf("PAUSE while cell d refuses: %v, want an error naming d", last)
		}
		return nil
	})
	if !errors.Is(last, wire.ErrUnavailable) || !strings.Contains(last.Error(), "taken by: a, b, c") {
		t.Fatalf("PAUSE while cell d refuses: %v, want a 503 saying a, b and c took it", last)
	}
	for _, cell := range fleetCells {
		if l, err := cellAPI(nc, cell).Limit(context.Background(), "fleet.fails.>"); err != nil || !l.Paused {
			t.Fatalf("cell %s after the PAUSE d refused: %+v, %v", cell, l, err)
		}
	}
	<-refuse
	refuse <- false
	r, err := nc.Request(wire.DefaultAPIPrefix+"."+wire.VerbPause, req, wait)
	if err != nil {
		t.Fatal(err)
	}
	if err := wire.ParseError(r.Header, r.Data); err != nil {
		t.Fatalf("the PAUSE sent again once d takes it: %v", err)
	}
	for _, cell := range fleetCells {
		if l, err := cellAPI(nc, cell).Limit(context.Background(), "fleet.fails.>"); err != nil || *l != (wire.Limit{Pattern: "fleet.fails.>", Paused: true}) {
			t.Fatalf("cell %s after the PAUSE sent again: %+v, %v", cell, l, err)
		}
	}
}
