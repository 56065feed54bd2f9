package integration_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
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
	c, err := client.New(nc, client.WithTimeout(wait), client.WithAPIPrefix(prefix))
	if err != nil {
		panic(err) // NB: wait is a constant more than 0
	}
	return c
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
	checkFor(t, 2*wait, 20*time.Millisecond, func() error {
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

// fleetSchedules pages through SCHEDULES of 24 recurring schedules on
// subjects spread over the cells, two names on every third subject, 5 at
// a time: each must come once, in (subject, name) order.
func fleetSchedules(t *testing.T, nc *nats.Conn) {
	var want []string
	for i := range 16 {
		s := fmt.Sprintf("fleet.sched.%02d", i)
		names := []string{"n1"}
		if i%3 == 0 {
			names = append(names, "n2")
		}
		for _, name := range names {
			schedule(t, nc, newMsg(s, "tick", wire.HeaderEvery, "1h", wire.HeaderID, name))
			want = append(want, s+" "+name)
		}
	}
	var got []string
	after, pages := "", 0
	for {
		limit := 5
		page, err := api(nc).SchedulesPage(context.Background(), wire.SchedulesRequest{Limit: &limit, After: after})
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, s := range page.Messages {
			if strings.HasPrefix(s.Subject, "fleet.sched.") {
				got = append(got, s.Subject+" "+s.Schedule.Name)
			}
		}
		if page.Next == "" {
			break
		}
		after = page.Next
	}
	if strings.Join(got, ",") != strings.Join(want, ",") || pages != (len(want)+4)/5 {
		t.Fatalf("%d pages of schedules %v, want %d pages of %v", pages, got, (len(want)+4)/5, want)
	}
}

// fleetDeadList makes 30 dead letters on subjects spread over the cells
// and pages through DEAD.LIST 4 at a time: each must come once, in key
// order (their tags' order) across the cells, with a fleet cursor; a
// cursor that is not the fleet's is a 400.
func fleetDeadList(t *testing.T, nc *nats.Conn) {
	want := fleetDead(t, nc, "fleet.dead", 30)
	c := api(nc)
	filter := wire.Filter{Subject: "fleet.dead.>"}
	var got []string
	after, pages := "", 0
	for {
		limit := 4
		body, err := c.Request(context.Background(), wire.VerbDeadList, wire.DeadListRequest{Filter: filter, Limit: &limit, After: after})
		if err != nil {
			t.Fatal(err)
		}
		var page wire.DeadListReply
		if err := json.Unmarshal(body, &page); err != nil {
			t.Fatal(err)
		}
		pages++
		for _, d := range page.DeadLetters {
			if !want[d.Tag] || d.Reason == "" {
				t.Fatalf("dead letter %+v: not one of the test's, or no reason", d)
			}
			got = append(got, d.Tag)
		}
		if page.Next == "" {
			break
		}
		if !strings.HasPrefix(page.Next, "fleet:") {
			t.Fatalf("next %q, want a fleet cursor", page.Next)
		}
		after = page.Next
	}
	if len(got) != len(want) || !slices.IsSorted(got) || pages != 8 || len(slices.Compact(slices.Clone(got))) != len(got) {
		t.Fatalf("%d pages of %d dead letters, sorted %v: want 8 pages of the %d, each once, in tag order", pages, len(got), slices.IsSorted(got), len(want))
	}
	if _, err := c.Request(context.Background(), wire.VerbDeadList, wire.DeadListRequest{After: got[0]}); !errors.Is(err, wire.ErrBadRequest) {
		t.Fatalf("DEAD.LIST after a cell's cursor: %v, want a 400", err)
	}
}

// fleetBulkSteps runs BULK.verb through the fleet from req, step by step,
// and returns the steps' count and already summed (a message a step moved
// later may be met again by a later step, and counted already), and the
// steps.
func fleetBulkSteps(t *testing.T, nc *nats.Conn, verb string, req wire.BulkRequest) (count, already, steps int) {
	t.Helper()
	for {
		r, err := api(nc).Bulk(context.Background(), verb, req)
		if err != nil {
			t.Fatalf("BULK.%s step %d: %v", verb, steps+1, err)
		}
		steps++
		count += r.Count
		already += r.Already
		if r.Cursor == "" {
			return count, already, steps
		}
		if !strings.HasPrefix(r.Cursor, "fleet:") || r.Op == "" {
			t.Fatalf("BULK.%s: cursor %q op %q, want a fleet cursor and an op", verb, r.Cursor, r.Op)
		}
		req.Cursor, req.Op = r.Cursor, r.Op
	}
}

// fleetBulk schedules 30 messages on subjects spread over the cells and
// checks BULK through the fleet: a dry run's steps sum to them all, a
// RESCHEDULE whose first step is sent twice shifts each message once,
// and a cursor that is not the fleet's is a 400.
func fleetBulk(t *testing.T, nc *nats.Conn) {
	start := time.Now()
	for i := range 30 {
		fleetSchedule(t, nc, fmt.Sprintf("fleet.bulk.%02d", i), "b")
	}
	limit := 4
	filter := wire.Filter{Subject: "fleet.bulk.>"}
	if n, _, steps := fleetBulkSteps(t, nc, "CANCEL", wire.BulkRequest{Filter: filter, DryRun: true, Limit: &limit}); n != 30 || steps < 3 {
		t.Fatalf("a dry run of CANCEL: %d in %d steps, want 30 in steps of 4 a cell", n, steps)
	}
	req := wire.BulkRequest{Filter: filter, Limit: &limit, Shift: "1h", Op: wire.NewBulkOp()}
	first, err := api(nc).Bulk(context.Background(), "RESCHEDULE", req)
	if err != nil {
		t.Fatal(err)
	}
	n, already, _ := fleetBulkSteps(t, nc, "RESCHEDULE", req)
	if first.Count == 0 || first.Count+n != 30 || already < first.Count {
		t.Fatalf("RESCHEDULE with its first step sent twice: %d moved by the first, %d by the steps sent again, %d already, want 30 in all and the first's met as already", first.Count, n, already)
	}
	window := func(from, to time.Duration) int {
		f := filter
		f.From, f.To = start.Add(from).Format(time.RFC3339), start.Add(to).Format(time.RFC3339)
		n, _, _ := fleetBulkSteps(t, nc, "CANCEL", wire.BulkRequest{Filter: f, DryRun: true})
		return n
	}
	if shifted, twice := window(90*time.Minute, 150*time.Minute), window(150*time.Minute, 5*time.Hour); shifted != 30 || twice != 0 {
		t.Fatalf("after the RESCHEDULE by 1h: %d due in 2h, %d later, want 30 and 0", shifted, twice)
	}
	if _, err := api(nc).Bulk(context.Background(), "CANCEL", wire.BulkRequest{Filter: filter, Cursor: "abc"}); !errors.Is(err, wire.ErrBadRequest) {
		t.Fatalf("BULK.CANCEL with a cursor not the fleet's: %v, want a 400", err)
	}
}

// fleetDead makes n dead letters on subjects prefix.<i>, spread over the
// cells, each refused with +TERM at its first delivery, and returns their
// tags once each cell lists its own.
func fleetDead(t *testing.T, nc *nats.Conn, prefix string, n int) map[string]bool {
	t.Helper()
	sub, err := nc.Subscribe(prefix+".>", func(m *nats.Msg) { _ = m.Respond([]byte("+TERM refused")) })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for i := range n {
		want[schedule(t, nc, newMsg(fmt.Sprintf("%s.%02d", prefix, i), "x")).Tag] = true
	}
	filter := wire.Filter{Subject: prefix + ".>"}
	checkFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		dead := 0
		for _, cell := range fleetCells {
			for _, err := range cellAPI(nc, cell).DeadLetters(context.Background(), wire.DeadListRequest{Filter: filter}) {
				if err != nil {
					return err
				}
				dead++
			}
		}
		if dead != n {
			return fmt.Errorf("%d of %d dead", dead, n)
		}
		return nil
	})
	return want
}

// fleetCLI runs natsdelay's admin commands against the fleet's default
// API prefix, as against one service: limits, pause and resume reach
// every cell, schedules, dead ls and cancel --filter see every cell's.
func fleetCLI(t *testing.T, nc *nats.Conn, bin, url string) {
	run := func(args ...string) string {
		t.Helper()
		code, out := runCLI(t, bin, append(args, "--nats", url)...)
		if code != 0 {
			t.Fatalf("natsdelay %s: exit %d:\n%s", strings.Join(args, " "), code, out)
		}
		return out
	}
	run("limits", "set", "fleet.cli.>", "--max-in-flight", "3")
	run("pause", "fleet.cli.x")
	for _, cell := range fleetCells {
		if ls, err := cellAPI(nc, cell).Limits(context.Background()); err != nil || len(ls) != 2 {
			t.Fatalf("cell %s after limits set and pause: %+v, %v", cell, ls, err)
		}
	}
	if out := run("limits", "ls"); !strings.Contains(out, "fleet.cli.>") || !strings.Contains(out, "fleet.cli.x") {
		t.Fatalf("natsdelay limits ls:\n%s", out)
	}
	run("resume", "fleet.cli.x")
	run("limits", "rm", "fleet.cli.>")
	for _, cell := range fleetCells {
		if ls, err := cellAPI(nc, cell).Limits(context.Background()); err != nil || len(ls) != 0 {
			t.Fatalf("cell %s after resume and limits rm: %+v, %v", cell, ls, err)
		}
	}

	for i := range 6 {
		schedule(t, nc, newMsg(fmt.Sprintf("fleet.clis.%d", i), "tick", wire.HeaderEvery, "1h", wire.HeaderID, "s"))
		fleetSchedule(t, nc, fmt.Sprintf("fleet.clic.%d", i), "c")
	}
	if out := run("schedules", "--all", "--limit", "2"); strings.Count(out, "fleet.clis.") != 6 {
		t.Fatalf("natsdelay schedules --all: want the 6 schedules of every cell:\n%s", out)
	}
	fleetDead(t, nc, "fleet.clid", 6)
	if out := run("dead", "ls", "--filter", "fleet.clid.>"); strings.Count(out, "fleet.clid.") != 6 {
		t.Fatalf("natsdelay dead ls: want the 6 dead letters of every cell:\n%s", out)
	}
	run("cancel", "--filter", "fleet.clic.>", "--yes")
	n, _, _ := fleetBulkSteps(t, nc, "CANCEL", wire.BulkRequest{Filter: wire.Filter{Subject: "fleet.clic.>"}, DryRun: true})
	if n != 0 {
		t.Fatalf("after natsdelay cancel --filter: %d left, want 0", n)
	}
}
