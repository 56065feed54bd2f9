package console

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge/bridgetest"
	"github.com/natsdelay/natsdelay/bridge/wire"
)

// TestOverview_RatesFromTheService checks that the overview's rates are
// read from the service itself: 20 messages ingested, delivered and ACKed
// between two samples 10 s apart (on the console's clock) show as 2.00
// per second each, with their fire lateness counted, and "the last
// minute" spans exactly those samples.
func TestOverview_RatesFromTheService(t *testing.T) {
	h := bridgetest.New(t, nil)
	var mu sync.Mutex
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	// NB: the ticker never fires within the test: the samples are the
	// test's.
	c, err := New(Config{Addr: "127.0.0.1:7070", SampleEvery: time.Hour, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetService(h.Service)
	c.takeSample()

	const n = 20
	acked := make(chan struct{}, n)
	sub, err := h.Conn.Subscribe("work.>", func(m *nats.Msg) {
		if m.Respond([]byte("+ACK")) == nil {
			acked <- struct{}{}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	for i := range n {
		m := nats.NewMsg(wire.DefaultIngestPrefix + ".work." + string(rune('a'+i)))
		m.Header.Set(wire.HeaderDelay, "1ms")
		rep, err := h.Conn.RequestMsg(m, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := wire.ParseError(rep.Header, rep.Data); err != nil {
			t.Fatal(err)
		}
	}
	for range n {
		<-acked
	}
	// The ACKs were sent; the service settles them as they arrive. NB: a
	// delivery counts once the flush after it has come back, which an
	// ACK may beat.
	deadline := time.Now().Add(10 * time.Second)
	for tot := h.Service.Totals(); tot.Acked < n || tot.Delivered < n; tot = h.Service.Totals() {
		if time.Now().After(deadline) {
			t.Fatalf("the service counted %d deliveries and %d ACKs of %d", tot.Delivered, tot.Acked, n)
		}
		time.Sleep(5 * time.Millisecond) // polling the counter, bounded by the deadline
	}
	mu.Lock()
	now = now.Add(10 * time.Second)
	mu.Unlock()
	c.takeSample()

	w := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodGet, "http://127.0.0.1:7070/ui/", nil)
	c.ServeHTTP(w, r)
	if w.Code != http.StatusOK {
		t.Fatalf("overview: %d\n%s", w.Code, w.Body)
	}
	body := w.Body.String()
	row := `<tr><th scope="row">last minute</th><td class="num">2.00</td><td class="num">2.00</td><td class="num">2.00</td>`
	if !strings.Contains(body, row) {
		t.Errorf("overview: no row %s in\n%s", row, body)
	}
	if strings.Contains(body, `<td class="num">–</td>`) {
		t.Errorf("overview: the lateness of 20 deliveries is not shown:\n%s", body)
	}
}

// TestQuantile checks the lateness buckets the overview names.
func TestQuantile(t *testing.T) {
	counts := make([]uint64, 18)
	if got := quantile(counts, 0.5); got != "–" {
		t.Errorf("no deliveries: %q", got)
	}
	counts[0], counts[3], counts[17] = 98, 1, 1 // ≤1ms, ≤8ms, over the last bound
	for _, c := range []struct {
		q    float64
		want string
	}{{0.5, "≤ 1ms"}, {0.99, "≤ 8ms"}, {1, "> 1m5.536s"}} {
		if got := quantile(counts, c.q); got != c.want {
			t.Errorf("quantile %g: %q, want %q", c.q, got, c.want)
		}
	}
}
