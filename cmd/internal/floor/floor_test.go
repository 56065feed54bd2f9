package floor_test

import (
	"context"
	"encoding/hex"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge/bridgetest"
	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/cmd/internal/floor"
)

// TestServe_DeliversEachOnce_AndForgetsItAtTheACK checks that the floor
// does the work it stands for: every publish is answered with its tag
// and delivered once with that tag and its payload, and with a store,
// every message is gone from it once its ACK is applied.
func TestServe_DeliversEachOnce_AndForgetsItAtTheACK(t *testing.T) {
	for _, store := range []bool{false, true} {
		t.Run("store="+strconv.FormatBool(store), func(t *testing.T) {
			srv := bridgetest.RunServer(t)
			cfg := floor.Config{URL: srv.ClientURL(), Dir: t.TempDir(), Store: store, Ingest: "in", Ack: "ack", Count: "count"}
			ctx, cancel := context.WithCancel(context.Background())
			ready := make(chan struct{})
			served := make(chan error, 1)
			go func() { served <- floor.Serve(ctx, cfg, func() { close(ready) }) }()
			select {
			case <-ready:
			case err := <-served:
				t.Fatalf("Serve returned before it was ready: %v", err)
			}

			nc := bridgetest.Connect(t, srv)
			const n = 200
			var mu sync.Mutex
			seen := map[string]int{}
			all := make(chan struct{})
			sub, err := nc.Subscribe("t.>", func(m *nats.Msg) {
				tag := m.Header.Get(wire.HeaderTag)
				mu.Lock()
				seen[tag]++
				if len(seen) == n && seen[tag] == 1 {
					close(all)
				}
				mu.Unlock()
				if m.Reply != "ack."+tag || len(m.Data) != 3 {
					t.Errorf("delivery with reply %q and %d bytes", m.Reply, len(m.Data))
				}
				_ = m.Respond(nil)
			})
			if err != nil {
				t.Fatal(err)
			}
			_ = sub.SetPendingLimits(-1, -1)
			if err := nc.Flush(); err != nil {
				t.Fatal(err)
			}
			tags := map[string]bool{}
			for i := range n {
				h := nats.Header{}
				h.Set(wire.HeaderAt, time.Now().UTC().Format(time.RFC3339Nano))
				reply, err := nc.RequestMsg(&nats.Msg{Subject: "in.t." + strconv.Itoa(i%7), Header: h, Data: []byte("abc")}, 10*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := hex.DecodeString(string(reply.Data)); err != nil || len(reply.Data) != 48 || tags[string(reply.Data)] {
					t.Fatalf("reply %q: not a new 48-hex tag", reply.Data)
				}
				tags[string(reply.Data)] = true
			}
			select {
			case <-all:
			case <-time.After(30 * time.Second):
				t.Fatalf("%d of %d delivered", len(seen), n)
			}
			deadline := time.Now().Add(30 * time.Second)
			for {
				m, err := nc.Request("count", nil, 5*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				if string(m.Data) == strconv.Itoa(n) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s of %d ACKs applied", m.Data, n)
				}
				time.Sleep(5 * time.Millisecond)
			}
			mu.Lock()
			for tag, c := range seen {
				if c != 1 || !tags[tag] {
					t.Errorf("tag %s delivered %d times, answered %v", tag, c, tags[tag])
				}
			}
			mu.Unlock()
			cancel()
			if err := <-served; err != nil {
				t.Fatal(err)
			}
			if store {
				db, err := pebble.Open(cfg.Dir, &pebble.Options{})
				if err != nil {
					t.Fatal(err)
				}
				defer db.Close()
				it, err := db.NewIter(nil)
				if err != nil {
					t.Fatal(err)
				}
				defer it.Close()
				if it.First() {
					t.Errorf("store holds %x after every ACK", it.Key())
				}
			}
		})
	}
}
