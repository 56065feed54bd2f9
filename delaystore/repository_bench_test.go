package delaystore_test

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/keys"
)

// benchPayloadSize is the payload of every benchmark message, and the value
// size of the raw baseline.
const benchPayloadSize = 256

func benchMessages(n int, subject string, fireAtNs int64) []*delaystore.StoredMessage {
	payload := make([]byte, benchPayloadSize)
	for i := range payload {
		payload[i] = byte(i)
	}
	msgs := make([]*delaystore.StoredMessage, n)
	for i := range msgs {
		msgs[i] = &delaystore.StoredMessage{
			Subject:      subject,
			Payload:      payload,
			EnqueuedAtNs: t0,
			FireAtNs:     fireAtNs + int64(i)*1e6,
		}
	}
	return msgs
}

// BenchmarkRepository_Schedule measures messages stored per second through
// Schedule with Sync, against a baseline in the same run: the same number of
// 24-byte keys and 256-byte values written straight to a store of the same
// engine in one batch. Each iteration commits one batch of each, so both see
// the same conditions. It reports repo-msgs/s, raw-msgs/s and their ratio;
// ns/op covers both commits.
func BenchmarkRepository_Schedule(b *testing.B) {
	for _, e := range engines {
		for _, n := range []int{1, 64, 1024} {
			b.Run(fmt.Sprintf("%s/batch=%d", e.name, n), func(b *testing.B) {
				raw, repoStore := e.open(b, b.TempDir()), e.open(b, b.TempDir())
				r := openRepo(b, repoStore, delaystore.RepositoryConfig{})
				msgs := benchMessages(n, "bench.orders", t0)
				value := msgs[0].Payload
				topic := keys.TopicHash("bench.raw")
				rawKeys := make([]keys.Key, n)
				var id uint64
				var rawTime, repoTime time.Duration
				b.ReportAllocs()
				for b.Loop() {
					// Both write keys that grow from batch to batch, as ingest
					// with a fixed delay does: bucket and id both count up.
					next := r.LastID() + 1
					for i := range rawKeys {
						id++
						rawKeys[i] = keys.New(topic, uint64(t0/1e6)+id, id)
						msgs[i].FireAtNs = (t0/1e6 + int64(next) + int64(i)) * 1e6
					}
					start := time.Now()
					batch := raw.NewBatch()
					for i := range rawKeys {
						if err := batch.Set(rawKeys[i][:], value); err != nil {
							b.Fatal(err)
						}
					}
					if err := batch.Commit(delaystore.Sync); err != nil {
						b.Fatal(err)
					}
					batch.Close()
					mid := time.Now()
					if _, err := r.Schedule(msgs, delaystore.Sync); err != nil {
						b.Fatal(err)
					}
					repoTime += time.Since(mid)
					rawTime += mid.Sub(start)
				}
				total := float64(b.N * n)
				rawRate, repoRate := total/rawTime.Seconds(), total/repoTime.Seconds()
				b.ReportMetric(repoRate, "repo-msgs/s")
				b.ReportMetric(rawRate, "raw-msgs/s")
				b.ReportMetric(repoRate/rawRate, "ratio")
			})
		}
	}
}

// BenchmarkRepository_CommitSize measures what a group commit's size does
// to the store's CPU a message: each iteration stores 4,096 messages on
// 1,024 subjects through ScheduleOnce with Sync, as the group commit
// does, in commits of batch messages each. It reports the process's CPU
// time per message (background flushes and compactions count where they
// fall); with -benchtime Nx every size stores as many messages.
func BenchmarkRepository_CommitSize(b *testing.B) {
	const perIteration, subjects = 4096, 1024
	for _, n := range []int{1, 4, 16, 64, 256} {
		b.Run(fmt.Sprintf("batch=%d", n), func(b *testing.B) {
			r := openRepo(b, openDisk(b, b.TempDir(), nil), delaystore.RepositoryConfig{})
			now, seq := t0, 0
			var cpu time.Duration
			for b.Loop() {
				for range perIteration / n {
					now += int64(time.Millisecond)
					in := make([]delaystore.Once, n)
					for i, m := range benchMessages(n, "", now+int64(time.Hour)) {
						m.Subject = fmt.Sprintf("bench.s%d", seq%subjects)
						in[i].Msg = m
						seq++
					}
					start := processCPU(b)
					if _, err := r.ScheduleOnce(in, 0, now, delaystore.Sync); err != nil {
						b.Fatal(err)
					}
					cpu += processCPU(b) - start
				}
			}
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N*perIteration), "cpu-µs/msg")
		})
	}
}

// BenchmarkRepository_ScanDue measures messages read per second through
// ScanTopic from one topic's due range, the way the dispatcher reads: pages
// of dueScanPage from a cursor, up to the due bound, starting over at the
// front when the range is used up. The store holds 1,000,000 messages in 4
// topics, half of them due (100,000 in all with -short), built once per
// engine before any timing.
func BenchmarkRepository_ScanDue(b *testing.B) {
	const topics, dueScanPage = 4, 1024
	total := 1_000_000
	if testing.Short() {
		total = 100_000
	}
	for _, e := range engines {
		s := e.open(b, b.TempDir())
		r := openRepo(b, s, delaystore.RepositoryConfig{})
		// Fire times 1ms apart per topic; now is half way.
		perTopic := total / topics
		const chunk = 4096
		for tp := 0; tp < topics; tp++ {
			subject := fmt.Sprintf("bench.due.%d", tp)
			for i := 0; i < perTopic; i += chunk {
				if _, err := r.Schedule(benchMessages(min(chunk, perTopic-i), subject, t0+int64(i)*1e6), delaystore.NoSync); err != nil {
					b.Fatal(err)
				}
			}
		}
		if err := s.Flush(); err != nil {
			b.Fatal(err)
		}
		h := keys.TopicHash("bench.due.0")
		nowMs := t0/1e6 + int64(perTopic/2)
		due := keys.DueUpperBound(h, nowMs, 0)

		b.Run(e.name, func(b *testing.B) {
			var from []byte
			read := 0
			b.ReportAllocs()
			for b.Loop() {
				n := 0
				var last keys.Key
				err := r.ScanTopic(h, from, due, func(k keys.Key, m *delaystore.StoredMessage) bool {
					if m.FireAtNs/1e6 > nowMs {
						b.Fatalf("message %v not due yet", k)
					}
					last = k
					n++
					return n < dueScanPage
				})
				if err != nil {
					b.Fatal(err)
				}
				read += n
				if n < dueScanPage {
					from = nil // used up: start over, as after a restart
				} else {
					from = append(last.Bytes(), 0) // just past last
				}
			}
			b.ReportMetric(float64(read)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

// BenchmarkRepository_OpenBuildsDueIndex times the first open of a store
// written without the due index, on a Pebble disk store of 100,000
// messages on a subject each: the one-off cost of upgrading, which reads
// every message key and the subject registry once. It reports the cost per
// message.
func BenchmarkRepository_OpenBuildsDueIndex(b *testing.B) {
	const n = 100_000
	s := openDisk(b, b.TempDir(), nil)
	r := openRepo(b, s, delaystore.RepositoryConfig{})
	msgs := make([]*delaystore.StoredMessage, 0, 1000)
	for i := range n {
		msgs = append(msgs, &delaystore.StoredMessage{Subject: fmt.Sprintf("bench.%d", i), Payload: make([]byte, benchPayloadSize), FireAtNs: t0 + int64(i)*1e6})
		if len(msgs) == cap(msgs) {
			if _, err := r.Schedule(msgs, delaystore.NoSync); err != nil {
				b.Fatal(err)
			}
			msgs = msgs[:0]
		}
	}
	r.Close()
	var el time.Duration
	for b.Loop() {
		b.StopTimer()
		stripDueIndex(b, s)
		b.StartTimer()
		t := time.Now()
		r, err := delaystore.OpenRepository(s, delaystore.RepositoryConfig{})
		el += time.Since(t)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if r.Pending() != n || r.Subjects() != n {
			b.Fatalf("built totals: pending %d, subjects %d; want %d each", r.Pending(), r.Subjects(), n)
		}
		r.Close()
		b.StartTimer()
	}
	b.ReportMetric(float64(el.Nanoseconds())/float64(b.N)/n, "ns/msg")
}

// BenchmarkRepository_OpenBuildsOccurrenceIndex times the first open of a
// store written with the due index but without the index of recurring
// occurrences (index-version 1), on a Pebble disk store of 100,000
// messages on a subject each, one in a hundred an occurrence: the one-off
// cost of that upgrade, which reads and decodes every message once. It
// reports the cost per message.
func BenchmarkRepository_OpenBuildsOccurrenceIndex(b *testing.B) {
	const n = 100_000
	s := openDisk(b, b.TempDir(), nil)
	r := openRepo(b, s, delaystore.RepositoryConfig{})
	msgs := make([]*delaystore.StoredMessage, 0, 1000)
	for i := range n {
		m := &delaystore.StoredMessage{Subject: fmt.Sprintf("bench.%d", i), Payload: make([]byte, benchPayloadSize), FireAtNs: t0 + int64(i)*1e6}
		if i%100 == 0 {
			m.Recurrence = &delaystore.Recurrence{EveryNs: int64(time.Hour), OccurrenceNs: m.FireAtNs, Seq: 1}
		}
		msgs = append(msgs, m)
		if len(msgs) == cap(msgs) {
			if _, err := r.Schedule(msgs, delaystore.NoSync); err != nil {
				b.Fatal(err)
			}
			msgs = msgs[:0]
		}
	}
	r.Close()
	var el time.Duration
	for b.Loop() {
		b.StopTimer()
		stripOccurrenceIndex(b, s)
		b.StartTimer()
		t := time.Now()
		r, err := delaystore.OpenRepository(s, delaystore.RepositoryConfig{})
		el += time.Since(t)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if got := r.Schedules(); got != n/100 {
			b.Fatalf("%d schedules, want %d", got, n/100)
		}
		r.Close()
		b.StartTimer()
	}
	b.ReportMetric(float64(el.Nanoseconds())/float64(b.N)/n, "ns/msg")
}

// BenchmarkRepository_ScheduleOnce measures the duplicate window's cost:
// each iteration commits, with Sync, one batch of 64 messages through each
// of five paths, each on its own store: Schedule (the baseline), Schedule
// with a Delay-Id each (what a Delay-Id cost before the window),
// ScheduleOnce of messages without ids, with a Delay-Id and sum each, and
// with a Nats-Msg-Id each. The clock moves 1ms a batch and the window is
// 100ms, so after 100 batches every batch also sweeps as many records as
// it writes, as at a steady rate. It reports the process's CPU time per
// message of each path (all of the process's, so background flushes and
// compactions count where they fall) and each one's ratio to the baseline.
func BenchmarkRepository_ScheduleOnce(b *testing.B) {
	const n = 64
	const window = 100 * time.Millisecond
	paths := []string{"schedule", "schedule-delay-id", "once-no-id", "once-delay-id", "once-msg-id"}
	repos := make([]*delaystore.Repository, len(paths))
	for i := range paths {
		repos[i] = openRepo(b, openDisk(b, b.TempDir(), nil), delaystore.RepositoryConfig{})
	}
	cpu := make([]time.Duration, len(paths))
	now, seq := t0, 0
	b.ReportAllocs()
	for b.Loop() {
		now += int64(time.Millisecond)
		for p, r := range repos {
			msgs := benchMessages(n, "bench.orders", now)
			in := make([]delaystore.Once, n)
			for i, m := range msgs {
				in[i].Msg = m
				id := fmt.Sprintf("id-%d", seq+i)
				switch paths[p] {
				case "schedule-delay-id":
					m.ClientId = id
				case "once-delay-id":
					m.ClientId, in[i].Sum = id, delaystore.DedupSum{byte(i)}
				case "once-msg-id":
					in[i].MsgID = id
				}
			}
			start := processCPU(b)
			var err error
			if p < 2 {
				_, err = r.Schedule(msgs, delaystore.Sync)
			} else {
				_, err = r.ScheduleOnce(in, window, now, delaystore.Sync)
			}
			if err != nil {
				b.Fatal(err)
			}
			cpu[p] += processCPU(b) - start
		}
		seq += n
	}
	per := func(p int) float64 { return float64(cpu[p].Microseconds()) / float64(b.N*n) }
	for p, name := range paths {
		b.ReportMetric(per(p), name+"-cpu-µs/msg")
		if p > 0 {
			b.ReportMetric(per(p)/per(0), name+"/schedule")
		}
	}
}

// processCPU is the CPU time the process used so far, user and system.
func processCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
