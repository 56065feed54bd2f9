package fleet_test

import (
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/natsdelay/natsdelay/bridge"
	"github.com/natsdelay/natsdelay/bridge/bridgetest"
	"github.com/natsdelay/natsdelay/bridge/fleet"
	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/delaystore/pebblestore"
)

// BenchmarkForward measures the CPU of the forwarding hop: acknowledged
// ingest (Pebble on disk, each reply after fsync) from 64 requesters,
// taken by the node of the owning cell, and taken by a node of another
// cell that forwards each message to it, in the same run, in alternating
// rounds. The CPU is the whole process's: the requesters', the
// nats-server's (it carries the hop), both nodes' and the service's.
func BenchmarkForward(b *testing.B) {
	srv := bridgetest.RunServer(b)
	st, err := pebblestore.Open(pebblestore.Config{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	svc := bridgetest.Start(b, srv, st, func(c *bridge.Config) {
		c.IngestPrefix, c.AckPrefix, c.APIPrefix = fleet.CellSubjects("a")
	})
	benchForward(b, srv.ClientURL(), svc)
}

// BenchmarkForward_Routing is BenchmarkForward with a service that
// answers at once and stores nothing: the routing's own CPU, and the
// hop's, without the store's.
func BenchmarkForward_Routing(b *testing.B) {
	srv := bridgetest.RunServer(b)
	benchForward(b, srv.ClientURL(), answering{bridgetest.Connect(b, srv)})
}

// answering is a cell's service that answers each message at once.
type answering struct{ nc *nats.Conn }

func (a answering) Ingest(req micro.Request)    { _ = req.Respond([]byte(`{"tag":"t"}`)) }
func (answering) Leader() bool                  { return true }
func (answering) Leads() bool                   { return true }
func (answering) Info() (wire.InfoReply, error) { return wire.InfoReply{}, nil }

func benchForward(b *testing.B, url string, svc fleet.Service) {
	all := []fleet.Range{{From: 0, To: fleet.DefaultPartitions - 1}}
	benchNode(b, url, svc, fleet.Record{Cell: "a", Partitions: fleet.DefaultPartitions, Epoch: 1, Owned: all}, "delay")
	// b takes its own prefix, so every message sent there takes the hop.
	benchNode(b, url, newFakeService(), fleet.Record{Cell: "b", Partitions: fleet.DefaultPartitions, Epoch: 1}, "hop")
	hdr := nats.Header{wire.HeaderDelay: []string{"1h"}}
	const n, rounds = 20000, 4
	requestLoop(b, url, "hop.bench.warm", hdr, 1000) // until b routes to a
	var local, hop float64
	for b.Loop() {
		local, hop = 0, 0
		for range rounds {
			start := processCPU(b)
			requestLoop(b, url, "delay.bench.local", hdr, n/rounds)
			mid := processCPU(b)
			requestLoop(b, url, "hop.bench.hop", hdr, n/rounds)
			local, hop = local+(mid-start)/n, hop+(processCPU(b)-mid)/n
		}
	}
	b.ReportMetric(local, "owner-cpu-us/msg")
	b.ReportMetric(hop, "hop-cpu-us/msg")
	b.ReportMetric(hop-local, "hop-extra-cpu-us/msg")
}

func benchNode(b *testing.B, url string, svc fleet.Service, rec fleet.Record, ingest string) {
	nc, err := nats.Connect(url)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	n, err := fleet.New(nc, svc, rec, fleet.Config{Cell: rec.Cell, IngestPrefix: ingest, Heartbeat: 50 * time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = n.Close() })
}

// requestLoop sends n requests to subject from 64 requesters over 8
// connections, retrying a 503 (a node that has not heard its owner yet).
func requestLoop(b *testing.B, url, subject string, hdr nats.Header, n int) {
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
	var next, failed atomic.Int64
	var wg sync.WaitGroup
	for r := range requesters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nc := conns[r%len(conns)]
			for next.Add(1) <= int64(n) {
				for try := 0; ; try++ {
					rep, err := nc.RequestMsg(&nats.Msg{Subject: subject, Header: hdr, Data: payload}, 10*time.Second)
					if err == nil {
						err = wire.ParseError(rep.Header, rep.Data)
					}
					if err == nil {
						break
					}
					if try == 100 {
						failed.Add(1)
						break
					}
					time.Sleep(10 * time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
	if f := failed.Load(); f > 0 {
		b.Fatalf("%d of %d requests failed", f, n)
	}
}

// processCPU is the CPU time, user and system, the process has used so
// far, in microseconds.
func processCPU(b *testing.B) float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e3
}
