package bridge_test

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge"
	"github.com/natsdelay/natsdelay/bridge/bridgetest"
	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/delaystore/pebblestore"
)

// benchService runs a server and a service on a Pebble store on disk, so
// ingest pays for a real fsync.
func benchService(b *testing.B, mod func(*bridge.Config)) (*bridge.Service, string) {
	b.Helper()
	srv := bridgetest.RunServer(b)
	st, err := pebblestore.Open(pebblestore.Config{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	return bridgetest.Start(b, srv, st, mod), srv.ClientURL()
}

// requestLoop sends n requests of payload to subject from 64 concurrent
// requesters over their own connections and returns messages per second.
func requestLoop(b *testing.B, url, subject string, hdr nats.Header, n int) float64 {
	const requesters = 64
	payload := make([]byte, 256)
	conns := make([]*nats.Conn, 8)
	for i := range conns {
		nc, err := nats.Connect(url)
		if err != nil {
			b.Fatal(err)
		}
		defer nc.Close()
		conns[i] = nc
	}
	var next atomic.Int64
	var failed atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for r := range requesters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nc := conns[r%len(conns)]
			for next.Add(1) <= int64(n) {
				m := &nats.Msg{Subject: subject, Header: hdr, Data: payload}
				rep, err := nc.RequestMsg(m, 10*time.Second)
				if err != nil || rep.Header.Get(wire.HeaderServiceError) != "" {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if f := failed.Load(); f > 0 {
		b.Fatalf("%d of %d requests failed", f, n)
	}
	return float64(n) / time.Since(start).Seconds()
}

// BenchmarkIngest measures acknowledged scheduling (each reply sent after
// fsync) with 64 concurrent requesters, next to plain request/reply to a
// trivial responder on the same server in the same run.
func BenchmarkIngest(b *testing.B) {
	_, url := benchService(b, nil)
	responder, err := nats.Connect(url)
	if err != nil {
		b.Fatal(err)
	}
	defer responder.Close()
	sub, err := responder.Subscribe("echo", func(m *nats.Msg) { _ = m.Respond([]byte("ok")) })
	if err != nil {
		b.Fatal(err)
	}
	defer sub.Unsubscribe()
	_ = responder.Flush()
	hdr := nats.Header{wire.HeaderDelay: []string{"1h"}}
	const n = 20000
	var base, ingest, baseCPU, ingestCPU float64
	for b.Loop() {
		start := processCPU(b)
		base = requestLoop(b, url, "echo", nil, n)
		mid := processCPU(b)
		ingest = requestLoop(b, url, "delay.bench.ingest", hdr, n)
		baseCPU, ingestCPU = (mid-start)/n, (processCPU(b)-mid)/n
	}
	b.ReportMetric(base, "baseline-msgs/s")
	b.ReportMetric(ingest, "msgs/s")
	b.ReportMetric(ingest/base, "ratio")
	b.ReportMetric(baseCPU, "baseline-cpu-us/msg")
	b.ReportMetric(ingestCPU, "cpu-us/msg")
}

// processCPU is the CPU time, user and system, the process has used so
// far, in microseconds: the embedded server's, the requesters' and the
// service's, all in this process.
func processCPU(b *testing.B) float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e3
}

// BenchmarkFireLateness schedules 20,000 messages due within 2 seconds and
// reports how late they were delivered (delivery time minus fire time) and
// how many were early (which must be zero).
func BenchmarkFireLateness(b *testing.B) {
	const n = 20000
	window := 2 * time.Second
	for b.Loop() {
		_, url := benchService(b, nil)
		p50, p99, pmax, early := fireLateness(b, url, n, window)
		b.ReportMetric(float64(p50.Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(p99.Microseconds())/1000, "p99-ms")
		b.ReportMetric(float64(pmax.Microseconds())/1000, "max-ms")
		b.ReportMetric(float64(early), "early")
	}
}

func fireLateness(b *testing.B, url string, n int, window time.Duration) (p50, p99, pmax time.Duration, early int) {
	pubc, err := nats.Connect(url)
	if err != nil {
		b.Fatal(err)
	}
	defer pubc.Close()
	subc, err := nats.Connect(url)
	if err != nil {
		b.Fatal(err)
	}
	defer subc.Close()
	late := make([]time.Duration, 0, n)
	var mu sync.Mutex
	done := make(chan struct{})
	sub, err := subc.Subscribe("bench.fire", func(m *nats.Msg) {
		now := time.Now()
		fire, err := time.Parse(time.RFC3339Nano, m.Header.Get(wire.HeaderFireAt))
		if err != nil {
			b.Error(err)
		}
		_ = m.Respond(nil)
		mu.Lock()
		late = append(late, now.Sub(fire))
		if len(late) == n {
			close(done)
		}
		mu.Unlock()
	})
	if err != nil {
		b.Fatal(err)
	}
	_ = sub.SetPendingLimits(-1, -1)
	defer sub.Unsubscribe()
	_ = subc.Flush()

	start := time.Now().Add(500 * time.Millisecond)
	acks := make(chan *nats.Msg, n)
	inbox := nats.NewInbox()
	rs, err := pubc.ChanSubscribe(inbox, acks)
	if err != nil {
		b.Fatal(err)
	}
	defer rs.Unsubscribe()
	for i := range n {
		at := start.Add(window * time.Duration(i) / time.Duration(n))
		m := &nats.Msg{Subject: "delay.bench.fire", Reply: inbox, Header: nats.Header{wire.HeaderAt: []string{at.UTC().Format(time.RFC3339Nano)}}, Data: make([]byte, 256)}
		if err := pubc.PublishMsg(m); err != nil {
			b.Fatal(err)
		}
	}
	for range n {
		select {
		case <-acks:
		case <-time.After(30 * time.Second):
			b.Fatal("ingest replies missing")
		}
	}
	if time.Now().After(start) {
		b.Logf("ingest took longer than the 500ms lead: some messages were due before they were stored")
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		b.Fatalf("only %d of %d delivered", len(late), n)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, l := range late {
		// Delay-Fire-At has millisecond precision, rounded down, so a
		// lateness above -1ms is on time.
		if l < -time.Millisecond {
			early++
		}
	}
	slices.Sort(late)
	q := func(p float64) time.Duration { return late[min(int(p*float64(len(late))), len(late)-1)] }
	return q(0.50), q(0.99), late[len(late)-1], early
}

func ExampleService() {
	fmt.Println(wire.DefaultIngestPrefix, wire.DefaultAckPrefix)
	// Output: delay $DELAY.ACK
}
