package integration_test

import (
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"

	"natsdelay/bridge/bridgetest"
	"natsdelay/bridge/wire"
	"natsdelay/delaystore/pebblestore"
	"natsdelay/keys"
)

// TestBulk_StepEndingWithASubject_NextSubjectWhole checks, through the real
// service (real NATS, a store on disk, API requests), a bulk step over a
// wildcard with a header filter that stops on the entries it may read
// (10,000) exactly where one subject ends: the next step must read the
// next subject from its first message, also when that subject's key range
// (its topic hash) lies before the one the step ended in. A dry run and a
// real CANCEL in steps of 10,000 each count every matching message, and
// none is left pending.
func TestBulk_StepEndingWithASubject_NextSubjectWhole(t *testing.T) {
	t.Parallel()
	st := openPebble(t, pebblestore.Config{Dir: t.TempDir()})
	bh := bridgetest.NewOn(t, st, nil)
	nc := bh.Conn
	const first, perFirst, perNext = "b3c.a", 10_000, 10
	// The next subject in the registry's (subject) order whose messages'
	// keys lie before the first subject's.
	next := ""
	for i := 0; next == ""; i++ {
		if s := fmt.Sprintf("b3c.b%d", i); keys.TopicHash(s) < keys.TopicHash(first) {
			next = s
		}
	}
	var msgs []*nats.Msg
	for i := range perFirst {
		// Half of the first subject is acme's: the step reads all of it
		// and selects fewer than its limit.
		msgs = append(msgs, newMsg(first, "x", "Delay", "1h", "Tenant", []string{"acme", "globex"}[i%2]))
	}
	for range perNext {
		msgs = append(msgs, newMsg(next, "x", "Delay", "1h", "Tenant", "acme"))
	}
	scheduleMany(t, nc, msgs)

	req := wire.BulkRequest{Filter: wire.Filter{Subject: "b3c.>", Headers: map[string]string{"Tenant": "acme"}}, DryRun: true}
	want := perFirst/2 + perNext
	if n, _, _ := bulkRun(t, nc, "CANCEL", req, 10_000); n != want {
		t.Errorf("dry run counted %d, want %d", n, want)
	}
	req.DryRun = false
	if n, _, _ := bulkRun(t, nc, "CANCEL", req, 10_000); n != want {
		t.Errorf("CANCEL counted %d, want %d", n, want)
	}
	if p := pendingFor(t, nc, next); p != 0 {
		t.Errorf("%s has %d messages pending after CANCEL, want 0", next, p)
	}
	if p := pendingFor(t, nc, first); p != perFirst/2 {
		t.Errorf("%s has %d messages pending after CANCEL, want its %d of globex", first, p, perFirst/2)
	}
}
