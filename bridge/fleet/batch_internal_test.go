package fleet

import (
	"strconv"
	"testing"

	"github.com/nats-io/nats.go"
)

// BenchmarkBatch_Hop measures the hop's own code for a burst of 64
// publishes, per publish: the router's check of the target and its
// partition, the batch's encoding, and the owner's decoding and the same
// check, with the headers a publisher sends (a delay and a Nats-Msg-Id)
// and a 256-byte payload. NATS's own work is not in it (see
// BenchmarkForward).
func BenchmarkBatch_Hop(b *testing.B) {
	const burst = 64
	n := &Node{cfg: Config{IngestPrefix: "delay", AckPrefix: "$DELAY.ACK", APIPrefix: "$DELAY.API"}, rec: Record{Partitions: 12}, table: newTable(12)}
	fs := make([]forwarded, burst)
	for i := range fs {
		target := "bench.subject." + strconv.Itoa(i)
		m := &nats.Msg{
			Subject: "delay." + target, Reply: "_INBOX.abcdefghijklmnopqrstuv." + strconv.Itoa(i),
			Header: nats.Header{"Delay": {"1h"}, "Nats-Msg-Id": {"id-" + strconv.Itoa(i)}},
			Data:   make([]byte, 256),
		}
		fs[i] = forwarded{msg: m, target: target}
	}
	b.ReportAllocs()
	for b.Loop() {
		size := 0
		for i, f := range fs {
			if n.reserved(f.target) {
				b.Fatal("reserved")
			}
			fs[i].part = Partition(f.target, n.rec.Partitions)
			size += f.encodedSize()
		}
		buf, _, _ := n.encodeBatch("b", fs, size)
		n.out.buf = buf[:0] // as sendBatch does once NATS has copied it
		got, err := decodeBatch(buf)
		if err != nil || len(got) != burst {
			b.Fatal(err)
		}
		for _, f := range got {
			if n.reserved(f.target) {
				b.Fatal("reserved")
			}
			_ = Partition(f.target, n.rec.Partitions)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/burst, "ns/publish")
}

// Guarantee: a target equal to one of the fleet's own prefixes, or under
// one, is refused, and a subject that only begins with the same letters
// is not.
func TestNode_Reserved(t *testing.T) {
	n := &Node{cfg: Config{IngestPrefix: "delay", AckPrefix: "$DELAY.ACK", APIPrefix: "$DELAY.API"}}
	for target, want := range map[string]bool{
		"delay": true, "delay.orders": true, "$DELAY": true, "$DELAY.ACK.x": true,
		"$SRV.PING": true, "$SRV": true,
		"delayed.orders": false, "$DELAYED": false, "$SRVX.a": false, "orders": false, "delay2": false,
	} {
		if got := n.reserved(target); got != want {
			t.Errorf("reserved(%q) = %v, want %v", target, got, want)
		}
	}
}
