package dispatch_test

import (
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/delaystore/pebblestore"
	"github.com/natsdelay/natsdelay/dispatch"
)

// scalePending is how many future messages the scale benchmarks keep
// pending, on one subject or on one subject each.
const scalePending = 100_000

// fillFuture opens an in-memory Pebble store holding scalePending messages
// due in an hour, spread over subjects subjects, and returns it with the
// repository over it. The store and repository close with tb.
func fillFuture(tb testing.TB, subjects int) (delaystore.Store, *delaystore.Repository) {
	tb.Helper()
	st, err := pebblestore.Open(pebblestore.Config{InMemory: true})
	if err != nil {
		tb.Fatal(err)
	}
	repo, err := delaystore.OpenRepository(st, delaystore.RepositoryConfig{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		_ = repo.Close()
		_ = st.Close()
	})
	at := time.Now().Add(time.Hour)
	const batch = 10_000
	msgs := make([]*delaystore.StoredMessage, 0, batch)
	for i := range scalePending {
		msgs = append(msgs, msgAt("future."+strconv.Itoa(i%subjects), at))
		if len(msgs) == batch || i == scalePending-1 {
			if _, err := repo.Schedule(msgs, delaystore.NoSync); err != nil {
				tb.Fatal(err)
			}
			msgs = msgs[:0]
		}
	}
	if err := st.Flush(); err != nil {
		tb.Fatal(err)
	}
	return st, repo
}

// BenchmarkDispatcher_Start times start-up with scalePending future
// messages pending: opening the repository (which reads the registry's
// totals) and Start (which reads nothing; the first pass reads the due
// index), once with them all on one subject and once on a subject each.
// The difference is what start-up costs per subject: nothing.
func BenchmarkDispatcher_Start(b *testing.B) {
	for _, subjects := range []int{1, scalePending} {
		b.Run("subjects="+strconv.Itoa(subjects), func(b *testing.B) {
			st, _ := fillFuture(b, subjects)
			b.ReportAllocs()
			for b.Loop() {
				repo, err := delaystore.OpenRepository(st, delaystore.RepositoryConfig{})
				if err != nil {
					b.Fatal(err)
				}
				d, err := dispatch.New(repo, newFakePublisher(), dispatch.Config{AckWait: 10 * time.Second})
				if err != nil {
					b.Fatal(err)
				}
				if err := d.Start(); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if s := d.Stats(); s.Topics > 1 {
					b.Fatalf("dispatcher holds %d subjects after Start with nothing due, want none", s.Topics)
				}
				if err := d.Close(); err != nil {
					b.Fatal(err)
				}
				if err := repo.Close(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(subjects), "subjects")
		})
	}
}

// dueSet is the number of due-now messages BenchmarkDispatcher_DueScan
// delivers per operation, each on a subject of its own.
const dueSet = 100

// BenchmarkDispatcher_DueScan times how long a small due set takes to go
// out while scalePending future messages wait: from the commit that makes
// dueSet messages due now until the last is delivered. The future messages
// are on one subject, then on a subject each, so the difference is what
// the dispatcher's per-subject state costs a due scan.
func BenchmarkDispatcher_DueScan(b *testing.B) {
	for _, subjects := range []int{1, scalePending} {
		b.Run("subjects="+strconv.Itoa(subjects), func(b *testing.B) {
			_, repo := fillFuture(b, subjects)
			pub := newFakePublisher()
			d, err := dispatch.New(repo, pub, dispatch.Config{AckWait: 10 * time.Second})
			if err != nil {
				b.Fatal(err)
			}
			pub.d = d
			if err := d.Start(); err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = d.Close() })
			msgs := make([]*delaystore.StoredMessage, dueSet)
			acked := make(chan error, dueSet)
			n := 0
			b.ReportAllocs()
			for b.Loop() {
				now := time.Now()
				for i := range msgs {
					msgs[i] = msgAt("due."+strconv.Itoa(n)+"."+strconv.Itoa(i), now)
				}
				n++
				res, err := repo.Schedule(msgs, delaystore.NoSync)
				if err != nil {
					b.Fatal(err)
				}
				for i, s := range res {
					d.Notify(s, msgs[i].FireAtNs)
				}
				got := make([]delivery, 0, dueSet)
				for len(got) < dueSet {
					select {
					case dl := <-pub.deliveries:
						got = append(got, dl)
					case <-time.After(10 * time.Second):
						b.Fatalf("%d of %d due messages delivered after 10s", len(got), dueSet)
					}
				}
				// The ACKs settle the set, so the next one starts from the
				// same state; they are not what is timed.
				b.StopTimer()
				for _, dl := range got {
					d.Ack(dl.key, dispatch.Ack{Kind: dispatch.AckDone}, func(err error) { acked <- err })
				}
				for range got {
					if err := <-acked; err != nil {
						b.Fatal(err)
					}
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(dueSet), "msgs/op")
		})
	}
}

// BenchmarkDispatcher_FirstDelivery times a restart as a user sees it:
// from opening the repository over scalePending future messages, on one
// subject or a subject each, until a message that was due before the
// restart is delivered. The dispatcher learns of it from the due index
// alone, as after a crash.
func BenchmarkDispatcher_FirstDelivery(b *testing.B) {
	for _, subjects := range []int{1, scalePending} {
		b.Run("subjects="+strconv.Itoa(subjects), func(b *testing.B) {
			st, repo := fillFuture(b, subjects)
			if _, err := repo.Schedule([]*delaystore.StoredMessage{msgAt("restart", time.Now())}, delaystore.Sync); err != nil {
				b.Fatal(err)
			}
			if err := repo.Close(); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				repo, err := delaystore.OpenRepository(st, delaystore.RepositoryConfig{})
				if err != nil {
					b.Fatal(err)
				}
				pub := newFakePublisher()
				d, err := dispatch.New(repo, pub, dispatch.Config{AckWait: 10 * time.Second})
				if err != nil {
					b.Fatal(err)
				}
				pub.d = d
				if err := d.Start(); err != nil {
					b.Fatal(err)
				}
				select {
				case <-pub.deliveries:
				case <-time.After(10 * time.Second):
					b.Fatal("no delivery 10s after Start")
				}
				b.StopTimer()
				// Not ACKed: the next iteration delivers it again.
				if err := d.Close(); err != nil {
					b.Fatal(err)
				}
				if err := repo.Close(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}

// BenchmarkDispatcher_DueIndexScan times a due set of dueSet messages, a
// subject each, that the dispatcher learns of from the due index rather
// than from Notify (they were committed before it started, and became due
// since), while scalePending future messages wait on one subject or on a
// subject each: from Start until the last is delivered. The difference is
// what the future subjects cost a read of the due index: nothing, as the
// read starts at the due messages and stops at the first future one.
func BenchmarkDispatcher_DueIndexScan(b *testing.B) {
	for _, subjects := range []int{1, scalePending} {
		b.Run("subjects="+strconv.Itoa(subjects), func(b *testing.B) {
			_, repo := fillFuture(b, subjects)
			msgs := make([]*delaystore.StoredMessage, dueSet)
			past := time.Now().Add(-time.Second)
			for i := range msgs {
				msgs[i] = msgAt("due."+strconv.Itoa(i), past)
			}
			if _, err := repo.Schedule(msgs, delaystore.Sync); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				pub := newFakePublisher()
				d, err := dispatch.New(repo, pub, dispatch.Config{AckWait: 10 * time.Second})
				if err != nil {
					b.Fatal(err)
				}
				pub.d = d
				if err := d.Start(); err != nil {
					b.Fatal(err)
				}
				for n := 0; n < dueSet; n++ {
					select {
					case <-pub.deliveries:
					case <-time.After(10 * time.Second):
						b.Fatalf("%d of %d due messages delivered after 10s", n, dueSet)
					}
				}
				b.StopTimer()
				// Not ACKed, so the next iteration finds them due again.
				if err := d.Close(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(dueSet), "msgs/op")
		})
	}
}

// BenchmarkDispatcher_InFlightMemory measures the live heap a delivery in
// flight costs the dispatcher: inFlightSet messages due now are delivered
// and left unanswered, and the heap after a collection is compared with
// the heap before they were scheduled. With them on one subject it is the
// cost of a flight; on a subject each, that of a flight and of its
// subject's state, which the dispatcher keeps while the subject has one.
func BenchmarkDispatcher_InFlightMemory(b *testing.B) {
	const inFlightSet = 20_000
	for _, subjects := range []int{1, inFlightSet} {
		b.Run("subjects="+strconv.Itoa(subjects), func(b *testing.B) {
			var perFlight float64
			for b.Loop() {
				b.StopTimer()
				st, err := pebblestore.Open(pebblestore.Config{InMemory: true})
				if err != nil {
					b.Fatal(err)
				}
				repo, err := delaystore.OpenRepository(st, delaystore.RepositoryConfig{})
				if err != nil {
					b.Fatal(err)
				}
				pub := newFakePublisher()
				d, err := dispatch.New(repo, pub, dispatch.Config{AckWait: time.Hour, MaxInFlight: 2 * inFlightSet, SubjectMaxInFlight: 2 * inFlightSet})
				if err != nil {
					b.Fatal(err)
				}
				pub.d = d
				if err := d.Start(); err != nil {
					b.Fatal(err)
				}
				msgs := make([]*delaystore.StoredMessage, 0, inFlightSet)
				now := time.Now()
				for i := range inFlightSet {
					msgs = append(msgs, msgAt("inflight."+strconv.Itoa(i%subjects), now))
				}
				before := liveHeap()
				b.StartTimer()
				res, err := repo.Schedule(msgs, delaystore.NoSync)
				if err != nil {
					b.Fatal(err)
				}
				for i, s := range res {
					d.Notify(s, msgs[i].FireAtNs)
				}
				for n := 0; n < inFlightSet; n++ {
					select {
					case <-pub.deliveries:
					case <-time.After(10 * time.Second):
						b.Fatalf("%d of %d delivered after 10s", n, inFlightSet)
					}
				}
				b.StopTimer()
				if s := d.Stats(); s.InFlight != inFlightSet {
					b.Fatalf("%d in flight, want %d", s.InFlight, inFlightSet)
				}
				perFlight = float64(liveHeap()-before) / inFlightSet
				_ = d.Close()
				_ = repo.Close()
				_ = st.Close()
				b.StartTimer()
			}
			b.ReportMetric(perFlight, "heap-bytes/flight")
		})
	}
}

// liveHeap is the live heap after a collection.
func liveHeap() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
