package bridge_test

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge"
	"github.com/natsdelay/natsdelay/bridge/bridgetest"
	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/delaystore/pebblestore"
)

// TestClose_EveryStoredMessageAnswered checks that a clean Close, with the
// connection up, leaves nothing stored unanswered: requesters schedule
// without pause while the Service closes under them, and the messages in
// the store afterwards are exactly those whose publishers were answered
// OK. An answer the writer handed over and Close dropped would leave a
// message stored whose publisher timed out.
func TestClose_EveryStoredMessageAnswered(t *testing.T) {
	srv := bridgetest.RunServer(t)
	dir := t.TempDir()
	st, err := pebblestore.Open(pebblestore.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	svc := bridgetest.Start(t, srv, st, nil)
	nc := bridgetest.Connect(t, srv)

	const requesters, closeAfter = 32, 300
	var ok, unanswered atomic.Int64
	enough := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	for r := range requesters {
		wg.Go(func() {
			for i := 0; ; i++ {
				m := &nats.Msg{Subject: fmt.Sprintf("delay.close.%d.%d", r, i), Header: nats.Header{wire.HeaderDelay: []string{"1h"}}}
				rep, err := nc.RequestMsg(m, 5*time.Second)
				if errors.Is(err, nats.ErrTimeout) {
					unanswered.Add(1)
				}
				if err != nil || rep.Header.Get(wire.HeaderServiceError) != "" {
					return // closed: no responders, or a 503
				}
				if ok.Add(1) == closeAfter {
					once.Do(func() { close(enough) })
				}
			}
		})
	}
	<-enough
	if err := svc.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()

	if n := unanswered.Load(); n != 0 {
		t.Errorf("%d requests were never answered", n)
	}
	st, err = pebblestore.Open(pebblestore.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	again := bridgetest.Start(t, srv, st, nil)
	if got, want := bridge.Pending(again), uint64(ok.Load()); got != want {
		t.Fatalf("%d messages stored, but %d publishers answered OK", got, want)
	}
}
