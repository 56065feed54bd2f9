package delaystore_test

import (
	"strconv"
	"testing"

	"github.com/natsdelay/natsdelay/delaystore"
)

// BenchmarkRepository_ManySubjects measures the CPU cost per message of
// storing a batch of 1,000 messages on 1,000 subjects (of 10,000 in turn)
// and deleting the batch before it, without syncing: the pattern of a burst
// of recurring occurrences, one subject each, where every commit changes
// the counts of a thousand subjects.
func BenchmarkRepository_ManySubjects(b *testing.B) {
	const batch, subjects = 1000, 10_000
	for _, e := range engines {
		b.Run(e.name, func(b *testing.B) {
			r := openRepo(b, e.open(b, b.TempDir()), delaystore.RepositoryConfig{})
			names := make([]string, subjects)
			for i := range names {
				names[i] = "burst." + strconv.Itoa(i)
			}
			var prev []delaystore.Scheduled
			round := 0
			b.ReportAllocs()
			for b.Loop() {
				msgs := make([]*delaystore.StoredMessage, batch)
				for i := range msgs {
					msgs[i] = msg(names[(round*batch+i)%subjects], t0+int64(round))
				}
				round++
				s, err := r.Schedule(msgs, delaystore.NoSync)
				if err != nil {
					b.Fatal(err)
				}
				if prev != nil {
					ops := make([]delaystore.Op, len(prev))
					for i, p := range prev {
						ops[i] = delaystore.Op{Key: p.Key}
					}
					if _, err := r.Apply(ops, delaystore.NoSync); err != nil {
						b.Fatal(err)
					}
				}
				prev = s
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/msg")
		})
	}
}
