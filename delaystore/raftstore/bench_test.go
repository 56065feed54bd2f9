package raftstore

import (
	"fmt"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/delaystore/pebblestore"
)

// BenchmarkCommit measures group commits of 1, 64 and 1024 operations of
// a message's size: on a local pebble store with its WAL synced (the
// single-process baseline), and through Raft on 1 and 3 nodes in this
// process, all on real disk and TCP. It reports commits/s, ops/s and the
// process's CPU time per operation (all nodes together).
func BenchmarkCommit(b *testing.B) {
	value := make([]byte, 256)
	for _, ops := range []int{1, 64, 1024} {
		b.Run(fmt.Sprintf("ops=%d/local", ops), func(b *testing.B) {
			s, err := pebblestore.Open(pebblestore.Config{Dir: filepath.Join(b.TempDir(), "local")})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			benchCommits(b, s, ops, value)
		})
		for _, nodes := range []int{1, 3} {
			b.Run(fmt.Sprintf("ops=%d/raft-%d", ops, nodes), func(b *testing.B) {
				cfg := DefaultConfig()
				c := startCluster(b, nodes, enginePebble, cfg)
				benchCommits(b, c.waitLeader().node.Store(), ops, value)
			})
		}
	}
}

func benchCommits(b *testing.B, s delaystore.Store, ops int, value []byte) {
	b.ReportAllocs()
	b.SetBytes(int64(ops * len(value)))
	key := make([]byte, 24)
	n := 0
	cpu0 := cpuTime()
	start := time.Now()
	for b.Loop() {
		batch := s.NewBatch()
		for range ops {
			n++
			copy(key, fmt.Appendf(key[:0], "%024d", n))
			if err := batch.Set(key, value); err != nil {
				b.Fatal(err)
			}
		}
		if err := batch.Commit(delaystore.Sync); err != nil {
			b.Fatal(err)
		}
		batch.Close()
	}
	elapsed := time.Since(start).Seconds()
	cpu := cpuTime() - cpu0
	b.ReportMetric(float64(b.N)/elapsed, "commits/s")
	b.ReportMetric(float64(n)/elapsed, "ops/s")
	b.ReportMetric(float64(cpu.Microseconds())/float64(n), "cpu-µs/op")
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
