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

// TestBatch_RoundTrip_ManyHeaders checks a publish with more header
// pairs than a reader keeps on its stack, several values of one name
// among them, and that what a batch decodes to keeps its own copy of the
// strings: the batch's buffer overwritten after it is read changes none
// of them.
func TestBatch_RoundTrip_ManyHeaders(t *testing.T) {
	h := nats.Header{"Many": {"1", "2", "3", "4", "5"}}
	for i := range 12 {
		h[fmt.Sprintf("X-%02d", i)] = []string{fmt.Sprintf("value-%d", i)}
	}
	in := []fleet.BatchPublish{
		{Subject: "orders.many", Reply: "_INBOX.m.1", Header: h, Data: []byte("payload")},
		{Subject: "orders.next", Reply: "_INBOX.m.2", Header: nats.Header{"Delay": {"1h"}}, Data: []byte("next")},
	}
	b := fleet.EncodeBatch(in)
	out, err := fleet.DecodeBatch(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(out, in) {
		t.Fatalf("decoded %+v, want %+v", out, in)
	}
	for i := range b {
		b[i] = 'z'
	}
	out[1].Data = []byte("next") // the payload is the batch's own, by design
	out[0].Data = []byte("payload")
	if !reflect.DeepEqual(out, in) {
		t.Fatalf("after the batch's buffer changed, decoded %+v, want %+v", out, in)
	}
	// A value appended to one name leaves the other names' values alone.
	out[1].Header.Add("Delay", "2h")
	out[0].Header.Add("X-00", "added")
	if got := out[0].Header.Values("X-01"); !reflect.DeepEqual(got, []string{"value-1"}) {
		t.Fatalf("X-01 after adding to X-00: %q", got)
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
	once             sync.Once
}

// open lets every Ingest go, now and from now on.
func (g *gate) open() { g.once.Do(func() { close(g.release) }) }

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

// burst holds router b's ingest handler (on hop.>) in b's own service (b owns the
// partition of "hold"), publishes n requests on subjects that owner a
// owns, each with a reply subject of its own under inbox, and lets b go
// once NATS holds all n for b's handler: b must then forward them as a
// burst. It returns the subjects, the message i being on subjects[i%5], and
// every answer to inbox.>, the held request's (inbox.hold) among them.
func burst(t *testing.T, nc *nats.Conn, b *fleet.Node, g *gate, n int, inbox string) ([]string, <-chan *nats.Msg) {
	t.Helper()
	answers := make(chan *nats.Msg, 256)
	sub, err := nc.ChanSubscribe(inbox+".>", answers)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	subjects := burstSubjects(fleet.Partition("hold", 16), 16, 5)
	if err := nc.PublishRequest("hop.hold", inbox+".hold", nil); err != nil {
		t.Fatal(err)
	}
	received(t, toStrings(g.entered), "b's handler held")
	sendBehindHeld(t, nc, b, g, n, func(i int) string { return "hop." + subjects[i%5] }, func(i int) string { return fmt.Sprintf("%s.%d", inbox, i) })
	return subjects, answers
}

// sendBehindHeld publishes n messages to schedule (subject and reply of
// the i-th from subject and reply) while b's ingest handler is held on
// one, waits until NATS holds all of them for the handler, and lets it
// go: the handler then finds them pending together, as one burst.
func sendBehindHeld(t *testing.T, nc *nats.Conn, b *fleet.Node, g *gate, n int, subject, reply func(i int) string) {
	t.Helper()
	for i := range n {
		m := &nats.Msg{Subject: subject(i), Reply: reply(i), Header: nats.Header{"Delay": {"1h"}}, Data: []byte(fmt.Sprint(i))}
		if err := nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); b.IngestPending() < n; {
		if time.Now().After(deadline) {
			t.Fatalf("NATS holds %d messages for b's handler, want %d", b.IngestPending(), n)
		}
		time.Sleep(time.Millisecond)
	}
	g.open()
}

// toStrings turns the signals of ch into strings for received.
func toStrings(ch <-chan struct{}) <-chan string {
	out := make(chan string, 1)
	go func() {
		if _, ok := <-ch; ok {
			out <- "signal"
		}
	}()
	return out
}

// startBurstFleet starts owner a's node with svc (a cluster if
// clustered), and router b's, which owns only the partition of "hold"
// and holds it in g, and waits until b forwards to a.
func startBurstFleet(t *testing.T, nc *nats.Conn, svc fleet.Service, clustered bool) (*fleet.Node, *gate) {
	t.Helper()
	hold := fleet.Partition("hold", 16)
	rec := fleet.Record{Cell: "a", Partitions: 16, Epoch: 1, Owned: allBut(hold, 16)}
	if clustered {
		startClusterNode(t, nc, svc, rec)
	} else {
		startNode(t, nc, svc, rec)
	}
	g := &gate{entered: make(chan struct{}, 1), release: make(chan struct{})}
	// b takes an ingest prefix of its own, so that it alone takes what
	// the test publishes there.
	b, err := fleet.New(nc, g, fleet.Record{Cell: "b", Partitions: 16, Epoch: 1, Owned: []fleet.Range{{From: hold, To: hold}}},
		fleet.Config{Cell: "b", IngestPrefix: "hop", Heartbeat: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		g.open() // a test that failed holding b's handler
		if err := b.Close(); err != nil {
			t.Error(err)
		}
	})
	subject := "hop." + burstSubjects(hold, 16, 1)[0]
	for try := 0; ; try++ {
		err := ask(nc, subject)
		if err == nil {
			return b, g
		}
		if try == 3000 {
			t.Fatalf("b never forwarded to a: %v", err)
		}
		time.Sleep(10 * time.Millisecond) // b has not heard a yet
	}
}

// TestNode_Forward_Burst_OneBatchInOrder checks natural batching through
// a real nats-server: 200 publishes that reach a router while its handler
// is busy go to their owner as one batch, not one forward each; the
// owner takes each, in the order they were published, under its own
// ingest prefix, with its headers and payload, and answers each
// publisher on its own reply subject.
func TestNode_Forward_Burst_OneBatchInOrder(t *testing.T) {
	nc := startNATS(t)
	a := newRecorder()
	b, g := startBurstFleet(t, nc, a, false)
	before := len(a.taken())
	batches := make(chan *nats.Msg, 16)
	singles := make(chan *nats.Msg, 256)
	for subject, ch := range map[string]chan *nats.Msg{fleet.CellPrefix + ".a.FWD.*": batches, fleet.CellPrefix + ".a.FWD.*.>": singles} {
		sub, err := nc.ChanSubscribe(subject, ch)
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
	}
	const n = 200
	subjects, answers := burst(t, nc, b, g, n, "_INBOX.burst")
	replied := map[string]string{}
	for range n + 1 {
		select {
		case m := <-answers:
			replied[m.Subject] = string(m.Data)
		case <-time.After(30 * time.Second):
			t.Fatalf("%d of %d publishers answered", len(replied), n+1)
		}
	}
	for i := range n {
		if got, want := replied[fmt.Sprintf("_INBOX.burst.%d", i)], "$DELAY.CELL.a.IN."+subjects[i%5]; got != want {
			t.Fatalf("publisher %d answered %q, want a's answer %q", i, got, want)
		}
	}
	if err := nc.Flush(); err != nil { // the observers have every forward
		t.Fatal(err)
	}
	if len(batches) != 1 || len(singles) != 0 {
		t.Fatalf("a was sent %d batches and %d single forwards, want the one batch", len(batches), len(singles))
	}
	took := a.taken()[before:]
	if len(took) != n {
		t.Fatalf("a took %d, want %d", len(took), n)
	}
	for i, m := range took {
		want := fmt.Sprint(i)
		if m.Subject != "$DELAY.CELL.a.IN."+subjects[i%5] || string(m.Data) != want || m.Header.Get("Delay") != "1h" || m.Reply != fmt.Sprintf("_INBOX.burst.%d", i) {
			t.Fatalf("a's message %d: %s %q %v reply %s, want publish %s in order", i, m.Subject, m.Data, m.Header, m.Reply, want)
		}
	}
}

// TestNode_Forward_Burst_ToCluster_Relayed checks that a batch to a cell
// that is a cluster carries the router's reply subjects, and that the
// owner's answers reach each publisher through the relay.
func TestNode_Forward_Burst_ToCluster_Relayed(t *testing.T) {
	nc := startNATS(t)
	a := &standby{fakeService: &fakeService{got: make(chan string, 1024)}, leads: true, lease: true}
	b, g := startBurstFleet(t, nc, a, true)
	batches := make(chan *nats.Msg, 16)
	bs, err := nc.ChanSubscribe(fleet.CellPrefix+".a.FWD.*", batches)
	if err != nil {
		t.Fatal(err)
	}
	defer bs.Unsubscribe()
	const n = 100
	_, answers := burst(t, nc, b, g, n, "_INBOX.relayed")
	replied := map[string]bool{}
	for range n + 1 {
		select {
		case m := <-answers:
			if m.Subject != "_INBOX.relayed.hold" && string(m.Data) != `{"tag":"t"}` {
				t.Fatalf("%s answered %q", m.Subject, m.Data)
			}
			replied[m.Subject] = true
		case <-time.After(30 * time.Second):
			t.Fatalf("%d of %d publishers answered", len(replied), n+1)
		}
	}
	if len(replied) != n+1 {
		t.Fatalf("%d publishers answered, want %d", len(replied), n+1)
	}
	m := <-batches
	ps, err := fleet.DecodeBatch(m.Data)
	if err != nil || len(ps) != n {
		t.Fatalf("batch of %d: %v", len(ps), err)
	}
	for _, p := range ps {
		if !strings.HasPrefix(p.Reply, fleet.RelayPrefix+".") {
			t.Fatalf("batched with reply %q, want the router's", p.Reply)
		}
	}
}

// TestNode_ReceiveBatch_StaleMap_ToldOnceAndSentOn sends a batch of three
// publishes, as a router with a stale map would, to cell c, which owns
// nothing: c must tell the router once, not once a publish, and send
// each on to a, the owner, which takes them in order and answers each
// publisher.
func TestNode_ReceiveBatch_StaleMap_ToldOnceAndSentOn(t *testing.T) {
	nc := startNATS(t)
	a := newRecorder()
	startNode(t, nc, a, fleet.Record{Cell: "a", Partitions: 16, Epoch: 1, Owned: []fleet.Range{{From: 0, To: 15}}})
	startNode(t, nc, newFakeService(), fleet.Record{Cell: "c", Partitions: 16, Epoch: 1})
	// Until c serves its forwards: it answers an empty batch sent as a
	// request.
	for try := 0; ; try++ {
		_, err := nc.Request(fleet.CellPrefix+".c.FWD.warm", nil, 10*time.Second)
		if err == nil {
			break
		}
		if try == 3000 {
			t.Fatalf("c never served: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	before := len(a.taken())
	stale := make(chan *nats.Msg, 16)
	ss, err := nc.ChanSubscribe(fleet.StalePrefix+".router1", stale)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Unsubscribe()
	answers := make(chan *nats.Msg, 16)
	as, err := nc.ChanSubscribe("_INBOX.stale.>", answers)
	if err != nil {
		t.Fatal(err)
	}
	defer as.Unsubscribe()
	var ps []fleet.BatchPublish
	for i := range 3 {
		ps = append(ps, fleet.BatchPublish{Subject: "orders.1", Reply: fmt.Sprintf("_INBOX.stale.%d", i), Header: nats.Header{"Delay": {"1h"}}, Data: []byte(fmt.Sprint(i))})
	}
	if err := nc.Publish(fleet.CellPrefix+".c.FWD.router1", fleet.EncodeBatch(ps)); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		select {
		case m := <-answers:
			if string(m.Data) != "$DELAY.CELL.a.IN.orders.1" {
				t.Fatalf("%s answered %q, want a's answer", m.Subject, m.Data)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("a publisher was not answered")
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if len(stale) != 1 {
		t.Fatalf("the router was told %d times, want once", len(stale))
	}
	took := a.taken()[before:]
	for i, m := range took {
		if string(m.Data) != fmt.Sprint(i) || m.Reply != fmt.Sprintf("_INBOX.stale.%d", i) {
			t.Fatalf("a's message %d: %q reply %s, want publish %d in order", i, m.Data, m.Reply, i)
		}
	}
	if len(took) != 3 {
		t.Fatalf("a took %d, want 3", len(took))
	}
}

// TestNode_ReceiveBatch_Malformed_400AndNothingTaken sends the owner
// batches it cannot read, through a real nats-server, as requests: each
// is answered with a 400 that says what is wrong, and none of its
// publishes is taken, not even those before the fault.
func TestNode_ReceiveBatch_Malformed_400AndNothingTaken(t *testing.T) {
	nc := startNATS(t)
	a := newRecorder()
	startNode(t, nc, a, fleet.Record{Cell: "a", Partitions: 16, Epoch: 1, Owned: []fleet.Range{{From: 0, To: 15}}})
	good := fleet.EncodeBatch([]fleet.BatchPublish{{Subject: "orders.1", Reply: "_INBOX.x", Data: []byte("1")}, {Subject: "orders.2", Reply: "_INBOX.y", Data: []byte("2")}})
	for name, c := range map[string]struct {
		body []byte
		want string
	}{
		"cut short":   {good[:len(good)-1], "publish 2: payload: 1 bytes, 0 left"},
		"bad version": {append([]byte{9}, good[1:]...), "version 9, want 1"},
		"empty":       {nil, "empty"},
		"wildcard":    {fleet.EncodeBatch([]fleet.BatchPublish{{Subject: "orders.>"}}), `publish 1: subject "orders.>" is not a subject one can publish to`},
	} {
		r, err := nc.Request(fleet.CellPrefix+".a.FWD.router1", c.body, 10*time.Second)
		for try := 0; errors.Is(err, nats.ErrNoResponders) && try < 3000; try++ { // a does not serve yet
			time.Sleep(10 * time.Millisecond)
			r, err = nc.Request(fleet.CellPrefix+".a.FWD.router1", c.body, 10*time.Second)
		}
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		err = wire.ParseError(r.Header, r.Data)
		var se *wire.ServiceError
		if !errors.As(err, &se) || se.Code != 400 || !strings.Contains(se.Description, `forwarded batch from router "router1": malformed forwarded batch: `+c.want) {
			t.Fatalf("%s: answered %v, want a 400 saying %q", name, err, c.want)
		}
	}
	if took := a.taken(); len(took) != 0 {
		t.Fatalf("a took %d publishes of malformed batches", len(took))
	}
}

// batchRecorder is a recorder that also takes several messages at once
// (fleet.BatchIngester), and keeps how many each call held.
type batchRecorder struct {
	*recorder
	calls []int
}

func (r *batchRecorder) IngestBatch(reqs []micro.Request) {
	r.mu.Lock()
	r.calls = append(r.calls, len(reqs))
	r.mu.Unlock()
	for _, req := range reqs {
		r.Ingest(req)
	}
}

func (r *batchRecorder) batches() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]int(nil), r.calls...)
}

// TestNode_ReceiveBatch_HandedOverAtOnce checks that the owner hands the
// publishes of a forwarded batch to a service that takes several at once
// in one call, in the order they were published, so that its group
// commit gets them together: 200 publishes forwarded as one batch are
// one call of 200.
func TestNode_ReceiveBatch_HandedOverAtOnce(t *testing.T) {
	nc := startNATS(t)
	a := &batchRecorder{recorder: newRecorder()}
	b, g := startBurstFleet(t, nc, a, false)
	before, calls := len(a.taken()), len(a.batches())
	const n = 200
	subjects, answers := burst(t, nc, b, g, n, "_INBOX.once")
	for i := range n + 1 {
		select {
		case <-answers:
		case <-time.After(30 * time.Second):
			t.Fatalf("%d of %d publishers answered", i, n+1)
		}
	}
	if got := a.batches()[calls:]; !reflect.DeepEqual(got, []int{n}) {
		t.Fatalf("a was handed batches of %v, want one of %d", got, n)
	}
	took := a.taken()[before:]
	for i, m := range took {
		if m.Subject != "$DELAY.CELL.a.IN."+subjects[i%5] || string(m.Data) != fmt.Sprint(i) {
			t.Fatalf("a's message %d: %s %q, want publish %d in order", i, m.Subject, m.Data, i)
		}
	}
	if len(took) != n {
		t.Fatalf("a took %d, want %d", len(took), n)
	}
}

// batchGate is a gate whose service also takes several messages at once,
// keeping each call's messages in order.
type batchGate struct {
	*gate
	mu    sync.Mutex
	calls [][]string // each call's payloads
	n     chan struct{}
}

func (g *batchGate) IngestBatch(reqs []micro.Request) {
	var call []string
	for _, req := range reqs {
		call = append(call, string(req.Data()))
		_ = req.Respond([]byte(`{"tag":"t"}`))
	}
	g.mu.Lock()
	g.calls = append(g.calls, call)
	g.mu.Unlock()
	g.n <- struct{}{}
}

// startGatedCell starts the node of cell b, which owns all 16
// partitions and serves its ingest on prefix, in front of a batchGate,
// whose hand-overs of one message (Ingest) wait until the gate opens.
func startGatedCell(t *testing.T, nc *nats.Conn, prefix string) (*fleet.Node, *batchGate) {
	t.Helper()
	g := &batchGate{gate: &gate{entered: make(chan struct{}, 1), release: make(chan struct{})}, n: make(chan struct{}, 16)}
	b, err := fleet.New(nc, g, fleet.Record{Cell: "b", Partitions: 16, Epoch: 1, Owned: []fleet.Range{{From: 0, To: 15}}},
		fleet.Config{Cell: "b", IngestPrefix: prefix, Heartbeat: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		g.open()
		if err := b.Close(); err != nil {
			t.Error(err)
		}
	})
	return b, g
}

// TestNode_Route_OwnBurst_HandedOverTogether checks that what a burst of
// a node's ingest holds for its own cell goes to a service that takes
// several at once in calls of at most 256, in the order published, and
// that every publisher is answered: 300 publishes that reach the node
// while its handler is busy are two calls, of 256 and 44.
func TestNode_Route_OwnBurst_HandedOverTogether(t *testing.T) {
	nc := startNATS(t)
	b, g := startGatedCell(t, nc, "own")
	answers := make(chan *nats.Msg, 512)
	sub, err := nc.ChanSubscribe("_INBOX.own.>", answers)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	holds := make(chan *nats.Msg, 64)
	hsub, err := nc.ChanSubscribe("_INBOX.hold.>", holds)
	if err != nil {
		t.Fatal(err)
	}
	defer hsub.Unsubscribe()
	// The first publish, alone, goes to Ingest and holds the handler. It
	// is sent again only when NATS answers that nobody serves it yet (b
	// subscribes at its first heartbeat): sent again while the first
	// waits for the handler on a loaded machine, it was one more publish
	// in the burst.
	var holdReply string
	for try := 0; ; try++ {
		holdReply = fmt.Sprintf("_INBOX.hold.%d", try)
		if err := nc.PublishRequest("own.hold", holdReply, nil); err != nil {
			t.Fatal(err)
		}
		select {
		case <-g.entered:
		case m := <-holds:
			if m.Header.Get("Status") != "503" || try == 3000 {
				t.Fatalf("the held publish answered %q %v before its handler ran, want no responders until b serves", m.Data, m.Header)
			}
			time.Sleep(10 * time.Millisecond) // b does not serve yet
			continue
		case <-time.After(30 * time.Second):
			t.Fatal("b never served its ingest")
		}
		break
	}
	const n = 300
	sendBehindHeld(t, nc, b, g.gate, n, func(i int) string { return fmt.Sprintf("own.s.%d", i%7) }, func(i int) string { return fmt.Sprintf("_INBOX.own.%d", i) })
	replied := map[string]bool{}
	for len(replied) < n {
		select {
		case m := <-answers:
			replied[m.Subject] = true
		case <-time.After(30 * time.Second):
			t.Fatalf("%d of %d publishers answered", len(replied), n)
		}
	}
	select {
	case m := <-holds:
		if m.Subject != holdReply || m.Header.Get("Status") != "" {
			t.Fatalf("the held publish answered on %s: %q %v", m.Subject, m.Data, m.Header)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the held publish was not answered")
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	var sizes []int
	var order []string
	for _, c := range g.calls {
		sizes = append(sizes, len(c))
		order = append(order, c...)
	}
	if !reflect.DeepEqual(sizes, []int{256, n - 256}) {
		t.Fatalf("b's service was handed calls of %v, want 256 and %d", sizes, n-256)
	}
	for i, d := range order {
		if d != fmt.Sprint(i) {
			t.Fatalf("handed over %d-th: publish %s, want %d in order", i, d, i)
		}
	}
}

// TestNode_IngestAndForwards_OneHandOver checks that what a node takes
// for its own cell from its ingest and from the forwards other routers
// send it, arriving together, goes to its service in one call, in the
// order NATS brought it, so that its group commit writes it as one
// commit: 80 publishes to the node's ingest, a batch of 80 forwarded by
// another router and 80 more publishes, all reaching the node while it
// is busy, are one call of 240, and every publisher is answered.
func TestNode_IngestAndForwards_OneHandOver(t *testing.T) {
	nc := startNATS(t)
	b, g := startGatedCell(t, nc, "both")
	answers := make(chan *nats.Msg, 512)
	sub, err := nc.ChanSubscribe("_INBOX.both.>", answers)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	// The node is held on a single forward: it is answered by NATS's
	// no-responders until the node takes its cell's forwards (at its
	// first heartbeat), and once it is taken both subscriptions are up.
	// NB: the request waits long enough for the no-responders answer on
	// a loaded machine; with 5 ms it timed out before that answer came,
	// and the test waited for a hold no node had taken.
	hold := fleet.CellPrefix + ".b.FWD.r1.hold"
	for try := 0; ; try++ {
		m, err := nc.Request(hold, nil, 2*time.Second)
		if errors.Is(err, nats.ErrNoResponders) && try < 3000 {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if err == nil {
			t.Fatalf("the held forward answered %q before the node was let go", m.Data)
		}
		break
	}
	received(t, toStrings(g.entered), "b's hold")
	const part = 80
	publish := func(from int) {
		for i := from; i < from+part; i++ {
			m := &nats.Msg{Subject: fmt.Sprintf("both.s.%d", i%7), Reply: fmt.Sprintf("_INBOX.both.%d", i), Header: nats.Header{"Delay": {"1h"}}, Data: []byte(fmt.Sprint(i))}
			if err := nc.PublishMsg(m); err != nil {
				t.Fatal(err)
			}
		}
	}
	publish(0)
	var batch []fleet.BatchPublish
	for i := part; i < 2*part; i++ {
		batch = append(batch, fleet.BatchPublish{Subject: fmt.Sprintf("s.%d", i%7), Reply: fmt.Sprintf("_INBOX.both.%d", i), Header: nats.Header{"Delay": {"1h"}}, Data: []byte(fmt.Sprint(i))})
	}
	if err := nc.Publish(fleet.CellPrefix+".b.FWD.r2", fleet.EncodeBatch(batch)); err != nil {
		t.Fatal(err)
	}
	publish(2 * part)
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); b.IngestPending() < 2*part+1; {
		if time.Now().After(deadline) {
			t.Fatalf("NATS holds %d messages for b, want %d", b.IngestPending(), 2*part+1)
		}
		time.Sleep(time.Millisecond)
	}
	g.open()
	replied := map[string]bool{}
	for len(replied) < 3*part {
		select {
		case m := <-answers:
			replied[m.Subject] = true
		case <-time.After(30 * time.Second):
			t.Fatalf("%d of %d publishers answered", len(replied), 3*part)
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.calls) != 1 || len(g.calls[0]) != 3*part {
		var sizes []int
		for _, c := range g.calls {
			sizes = append(sizes, len(c))
		}
		t.Fatalf("b's service was handed calls of %v, want one of %d", sizes, 3*part)
	}
	for i, d := range g.calls[0] {
		if d != fmt.Sprint(i) {
			t.Fatalf("handed over %d-th: publish %s, want %d in order", i, d, i)
		}
	}
}
