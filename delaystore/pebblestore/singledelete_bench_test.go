package pebblestore_test

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/delaystore/pebblestore"
)

// plainDeletes is a store whose batches delete with Delete where the
// repository asks for SingleDelete: the engine as it was before single
// deletes, for the benchmark to compare against in the same run.
type plainDeletes struct{ delaystore.Store }

func (s plainDeletes) NewBatch() delaystore.Batch { return plainDeleteBatch{s.Store.NewBatch()} }

type plainDeleteBatch struct{ delaystore.Batch }

func (b plainDeleteBatch) SingleDelete(key []byte) error { return b.Delete(key) }

// BenchmarkRepository_ScheduleDeliverAck runs b.N messages of 100 bytes,
// on 64 subjects, through the store as the service does when they are due
// at once: each batch of 128 is stored, then, 32 batches later, read back
// by key and deleted with the copy read, as a dispatcher does on their
// ACKs. It reports what Pebble wrote to sstables per message, by flushes
// and by compactions (the memtable is flushed at the end, so what the
// messages left in it counts), and the process's CPU per message, with
// single deletes and with plain deletes, in the same run.
func BenchmarkRepository_ScheduleDeliverAck(b *testing.B) {
	for _, mode := range []string{"single-delete", "delete"} {
		b.Run(mode, func(b *testing.B) {
			s := open(b, pebblestore.Config{Dir: b.TempDir() + "/pebble"})
			var store delaystore.Store = s
			if mode == "delete" {
				store = plainDeletes{s}
			}
			r, err := delaystore.OpenRepository(store, delaystore.RepositoryConfig{})
			if err != nil {
				b.Fatal(err)
			}
			defer r.Close()
			before := pebblestore.Metrics(s)
			cpu := cpuTime()
			b.ResetTimer()
			scheduleAndAck(b, r, b.N)
			if err := pebblestore.Flush(s); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			after := pebblestore.Metrics(s)
			n := float64(b.N)
			b.ReportMetric(float64(time.Duration(cpuTime()-cpu).Nanoseconds())/1e3/n, "cpu-µs/msg")
			flushed, compacted := sstableBytes(after)
			flushed0, compacted0 := sstableBytes(before)
			b.ReportMetric(float64(flushed-flushed0)/n, "flush-B/msg")
			b.ReportMetric(float64(compacted-compacted0)/n, "compact-B/msg")
			b.ReportMetric(float64(after.Compact.Count-before.Compact.Count), "compactions")
			if r.Pending() != 0 {
				b.Fatalf("%d messages still pending", r.Pending())
			}
		})
	}
}

const benchSubjects, benchBatch, benchLag = 64, 128, 32

// scheduleAndAck stores n messages in batches and deletes each batch
// benchLag batches later, then the rest.
func scheduleAndAck(b testing.TB, r *delaystore.Repository, n int) {
	payload := make([]byte, 100)
	fireAt := time.Now().UnixNano()
	var stored [][]delaystore.Scheduled
	for i := 0; i < n; i += benchBatch {
		msgs := make([]*delaystore.StoredMessage, 0, benchBatch)
		for j := i; j < min(n, i+benchBatch); j++ {
			msgs = append(msgs, &delaystore.StoredMessage{Subject: fmt.Sprintf("bench.%d", j%benchSubjects), Payload: payload, FireAtNs: fireAt})
		}
		out, err := r.Schedule(msgs, delaystore.Sync)
		if err != nil {
			b.Fatal(err)
		}
		stored = append(stored, out)
		if len(stored) > benchLag {
			ack(b, r, stored[0])
			stored = stored[1:]
		}
	}
	for _, out := range stored {
		ack(b, r, out)
	}
}

// ack reads the messages of one batch and deletes them.
func ack(b testing.TB, r *delaystore.Repository, out []delaystore.Scheduled) {
	ops := make([]delaystore.Op, 0, len(out))
	for _, sc := range out {
		m, err := r.Get(sc.Key)
		if err != nil {
			b.Fatal(err)
		}
		ops = append(ops, delaystore.Op{Key: sc.Key, Pending: &delaystore.StoredMessage{Subject: m.Subject, WrittenOnce: m.WrittenOnce}})
	}
	if _, err := r.Apply(ops, delaystore.NoSync); err != nil {
		b.Fatal(err)
	}
}

// sstableBytes is what flushes and compactions wrote to sstables, summed
// over the levels. NB: not from Metrics.Total, which counts a memtable's
// input as flushed.
func sstableBytes(m *pebble.Metrics) (flushed, compacted uint64) {
	for _, l := range m.Levels {
		flushed += l.TableBytesFlushed
		compacted += l.TableBytesCompacted
	}
	return flushed, compacted
}

// cpuTime is the CPU time the process has used, user and system.
func cpuTime() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
