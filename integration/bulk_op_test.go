package integration_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge/wire"
)

// TestBulk_Op_SentTwiceFromTheStart_MovesOnce checks that a BULK
// RESCHEDULE by "shift" sent again from the start with the op of the
// first (a client that never got the first reply) moves nothing twice and
// counts what the first moved as "already", that a FIRE sent twice fires
// each once, that the reply names the op, and that a step without an op
// is answered with the op the service chose, which its cursor carries.
func TestBulk_Op_SentTwiceFromTheStart_MovesOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	at := time.Now().Add(time.Hour).Truncate(time.Second)
	var msgs []*nats.Msg
	for i := range 30 {
		msgs = append(msgs, newMsg(fmt.Sprintf("bulkop.s%d", i%3), "x", "Delay-At", at.UTC().Format(time.RFC3339)))
	}
	scheduleMany(t, h.nc, msgs)
	req := wire.BulkRequest{Filter: wire.Filter{Subject: "bulkop.>"}, Shift: "10m", Op: "shift-once"}
	var first, again wire.BulkReply
	apiCall(t, h.nc, wire.VerbBulk+".RESCHEDULE", req, &first)
	apiCall(t, h.nc, wire.VerbBulk+".RESCHEDULE", req, &again)
	if first.Count != 30 || first.Op != "shift-once" || again.Count != 0 || again.Already != 30 {
		t.Fatalf("first step %+v, sent again %+v; want 30 moved, then none and 30 already", first, again)
	}
	dry := wire.BulkRequest{DryRun: true, Filter: wire.Filter{Subject: "bulkop.>",
		From: at.Add(10 * time.Minute).UTC().Format(time.RFC3339), To: at.Add(11 * time.Minute).UTC().Format(time.RFC3339)}}
	if n, _, _ := bulkRun(t, h.nc, "CANCEL", dry, 1000); n != 30 {
		t.Fatalf("%d of 30 due 10 minutes later", n)
	}

	one := 10
	var step wire.BulkReply
	apiCall(t, h.nc, wire.VerbBulk+".RESCHEDULE", wire.BulkRequest{Filter: wire.Filter{Subject: "bulkop.>"}, Shift: "1m", Limit: &one}, &step)
	if step.Op == "" || step.Cursor == "" {
		t.Fatalf("a step without op: %+v; want the op the service chose, and a cursor", step)
	}
	var next wire.BulkReply
	apiCall(t, h.nc, wire.VerbBulk+".RESCHEDULE", wire.BulkRequest{Filter: wire.Filter{Subject: "bulkop.>"}, Shift: "1m", Cursor: step.Cursor, Limit: &one}, &next)
	if next.Op != step.Op {
		t.Fatalf("the next step by cursor is of operation %q, want %q", next.Op, step.Op)
	}

	fire := wire.BulkRequest{Filter: wire.Filter{Subject: "bulkop.>"}, Op: "fire-once"}
	var fired, firedAgain wire.BulkReply
	apiCall(t, h.nc, wire.VerbBulk+".FIRE", fire, &fired)
	apiCall(t, h.nc, wire.VerbBulk+".FIRE", fire, &firedAgain)
	if fired.Count+fired.Skipped != 30 || firedAgain.Count != 0 {
		t.Fatalf("fired %+v, then sent again %+v; want 30, then none", fired, firedAgain)
	}
}

// TestBulk_Op_Bad_400ChangesNothing checks that an op that is not an
// operation id, or not the operation of the cursor sent with it, is a 400
// that says what is accepted, and changes nothing.
func TestBulk_Op_Bad_400ChangesNothing(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	var msgs []*nats.Msg
	for i := range 4 {
		msgs = append(msgs, newMsg("bulkbad.a", fmt.Sprint(i), "Delay", "1h"))
	}
	scheduleMany(t, h.nc, msgs)
	shift := func(op, cursor string) wire.BulkRequest {
		one := 1
		return wire.BulkRequest{Filter: wire.Filter{Subject: "bulkbad.a"}, Shift: "10m", Op: op, Cursor: cursor, Limit: &one}
	}
	for _, op := range []string{"a b", "tag.dots", strings.Repeat("x", wire.MaxBulkOpLen+1), "é"} {
		apiError(t, h.nc, wire.VerbBulk+".RESCHEDULE", shift(op, ""), 400, `want 1 to 64 letters, digits, '-' and '_'`)
	}
	var step wire.BulkReply
	apiCall(t, h.nc, wire.VerbBulk+".RESCHEDULE", shift("op-a", ""), &step)
	apiError(t, h.nc, wire.VerbBulk+".RESCHEDULE", shift("op-b", step.Cursor), 400, `the "cursor" is of operation "op-a"`)
	dry := wire.BulkRequest{DryRun: true, Filter: wire.Filter{Subject: "bulkbad.a"}, Op: "op-a", Shift: "10m"}
	if n, _, _ := bulkRun(t, h.nc, "RESCHEDULE", dry, 100); n != 3 {
		t.Fatalf("op-a would move %d more, want the 3 it has not moved: the bad requests changed something", n)
	}
}
