package fleet_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/natsdelay/natsdelay/bridge/fleet"
	"github.com/natsdelay/natsdelay/bridge/wire"
)

// fakeService is a cell's service that serves always and tells what it
// was handed to schedule.
type fakeService struct {
	got chan string
}

func newFakeService() *fakeService { return &fakeService{got: make(chan string, 16)} }

func (f *fakeService) Ingest(req micro.Request) {
	f.got <- req.Subject()
	_ = req.Respond([]byte(`{"tag":"t"}`))
}
func (f *fakeService) Leader() bool                  { return true }
func (f *fakeService) Leads() bool                   { return true }
func (f *fakeService) Info() (wire.InfoReply, error) { return wire.InfoReply{}, nil }

func startNode(t *testing.T, nc *nats.Conn, svc fleet.Service, rec fleet.Record) *fleet.Node {
	t.Helper()
	n, err := fleet.New(nc, svc, rec, fleet.Config{Cell: rec.Cell, Heartbeat: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Error(err)
		}
	})
	return n
}

func received(t *testing.T, ch <-chan string, what string) string {
	t.Helper()
	select {
	case s := <-ch:
		return s
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		return ""
	}
}

// TestNode_Join_OwnsNothingAndForwards checks that a cell joining a
// fleet owns no partition, takes the fleet's number of partitions, and
// sends a publish it takes to the owner, whose service gets it under its
// own ingest prefix with the publisher's reply.
func TestNode_Join_OwnsNothingAndForwards(t *testing.T) {
	nc := startNATS(t)
	a := newFakeService()
	startNode(t, nc, a, fleet.Record{Cell: "a", Partitions: 16, Epoch: 1, Owned: []fleet.Range{{From: 0, To: 15}}})
	rec, err := fleet.Prepare(nc, fleet.Config{Cell: "b", JoinWait: 300 * time.Millisecond})
	if err != nil || rec.Partitions != 16 || len(rec.Owned) != 0 || rec.Epoch != 1 {
		t.Fatalf("joining cell: %+v, %v", rec, err)
	}
	// Only b routes: a's node is the one subscribed to a's FWD subject
	// too, so the request reaches a whichever node takes it.
	startNode(t, nc, newFakeService(), rec)
	r, err := nc.Request("delay.orders.1", []byte("x"), 10*time.Second)
	if err != nil || string(r.Data) != `{"tag":"t"}` {
		t.Fatalf("publish: %v, %v", r, err)
	}
	if got := received(t, a.got, "the owner's ingest"); got != "$DELAY.CELL.a.IN.orders.1" {
		t.Fatalf("owner got %q", got)
	}
}

// TestNode_StaleNotice_RoutesToTheNewOwner plays an old owner, cell old,
// that claims every partition at epoch 1: node b forwards to it; then
// cell a takes every partition at epoch 2, and old tells b that its map
// is stale. b must count the notice and route to a from then on.
func TestNode_StaleNotice_RoutesToTheNewOwner(t *testing.T) {
	nc := startNATS(t)
	fwd := make(chan *nats.Msg, 16)
	sub, err := nc.ChanSubscribe(fleet.CellPrefix+".old.FWD.>", fwd)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	old := fleet.Status{Record: fleet.Record{Cell: "old", Partitions: 16, Epoch: 1, Owned: []fleet.Range{{From: 0, To: 15}}}, Node: "old"}
	stop := heartbeat(t, nc, old)
	b := startNode(t, nc, newFakeService(), fleet.Record{Cell: "b", Partitions: 16, Epoch: 1})
	var m *nats.Msg
	for m == nil { // until b has heard old
		if err := nc.PublishRequest("delay.orders.1", "_INBOX.none", nil); err != nil {
			t.Fatal(err)
		}
		select {
		case m = <-fwd:
		case <-time.After(50 * time.Millisecond):
		}
	}
	from, _, _ := strings.Cut(strings.TrimPrefix(m.Subject, fleet.CellPrefix+".old.FWD."), ".")
	a := newFakeService()
	startNode(t, nc, a, fleet.Record{Cell: "a", Partitions: 16, Epoch: 2, Owned: []fleet.Range{{From: 0, To: 15}}})
	stop()
	old.Epoch, old.Owned = 2, nil
	body, _ := json.Marshal(old)
	if err := nc.Publish(fleet.StalePrefix+"."+from, body); err != nil {
		t.Fatal(err)
	}
	for b.StaleNotices() == 0 {
		time.Sleep(time.Millisecond)
	}
	// b may still be routing from a map that has not heard a yet: a
	// request that reached old is not answered; send until a takes one.
	for {
		if _, err := nc.Request("delay.orders.1", nil, 200*time.Millisecond); err == nil {
			break
		}
	}
	if got := received(t, a.got, "the new owner's ingest"); got != "$DELAY.CELL.a.IN.orders.1" {
		t.Fatalf("new owner got %q", got)
	}
}

// heartbeat tells the fleet st every 20ms until the returned stop.
func heartbeat(t *testing.T, nc *nats.Conn, st fleet.Status) (stop func()) {
	t.Helper()
	body, _ := json.Marshal(st)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			_ = nc.Publish(fleet.AliveSubject, body)
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { close(done); wg.Wait() }) }
	t.Cleanup(stop)
	return stop
}

// TestNode_ScheduleVerbs_RouteToTheOwner checks that the verbs that act on
// one recurring schedule, named by subject and id or by tag, reach the API
// of the cell that owns its subject's partition with the requester's reply
// subject, as GET does, rather than being refused as verbs of one cell.
func TestNode_ScheduleVerbs_RouteToTheOwner(t *testing.T) {
	nc := startNATS(t)
	_, _, api := fleet.CellSubjects("a")
	sub, err := nc.Subscribe(api+".>", func(m *nats.Msg) {
		_ = m.Respond([]byte(`{"cell":"a","verb":"` + strings.TrimPrefix(m.Subject, api+".") + `"}`))
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	a := fleet.Status{Record: fleet.Record{Cell: "a", Partitions: 16, Epoch: 1, Owned: []fleet.Range{{From: 0, To: 15}}}, Node: "a"}
	stop := heartbeat(t, nc, a)
	defer stop()
	startNode(t, nc, newFakeService(), fleet.Record{Cell: "b", Partitions: 16, Epoch: 1})
	for _, verb := range []string{wire.VerbGet, wire.VerbSchedulePause, wire.VerbScheduleResume,
		wire.VerbScheduleTrigger, wire.VerbScheduleEdit, wire.VerbScheduleSkip} {
		want := `{"cell":"a","verb":"` + verb + `"}`
		var got string
		// Until b serves the fleet's API (no responders) and has heard a
		// (before, the partition's owner is unknown: 503).
		for {
			r, err := nc.Request(wire.DefaultAPIPrefix+"."+verb, []byte(`{"subject":"orders.1","id":"nightly"}`), 10*time.Second)
			if errors.Is(err, nats.ErrNoResponders) {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			if err != nil {
				t.Fatalf("%s: %v", verb, err)
			}
			if got = string(r.Data); r.Header.Get(wire.HeaderServiceErrorCode) != "503" {
				break
			}
		}
		if got != want {
			t.Errorf("%s through the fleet: answered %q, want the owner's %q", verb, got, want)
		}
	}
}

// TestNode_Info_ACellsFailingStorage_IsTheFleets checks that INFO through
// the fleet does not report storage "ok" while one cell's store is
// failing: the fleet's storage names that cell and keeps the "failing: "
// prefix a client checks, and each cell's entry carries its own storage
// and version. Cell b's API is played here, answering that its store is
// failing, whichever cell answers first.
func TestNode_Info_ACellsFailingStorage_IsTheFleets(t *testing.T) {
	nc := startNATS(t)
	answer := func(cell, storage, version string) {
		_, _, api := fleet.CellSubjects(cell)
		body, _ := json.Marshal(wire.InfoReply{Version: version, Engine: "pebble", Storage: storage, Counts: wire.Counts{Pending: 2}})
		sub, err := nc.Subscribe(api+"."+wire.VerbInfo, func(m *nats.Msg) { _ = m.Respond(body) })
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	answer("a", "ok", "1.1.0")
	answer("b", "failing: disk full", "1.0.0")
	b := fleet.Status{Record: fleet.Record{Cell: "b", Partitions: 16, Epoch: 1, Owned: []fleet.Range{{From: 8, To: 15}}}, Node: "b"}
	heartbeat(t, nc, b)
	startNode(t, nc, newFakeService(), fleet.Record{Cell: "a", Partitions: 16, Epoch: 1, Owned: []fleet.Range{{From: 0, To: 7}}})
	var info fleet.Info
	for len(info.Fleet.Cells) < 2 { // until a serves the API and has heard b
		r, err := nc.Request(wire.DefaultAPIPrefix+"."+wire.VerbInfo, nil, 10*time.Second)
		if errors.Is(err, nats.ErrNoResponders) {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		info = fleet.Info{}
		if err := json.Unmarshal(r.Data, &info); err != nil {
			t.Fatal(err)
		}
	}
	if want := `failing: cell "b": disk full`; info.Storage != want {
		t.Errorf("fleet storage %q, want %q", info.Storage, want)
	}
	if info.Counts.Pending != 4 {
		t.Errorf("fleet pending %d, want both cells' 4", info.Counts.Pending)
	}
	got := fmt.Sprintf("%s %s %s; %s %s %s", info.Fleet.Cells[0].Cell, info.Fleet.Cells[0].Storage, info.Fleet.Cells[0].Version,
		info.Fleet.Cells[1].Cell, info.Fleet.Cells[1].Storage, info.Fleet.Cells[1].Version)
	if want := "a ok 1.1.0; b failing: disk full 1.0.0"; got != want {
		t.Errorf("cells %q, want %q", got, want)
	}
}
