package fleet_test

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/natsdelay/natsdelay/bridge/fleet"
	"github.com/natsdelay/natsdelay/bridge/wire"
)

// TestBatch_RoundTrip checks that a batch gives back each publish as it
// went in, in order: subject, reply (or none), headers with several
// values, and payload (or none).
func TestBatch_RoundTrip(t *testing.T) {
	in := []fleet.BatchPublish{
		{Subject: "orders.1", Reply: "_INBOX.a.1", Header: nats.Header{"Delay": {"1h"}, "X-Two": {"a", "b"}}, Data: []byte("payload")},
		{Subject: "orders.2", Header: nats.Header{"Delay-Id": {"x"}}, Data: []byte{}},
		{Subject: "a.b.c", Reply: "r", Data: make([]byte, 300)},
	}
	out, err := fleet.DecodeBatch(fleet.EncodeBatch(in))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(out, in) {
		t.Fatalf("decoded %+v, want %+v", out, in)
	}
}

// TestBatch_Malformed checks that a batch that cannot be read whole is an
// error that says what is wrong, for every way of cutting a good batch
// short and for the bad fields one can write.
func TestBatch_Malformed(t *testing.T) {
	first := fleet.BatchPublish{Subject: "orders.1", Reply: "_INBOX.1", Header: nats.Header{"Delay": {"1h"}}, Data: []byte("x")}
	good := fleet.EncodeBatch([]fleet.BatchPublish{first, {Subject: "orders.2", Reply: "_INBOX.2", Data: []byte("y")}})
	between := len(fleet.EncodeBatch([]fleet.BatchPublish{first}))
	cases := map[string][]byte{
		"empty":                  nil,
		"version 2":              append([]byte{2}, good[1:]...),
		"no publish":             {1},
		"subject length too big": {1, 200, 'a'},
		"overlong varint":        {1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
		"wildcard subject":       fleet.EncodeBatch([]fleet.BatchPublish{{Subject: "orders.*"}}),
		"empty token":            fleet.EncodeBatch([]fleet.BatchPublish{{Subject: "orders..1"}}),
		"space in subject":       fleet.EncodeBatch([]fleet.BatchPublish{{Subject: "orders 1"}}),
		"header count too big":   {1, 1, 'a', 0, 100},
	}
	for cut := 2; cut < len(good); cut++ {
		if cut == between {
			continue // a good batch of one
		}
		cases[fmt.Sprintf("cut at %d of %d", cut, len(good))] = good[:cut]
	}
	for name, b := range cases {
		if _, err := fleet.DecodeBatch(b); !errors.Is(err, fleet.ErrBatch) || !strings.HasPrefix(err.Error(), "malformed forwarded batch: ") {
			t.Errorf("%s: %v, want a malformed batch error", name, err)
		}
	}
}

// recorder is a cell's service that keeps what it is handed, in order,
// and answers each with its subject.
type recorder struct {
	mu  sync.Mutex
	got []*nats.Msg
	n   chan struct{}
}

func newRecorder() *recorder { return &recorder{n: make(chan struct{}, 4096)} }

func (r *recorder) Ingest(req micro.Request) {
	r.mu.Lock()
	r.got = append(r.got, &nats.Msg{Subject: req.Subject(), Reply: req.Reply(), Data: req.Data(), Header: nats.Header(req.Headers())})
	r.mu.Unlock()
	_ = req.Respond([]byte(req.Subject()))
	r.n <- struct{}{}
}
func (*recorder) Leader() bool                  { return true }
func (*recorder) Leads() bool                   { return true }
func (*recorder) Info() (wire.InfoReply, error) { return wire.InfoReply{}, nil }

func (r *recorder) taken() []*nats.Msg {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*nats.Msg(nil), r.got...)
}

// gate is a cell's service whose Ingest waits until it is let go.
type gate struct {
	entered, release chan struct{}
}

func (g *gate) Ingest(req micro.Request) {
	g.entered <- struct{}{}
	<-g.release
	_ = req.Respond([]byte(`{"tag":"t"}`))
}
func (*gate) Leader() bool                  { return true }
func (*gate) Leads() bool                   { return true }
func (*gate) Info() (wire.InfoReply, error) { return wire.InfoReply{}, nil }

// allBut are the ranges of partitions 0 to n-1 without p.
func allBut(p, n int) []fleet.Range {
	var rs []fleet.Range
	if p > 0 {
		rs = append(rs, fleet.Range{From: 0, To: p - 1})
	}
	if p < n-1 {
		rs = append(rs, fleet.Range{From: p + 1, To: n - 1})
	}
	return rs
}

// burstSubjects are count subjects whose partition of n is not p.
func burstSubjects(p, n, count int) []string {
	var out []string
	for i := 0; len(out) < count; i++ {
		s := fmt.Sprintf("burst.%d", i)
		if fleet.Partition(s, n) != p {
			out = append(out, s)
		}
	}
	return out
}
