package integration_test

import (
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge/wire"
)

// TestBulk_Cancel_SIGKILLMidway_ResumesExactly runs the real binary,
// schedules 100,000 messages across 1,000 subjects to cancel and others
// beside them, and cancels the 100,000 with BULK.CANCEL in bounded steps.
// Midway it sends a step and SIGKILLs the process while the step runs,
// restarts it on the same data dir and resumes from the cursor of the
// last step answered. It checks that exactly the others are left
// pending: a step's answer means its deletes are durable, and a cursor is
// a position in the store that the restarted process resumes from.
func TestBulk_Cancel_SIGKILLMidway_ResumesExactly(t *testing.T) {
	t.Parallel()
	subjects, perSubject := 1000, 20
	if testing.Short() {
		perSubject = 10
	}
	if os.Getenv("NATSDELAY_SOAK") != "" {
		perSubject = 1000
	}
	srv := startServer(t)
	bin := natsdelayBinary(t)
	dir := t.TempDir()
	p := startProcess(t, bin, srv.ClientURL(), dir)
	t.Cleanup(func() { p.kill(t) })
	nc := connect(t, srv)

	// To cancel: each subject's messages an hour out. Left: one per
	// subject three hours out (after the filter's "to"), and a subject
	// outside the filter.
	start := time.Now()
	var batch []*nats.Msg
	flush := func() {
		scheduleMany(t, nc, batch)
		batch = batch[:0]
	}
	for s := range subjects {
		for i := range perSubject {
			batch = append(batch, newMsg(fmt.Sprintf("bulkc.s%d", s), "x", "Delay", "1h", "Delay-Id", fmt.Sprint(i)))
		}
		batch = append(batch, newMsg(fmt.Sprintf("bulkc.s%d", s), "keep", "Delay", "3h"))
		if len(batch) >= 5000 {
			flush()
		}
	}
	for i := range 100 {
		batch = append(batch, newMsg("bulkk.x", "keep", "Delay", "1h", "Delay-Id", fmt.Sprint(i)))
	}
	flush()
	toCancel, others := subjects*perSubject, subjects+100
	if n := info(t, nc).Counts.Pending; n != uint64(toCancel+others) {
		t.Fatalf("pending %d after scheduling, want %d", n, toCancel+others)
	}
	t.Logf("scheduled %d in %v", toCancel+others, time.Since(start))

	const limit = 2000
	req := wire.BulkRequest{Filter: wire.Filter{Subject: "bulkc.>", To: time.Now().Add(2 * time.Hour).UTC().Format(time.RFC3339)}}
	req.Limit = new(int)
	*req.Limit = limit
	step := func() wire.BulkReply {
		t.Helper()
		var rep wire.BulkReply
		apiCall(t, nc, wire.VerbBulk+".CANCEL", req, &rep)
		return rep
	}
	start = time.Now()
	canceled, steps := 0, 0
	for canceled < toCancel/2 {
		rep := step()
		canceled, steps = canceled+rep.Count, steps+1
		if rep.Cursor == "" || rep.Count > limit {
			t.Fatalf("step %d: count %d, cursor %q, before half", steps, rep.Count, rep.Cursor)
		}
		req.Cursor = rep.Cursor
	}
	// A step under way when the process dies: its answer never comes.
	body, _ := json.Marshal(req)
	if err := nc.PublishRequest(wire.DefaultAPIPrefix+"."+wire.VerbBulk+".CANCEL", nats.NewInbox(), body); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	p.kill(t)
	p = startProcess(t, bin, srv.ClientURL(), dir)
	for {
		rep := step()
		canceled, steps = canceled+rep.Count, steps+1
		if rep.Cursor == "" {
			break
		}
		if steps > 2*toCancel/limit+10 {
			t.Fatalf("%d steps and not done", steps)
		}
		req.Cursor = rep.Cursor
	}
	t.Logf("canceled %d counted (the killed step's are not) in %d steps, %v", canceled, steps, time.Since(start))
	if n := info(t, nc).Counts.Pending; n != uint64(others) {
		t.Fatalf("pending %d after the bulk cancel, want exactly the %d others", n, others)
	}
	var subj wire.SubjectsReply
	limit1000 := 1000
	apiCall(t, nc, wire.VerbSubjects, wire.SubjectsRequest{Filter: "bulkc.>", Limit: &limit1000}, &subj)
	for _, s := range subj.Subjects {
		if s.Pending != 1 {
			t.Fatalf("%s has %d pending, want its one kept", s.Subject, s.Pending)
		}
	}
	if len(subj.Subjects) != subjects {
		t.Fatalf("%d subjects left, want %d", len(subj.Subjects), subjects)
	}
	p.stop(t)
}
