package fleet

import (
	"reflect"
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
		got, err := n.batches.decode(buf)
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

// TestBatchDecoder_NextBatch_LeavesTheLastOnesMessages checks that a
// decoder that keeps its slices for the next batch keeps none of what it
// handed out: the messages of a batch, still with the service when the
// next batch is read, are the same after it, headers and payloads too.
func TestBatchDecoder_NextBatch_LeavesTheLastOnesMessages(t *testing.T) {
	batch := func(tag string, n int) ([]byte, []forwarded) {
		b := []byte{batchVersion}
		var in []forwarded
		for i := range n {
			f := forwarded{target: tag + ".s" + strconv.Itoa(i), msg: &nats.Msg{
				Reply:  "_INBOX." + tag + "." + strconv.Itoa(i),
				Header: nats.Header{"Delay": {tag + strconv.Itoa(i)}, "Two": {"x", tag}},
				Data:   []byte(tag + " payload " + strconv.Itoa(i)),
			}}
			in = append(in, f)
			b = appendForwarded(b, f, f.msg.Reply)
		}
		return b, in
	}
	var d batchDecoder
	b1, in1 := batch("first", 5)
	fs, err := d.decode(b1)
	if err != nil {
		t.Fatal(err)
	}
	var kept []forwarded
	for _, f := range fs {
		kept = append(kept, forwarded{msg: f.msg, target: f.target})
	}
	b2, in2 := batch("second", 9) // longer: the decoder's slices grow
	fs2, err := d.decode(b2)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range [][]forwarded{in1, in2} {
		got := kept
		if i == 1 {
			got = fs2
		}
		if len(got) != len(want) {
			t.Fatalf("batch %d: %d publishes, want %d", i+1, len(got), len(want))
		}
		for j := range want {
			g, w := got[j], want[j]
			if g.target != w.target || g.msg.Reply != w.msg.Reply || !reflect.DeepEqual(g.msg.Header, w.msg.Header) || string(g.msg.Data) != string(w.msg.Data) {
				t.Errorf("batch %d publish %d: %q %q %v %q, want %q %q %v %q", i+1, j, g.target, g.msg.Reply, g.msg.Header, g.msg.Data, w.target, w.msg.Reply, w.msg.Header, w.msg.Data)
			}
		}
	}
}
