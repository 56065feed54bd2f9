package bridge

import (
	"encoding/json"
	"strconv"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/test"
	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/keys"
)

// The benchmarks of this file time the per-message work of the bridge on
// its own, without the store or a consumer, so that allocs/op, which does
// not vary from run to run, shows what a change saves.

// benchLimits are the limits a service on a default server checks, with a
// dead-letter subject so that ingest measures the dead letter too.
func benchLimits() scheduleLimits {
	return scheduleLimits{
		maxPayload: 1 << 20, serverMaxPayload: 1 << 20, maxControlLine: DefaultMaxControlLine,
		ackPrefix: wire.DefaultAckPrefix, deadLetter: "dead.letters",
		reserved: []string{wire.DefaultIngestPrefix, wire.DefaultAckPrefix, wire.DefaultAPIPrefix, "$SRV"},
	}
}

// BenchmarkParseSchedule is ingest's parsing and size checks of a message
// as natsdelay-bench sends it: Delay-At, one header passed on, 256 bytes.
func BenchmarkParseSchedule(b *testing.B) {
	now := time.Now()
	at := now.Add(time.Hour)
	h := nats.Header{}
	h.Set(wire.HeaderAt, at.UTC().Format(time.RFC3339Nano))
	h.Set("Bench-Fire-At", strconv.FormatInt(at.UnixNano(), 10))
	data := make([]byte, 256)
	lim := benchLimits()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := parseSchedule("orders.eu.1234", h, data, now, lim); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDeliver is the publisher's work for one delivery, on a real
// connection to a server with no subscriber on the subject.
func BenchmarkDeliver(b *testing.B) {
	opts := natsserver.DefaultTestOptions
	opts.Port = -1
	srv := natsserver.RunServer(&opts)
	defer srv.Shutdown()
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	p := newPublisher(nc, wire.DefaultAckPrefix, DefaultMaxControlLine)
	now := time.Now().UnixNano()
	msg := &delaystore.StoredMessage{
		Subject: "orders.eu.1234", Payload: make([]byte, 256), EnqueuedAtNs: now, FireAtNs: now,
		Headers: []*delaystore.Header{{Name: "Bench-Fire-At", Values: []string{strconv.FormatInt(now, 10)}}},
	}
	occ := proto.Clone(msg).(*delaystore.StoredMessage)
	occ.Recurrence = &delaystore.Recurrence{EveryNs: int64(time.Second), OccurrenceNs: now, Seq: 2, Planned: true, NextNs: now + int64(time.Second)}
	k := keys.New(uint64(now), 1, 7)
	// An occurrence of an interval schedule, planned, adds Delay-Schedule,
	// Delay-Occurrence and Delay-Next.
	for _, c := range []struct {
		name string
		msg  *delaystore.StoredMessage
	}{{"plain", msg}, {"occurrence", occ}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := p.Deliver(k, c.msg, 1); err != nil {
					b.Fatal(err)
				}
			}
			if err := nc.Flush(); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkParseAck is the reading of a consumer's answer: empty, as
// nats.go's Respond(nil) sends it, and +ACK.
func BenchmarkParseAck(b *testing.B) {
	for _, body := range []string{"", "+ACK"} {
		b.Run(strconv.Quote(body), func(b *testing.B) {
			p := []byte(body)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := parseAck(p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkScheduleReply is the answer to every schedule, beside the
// encoding/json it replaces for plain subjects.
func BenchmarkScheduleReply(b *testing.B) {
	now := time.Now().UnixNano()
	m := &delaystore.StoredMessage{Subject: "orders.eu.1234", FireAtNs: now}
	k := keys.New(uint64(now), 1, 7)
	b.Run("json.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(wire.ScheduleReply{Tag: k.Tag(), Subject: m.Subject, FireAt: formatTime(m.FireAtNs)}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("scheduleReply", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = scheduleReply(k, m)
		}
	})
}
