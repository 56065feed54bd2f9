package integration_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge"
	"github.com/natsdelay/natsdelay/bridge/bridgetest"
	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/delaystore/pebblestore"
	"github.com/natsdelay/natsdelay/keys"
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

// TestEvents_BulkCancel_TellsEachCanceled checks, through the real service
// with --events (real NATS, a store on disk, API requests), that a bulk
// CANCEL tells each message it removed as one canceled event, as the
// single CANCEL does, with the message's tag, id, subject and fire time,
// and a bulk RESCHEDULE each message it moved as one rescheduled event.
// A single CANCEL after them is a marker: events are told in order, so
// every event of the bulk steps came before its own.
func TestEvents_BulkCancel_TellsEachCanceled(t *testing.T) {
	t.Parallel()
	h := newEventHarness(t, nil)
	const n = 30
	var msgs []*nats.Msg
	for i := range 2 * n {
		verb := []string{"cancel", "move"}[i%2]
		msgs = append(msgs, newMsg(fmt.Sprintf("evb.%s.%d", verb, i%3), "x", "Delay", "1h", "Delay-Id", fmt.Sprintf("%s-%d", verb, i)))
	}
	byID := map[string]scheduled{}
	for i, s := range scheduleMany(t, h.nc, msgs) {
		byID[msgs[i].Header.Get("Delay-Id")] = s
	}
	if c, _, _ := bulkRun(t, h.nc, "CANCEL", wire.BulkRequest{Filter: wire.Filter{Subject: "evb.cancel.>"}}, 7); c != n {
		t.Fatalf("BULK.CANCEL canceled %d, want %d", c, n)
	}
	if c, _, _ := bulkRun(t, h.nc, "RESCHEDULE", wire.BulkRequest{Filter: wire.Filter{Subject: "evb.move.>"}, Shift: "1m"}, 7); c != n {
		t.Fatalf("BULK.RESCHEDULE moved %d, want %d", c, n)
	}
	marker := schedule(t, h.nc, newMsg("evb.marker", "x", "Delay", "1h"))
	cancelTag(t, h.nc, marker.Tag)

	told := map[string]int{}
	for {
		r := next(t, h.events, fmt.Sprintf("events (told %d)", len(told)))
		var e wire.Event
		if err := json.Unmarshal(r.Data, &e); err != nil {
			t.Fatalf("event %s: %v", r.Data, err)
		}
		if e.Kind == wire.EventCanceled && e.Tag == marker.Tag {
			break
		}
		if e.Kind == wire.EventScheduled {
			continue
		}
		// The message the event is about, by its id; a moved message has
		// a new tag, and its previous fire time is its first.
		s, ok := byID[e.ID]
		switch {
		case !ok || e.Subject != s.Subject:
			ok = false
		case e.Kind == wire.EventCanceled:
			ok = strings.HasPrefix(e.ID, "cancel-") && e.Tag == s.Tag && e.FireAt == s.FireAtRaw
		case e.Kind == wire.EventRescheduled:
			ok = strings.HasPrefix(e.ID, "move-") && e.PreviousFireAt == s.FireAtRaw
		}
		if !ok {
			t.Fatalf("event %s on %s: not of a message the bulk steps changed as told", r.Data, r.Subject)
		}
		told[e.Kind+" "+e.ID]++
	}
	for i := range 2 * n {
		verb, kind := []string{"cancel", "move"}[i%2], []string{wire.EventCanceled, wire.EventRescheduled}[i%2]
		if c := told[kind+" "+fmt.Sprintf("%s-%d", verb, i)]; c != 1 {
			t.Errorf("%s-%d: told %d %s events, want 1 (told %d in all)", verb, i, c, kind, len(told))
		}
	}
}

// readFaults is a store whose point reads of the keys a committed batch
// deleted fail while it is on, as reads fail on a failing disk: a read
// that fails after the write it follows.
type readFaults struct {
	delaystore.Store
	on      atomic.Bool
	failed  atomic.Int64
	mu      sync.Mutex
	deleted map[string]bool
}

var errReadFault = errors.New("injected read fault")

func (s *readFaults) Get(key []byte) ([]byte, error) {
	if s.on.Load() {
		s.mu.Lock()
		gone := s.deleted[string(key)]
		s.mu.Unlock()
		if gone {
			s.failed.Add(1)
			return nil, errReadFault
		}
	}
	return s.Store.Get(key)
}

func (s *readFaults) NewBatch() delaystore.Batch {
	return &faultBatch{Batch: s.Store.NewBatch(), s: s}
}

// faultBatch records the keys its commit deletes in its readFaults.
type faultBatch struct {
	delaystore.Batch
	s       *readFaults
	deletes []string
}

func (b *faultBatch) Delete(key []byte) error {
	b.deletes = append(b.deletes, string(key))
	return b.Batch.Delete(key)
}

func (b *faultBatch) SingleDelete(key []byte) error {
	b.deletes = append(b.deletes, string(key))
	return b.Batch.SingleDelete(key)
}

func (b *faultBatch) Commit(sync delaystore.SyncMode) error {
	if err := b.Batch.Commit(sync); err != nil {
		return err
	}
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	for _, k := range b.deletes {
		b.s.deleted[k] = true
	}
	return nil
}

// TestBulk_ReadFailsAfterDelete_StepFails checks, through the real service
// (real NATS, a store on disk whose reads of deleted keys fail on demand),
// that a bulk step counts a message as canceled, or a dead letter as
// deleted, only when a read finds it gone: a read that fails says nothing,
// and the step answers 503 rather than a count it cannot know.
func TestBulk_ReadFailsAfterDelete_StepFails(t *testing.T) {
	t.Parallel()
	st := &readFaults{Store: openPebble(t, pebblestore.Config{Dir: t.TempDir()}), deleted: map[string]bool{}}
	bh := bridgetest.NewOn(t, st, func(c *bridge.Config) { c.Delivery.AckWait = time.Minute })
	nc := bh.Conn
	deliveries := subscribe(t, nc, "rf.dead")
	var msgs []*nats.Msg
	for range 4 {
		msgs = append(msgs, newMsg("rf.cancel", "x", "Delay", "1h"), newMsg("rf.dead", "x"))
	}
	scheduleMany(t, nc, msgs)
	for range 4 {
		ackSync(t, nc, next(t, deliveries, "delivery to TERM").Msg, "+TERM")
	}
	checkFor(t, wait, 10*time.Millisecond, func() error {
		if n := info(t, nc).Counts.Dead; n != 4 {
			return fmt.Errorf("INFO dead = %d, want 4", n)
		}
		return nil
	})

	for _, c := range []struct{ verb, subject string }{{"CANCEL", "rf.cancel"}, {"DELETE", "rf.dead"}} {
		st.on.Store(true)
		failed := st.failed.Load()
		rep, err := api(nc).Request(context.Background(), wire.VerbBulk+"."+c.verb, wire.BulkRequest{Filter: wire.Filter{Subject: c.subject}})
		st.on.Store(false)
		if st.failed.Load() == failed {
			t.Fatalf("BULK.%s: no read failed", c.verb)
		}
		if !errors.Is(err, wire.ErrUnavailable) {
			t.Errorf("BULK.%s with its reads failing answered %s, %v; want a 503", c.verb, rep, err)
		}
	}
}
