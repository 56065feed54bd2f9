package delaystore_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/natsdelay/natsdelay/delaystore"
)

// BenchmarkRepository_BatchInRuns measures what handing each batch to the
// store in runs saves (the messages, then a run for each kind of index
// entry and count; see groupedbatch.go): due-now messages of 256 bytes
// stored 128 a batch, a batch a millisecond of fire time, on 1, 64 or
// 1,024 subjects, each batch deleted 32 batches later as the dispatcher
// deletes messages on their ACKs, on Pebble in memory (no WAL and no
// fsync, so that the memtable's inserts are what differs). Each size runs with the writes in runs and as written, one after the
// other in the same process. It reports the process's CPU a message.
func BenchmarkRepository_BatchInRuns(b *testing.B) {
	for _, subjects := range []int{1, 64, 1024} {
		for _, mode := range []string{"in-runs", "as-written"} {
			b.Run(fmt.Sprintf("subjects=%d/%s", subjects, mode), func(b *testing.B) {
				delaystore.SetGroupedWrites(mode == "in-runs")
				defer delaystore.SetGroupedWrites(true)
				r := openRepo(b, newStore(b), delaystore.RepositoryConfig{})
				cpu := processCPU(b)
				storeAndDelete(b, r, b.N, subjects)
				b.ReportMetric(float64((processCPU(b)-cpu).Nanoseconds())/1e3/float64(b.N), "cpu-µs/msg")
			})
		}
	}
}

// storeAndDelete stores n due-now messages on subjects subjects, 128 a
// batch, and deletes each batch 32 batches later, then the rest.
func storeAndDelete(b *testing.B, r *delaystore.Repository, n, subjects int) {
	const batch, lag = 128, 32
	payload := make([]byte, benchPayloadSize)
	fireAt := time.Now().UnixNano()
	var stored [][]delaystore.Op
	del := func(ops []delaystore.Op) {
		if _, err := r.Apply(ops, delaystore.NoSync); err != nil {
			b.Fatal(err)
		}
	}
	for i := 0; i < n; i += batch {
		// A batch a millisecond, due at once: the fire times grow as
		// they do under ingest with a fixed delay.
		fireAt += int64(time.Millisecond)
		msgs := make([]*delaystore.StoredMessage, 0, batch)
		for j := i; j < min(n, i+batch); j++ {
			msgs = append(msgs, &delaystore.StoredMessage{Subject: fmt.Sprintf("bench.%d", j%subjects), Payload: payload, FireAtNs: fireAt})
		}
		out, err := r.Schedule(msgs, delaystore.NoSync)
		if err != nil {
			b.Fatal(err)
		}
		// As the dispatcher deletes a message it delivered: with what it
		// knows of it, unread (delaystore.Op.Pending).
		ops := make([]delaystore.Op, len(out))
		for k, s := range out {
			ops[k] = delaystore.Op{Key: s.Key, Pending: &delaystore.StoredMessage{Subject: msgs[k].Subject, WrittenOnce: true}}
		}
		if stored = append(stored, ops); len(stored) > lag {
			del(stored[0])
			stored = stored[1:]
		}
	}
	for _, ops := range stored {
		del(ops)
	}
	if r.Pending() != 0 {
		b.Fatalf("%d messages still pending", r.Pending())
	}
}
