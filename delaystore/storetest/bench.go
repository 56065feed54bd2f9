package storetest

import (
	"fmt"
	"testing"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/keys"
)

// RawValueSize is the value size BenchRawCommit writes: about a small
// message with its headers.
const RawValueSize = 256

// RawBatchSizes are the batch sizes BenchRawCommit measures: one message
// per commit, and what a group commit gathers under moderate and heavy load.
var RawBatchSizes = []int{1, 64, 1024}

// BenchRawCommit measures commits of batches of event keys (keys.Len bytes)
// and RawValueSize-byte values straight on the engine, with one sub-benchmark
// per batch size. It reports msgs/s, and bytes/s through SetBytes. open must
// return an empty store and register its Close with tb.Cleanup. Keys grow
// within one topic, the way ingest writes them.
func BenchRawCommit(b *testing.B, open func(tb testing.TB) delaystore.Store, mode delaystore.SyncMode) {
	for _, n := range RawBatchSizes {
		b.Run(fmt.Sprintf("batch=%d", n), func(b *testing.B) {
			s := open(b)
			value := make([]byte, RawValueSize)
			for i := range value {
				value[i] = byte(i)
			}
			topic := keys.TopicHash("bench.raw")
			b.SetBytes(int64(n * (keys.Len + RawValueSize)))
			b.ReportAllocs()
			var id uint64
			commits := 0
			for b.Loop() {
				batch := s.NewBatch()
				for range n {
					id++
					k := keys.New(topic, id/64, id)
					if err := batch.Set(k[:], value); err != nil {
						b.Fatal(err)
					}
				}
				if err := batch.Commit(mode); err != nil {
					b.Fatal(err)
				}
				if err := batch.Close(); err != nil {
					b.Fatal(err)
				}
				commits++
			}
			if sec := b.Elapsed().Seconds(); sec > 0 {
				b.ReportMetric(float64(commits*n)/sec, "msgs/s")
				b.ReportMetric(float64(commits)/sec, "commits/s")
			}
		})
	}
}
