package client_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/natsdelay/natsdelay/bridge/bridgetest"
	"github.com/natsdelay/natsdelay/bridge/client"
	"github.com/natsdelay/natsdelay/delaystore"
)

// heldStore holds the commit of each batch while held is set, telling
// entered once per held commit, so a test can make a request time out
// after the service took it and before it answers.
type heldStore struct {
	delaystore.Store
	mu      sync.Mutex
	held    bool
	release chan struct{}
	entered chan struct{}
}

func (s *heldStore) NewBatch() delaystore.Batch { return &heldBatch{Batch: s.Store.NewBatch(), s: s} }

type heldBatch struct {
	delaystore.Batch
	s *heldStore
}

func (b *heldBatch) Commit(sync delaystore.SyncMode) error {
	b.s.mu.Lock()
	held := b.s.held
	b.s.mu.Unlock()
	if held {
		b.s.entered <- struct{}{}
		<-b.s.release
	}
	return b.Batch.Commit(sync)
}

// A Schedule with WithRetry whose first try timed out while the service
// was committing it sends the message again; the service answers the
// resend with the first reply, marked as a duplicate, and the message is
// delivered once, though the first copy may be delivered before the
// resend arrives (no delay).
func TestSchedule_RetryAfterTimeout_DeliveredOnce(t *testing.T) {
	srv := bridgetest.RunServer(t)
	nc := bridgetest.Connect(t, srv)
	st := &heldStore{Store: bridgetest.MemStore(t), release: make(chan struct{}), entered: make(chan struct{}, 1)}
	bridgetest.Start(t, srv, st, nil)
	got := make(chan client.Delivery, 16)
	sub, err := client.Subscribe(nc, "jobs.pay", func(d client.Delivery) {
		got <- d
		_ = d.Ack()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	st.mu.Lock()
	st.held = true
	st.mu.Unlock()
	before := inMsgs(t, srv)
	c := mustClient(t, nc, client.WithTimeout(time.Second), client.WithRetry(3, time.Millisecond))
	done := make(chan *client.Scheduled, 1)
	go func() {
		s, err := c.Schedule(context.Background(), client.Message{Subject: "jobs.pay", ID: "pay-1", Data: []byte("10")})
		if err != nil {
			t.Error(err)
		}
		done <- s
	}()
	<-st.entered // the first try is being committed
	// The second try reached the server: the first timed out.
	waitFor(t, "the retry", func() bool { return inMsgs(t, srv) >= before+2 })
	st.mu.Lock()
	st.held = false
	st.mu.Unlock()
	close(st.release)
	s := <-done
	if s == nil {
		t.FailNow()
	}
	if !s.Duplicate {
		t.Fatalf("retry answered %+v, want the first reply marked as a duplicate", s)
	}
	if _, err := c.Schedule(context.Background(), client.Message{Subject: "jobs.pay", ID: "marker"}); err != nil {
		t.Fatal(err)
	}
	// Deliveries of a subject go in order: a second copy would come
	// before the marker.
	var ids []string
	for len(ids) == 0 || ids[len(ids)-1] != "marker" {
		select {
		case d := <-got:
			ids = append(ids, d.ID())
		case <-time.After(10 * time.Second):
			t.Fatalf("delivered %v, and no marker within 10s", ids)
		}
	}
	if len(ids) != 2 || ids[0] != "pay-1" {
		t.Fatalf("delivered %v, want pay-1 once, then the marker", ids)
	}
}
