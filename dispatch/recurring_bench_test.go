package dispatch_test

import (
	"log/slog"
	"runtime"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/delaystore/pebblestore"
	"github.com/natsdelay/natsdelay/dispatch"
)

// recurSchedules is how many schedules BenchmarkDispatcher_Recurring
// keeps, every second on a subject each.
const recurSchedules = 5000

// BenchmarkDispatcher_Recurring runs recurSchedules schedules of one
// second, on a Pebble store on disk, through the whole cycle of an
// occurrence: planned ahead, published, ACKed by a consumer, deleted.
// An operation is one second: every schedule's occurrence delivered and
// ACKed. Beside ns/op, which is the interval, it reports the process's
// CPU and the heap allocations per occurrence. Run it with a -benchtime
// of a few x (each x takes a second).
func BenchmarkDispatcher_Recurring(b *testing.B) {
	st, err := pebblestore.Open(pebblestore.Config{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	repo, err := delaystore.OpenRepository(st, delaystore.RepositoryConfig{})
	if err != nil {
		b.Fatal(err)
	}
	pub := newFakePublisher()
	d, err := dispatch.New(repo, pub, dispatch.Config{AckWait: 10 * time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	pub.d = d
	if err := d.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = d.Close()
		_ = repo.Close()
		_ = st.Close()
	})

	var acked atomic.Int64
	stop := make(chan struct{})
	consumed := make(chan struct{})
	go func() {
		defer close(consumed)
		for {
			select {
			case <-stop:
				return
			case dl := <-pub.deliveries:
				d.Ack(dl.key, dispatch.Ack{Kind: dispatch.AckDone}, func(error) { acked.Add(1) })
			}
		}
	}()
	b.Cleanup(func() {
		close(stop)
		<-consumed
	})

	start := time.Now().Truncate(time.Second).Add(2 * time.Second)
	msgs := make([]*delaystore.StoredMessage, recurSchedules)
	for i := range msgs {
		m := msgAt("recur."+strconv.Itoa(i), start)
		m.Payload = make([]byte, 128)
		m.Recurrence = &delaystore.Recurrence{EveryNs: int64(time.Second), OccurrenceNs: start.UnixNano(), Seq: 1}
		msgs[i] = m
	}
	res, err := repo.Schedule(msgs, delaystore.Sync)
	if err != nil {
		b.Fatal(err)
	}
	for i, s := range res {
		d.Notify(s, msgs[i].FireAtNs)
	}
	// The first second warms up the planner, the caches and the maps.
	waitAcked(b, &acked, recurSchedules)

	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	cpu0 := processCPU(b)
	n := int64(0)
	for b.Loop() {
		n++
		waitAcked(b, &acked, (n+1)*recurSchedules)
	}
	cpu := processCPU(b) - cpu0
	runtime.ReadMemStats(&m1)
	occ := float64(n * recurSchedules)
	b.ReportMetric(float64(cpu.Microseconds())/occ, "cpu-µs/occurrence")
	b.ReportMetric(float64(m1.Mallocs-m0.Mallocs)/occ, "allocs/occurrence")
	b.ReportMetric(float64(m1.TotalAlloc-m0.TotalAlloc)/occ, "B/occurrence")
	ds := d.Stats()
	b.ReportMetric(float64(ds.PlannedOnDelivery)/float64(ds.PlannedAhead+ds.PlannedOnDelivery), "on-delivery/planned")
}

// waitAcked waits until at least want occurrences were ACKed and their
// deletes committed.
func waitAcked(b *testing.B, acked *atomic.Int64, want int64) {
	b.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for acked.Load() < want {
		if time.Now().After(deadline) {
			b.Fatalf("%d occurrences ACKed, want %d", acked.Load(), want)
		}
		time.Sleep(time.Millisecond)
	}
}

// processCPU is the CPU time the process used so far, user and system.
func processCPU(b *testing.B) time.Duration {
	b.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
