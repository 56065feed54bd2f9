package fleet

import (
	"fmt"
	"reflect"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/natsdelay/natsdelay/bridge/wire"
)

// handed is a cell's service that keeps the subjects of each call it is
// handed.
type handed struct {
	mu    sync.Mutex
	calls [][]string
}

func (h *handed) Ingest(req micro.Request) { h.IngestBatch([]micro.Request{req}) }

func (h *handed) IngestBatch(reqs []micro.Request) {
	var call []string
	for _, r := range reqs {
		call = append(call, r.Subject())
	}
	h.mu.Lock()
	h.calls = append(h.calls, call)
	h.mu.Unlock()
}

func (*handed) Leader() bool                  { return true }
func (*handed) Leads() bool                   { return true }
func (*handed) Info() (wire.InfoReply, error) { return wire.InfoReply{}, nil }

func (h *handed) took() [][]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([][]string(nil), h.calls...)
}

func local(s string) *request { return &request{msg: &nats.Msg{Subject: s}, subject: s} }

// What the ingest's and the forwards' handlers take for the node's own
// cell waits while the other handler is in a burst, and goes to the
// service in one call, in the order taken, once both bursts ended; a
// handler alone hands over at its burst's end; a burst that does not end
// is handed over at maxLocal.
func TestHandover_BothHandlersBurstsInOneCall(t *testing.T) {
	h := &handed{}
	n := &Node{svc: h, batcher: h}

	n.begin(fromForwards)
	n.queueLocal(local("f1"))
	n.begin(fromIngest)
	n.queueLocal(local("i1"))
	n.endBurst(fromIngest)
	if got := h.took(); len(got) != 0 {
		t.Fatalf("handed %v while the forwards' burst goes on, want nothing", got)
	}
	n.queueLocal(local("f2"))
	n.endBurst(fromForwards)
	if got, want := h.took(), [][]string{{"f1", "i1", "f2"}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("handed %v, want %v", got, want)
	}

	n.begin(fromIngest)
	n.queueLocal(local("i2"))
	n.endBurst(fromIngest)
	if got, want := h.took()[1:], [][]string{{"i2"}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("a lone burst: handed %v, want %v", got, want)
	}

	n.begin(fromIngest)
	n.begin(fromForwards)
	for i := range maxLocal + 1 {
		n.queueLocal(local(fmt.Sprint(i)))
	}
	if got := h.took()[2:]; len(got) != 1 || len(got[0]) != maxLocal {
		t.Fatalf("%d taken in bursts that go on: handed %d calls, want one of %d", maxLocal+1, len(got), maxLocal)
	}
	n.endBurst(fromForwards)
	n.endBurst(fromIngest)
	if got := h.took()[3:]; !reflect.DeepEqual(got, [][]string{{fmt.Sprint(maxLocal)}}) {
		t.Fatalf("after both bursts: handed %v, want the last message", got)
	}
}
