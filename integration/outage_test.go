package integration_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	natsserver "github.com/nats-io/nats-server/v2/test"
	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge"
	"github.com/natsdelay/natsdelay/bridge/bridgetest"
	"github.com/natsdelay/natsdelay/bridge/wire"
)

// request outcomes, as the publisher saw them.
const (
	outcomeInFlight = "in flight"
	outcomeAcked    = "acked"
	outcomeErrored  = "errored"
)

// outageLog is what the clients of an outage test saw. Each request carries
// its own ID as payload, so a delivery can be traced to the request that
// caused it even when that request got no reply. mu guards the maps.
type outageLog struct {
	mu        sync.Mutex
	outcome   map[string]string    // request ID -> outcome
	tagOf     map[string]string    // request ID -> tag of its successful reply
	acked     map[string]time.Time // tag -> when its reply arrived
	delivered map[string]string    // tag -> request ID in the payload
	problems  []string             // what the callbacks found wrong; they cannot fail the test

	ackedN     atomic.Int64 // successful replies
	erroredN   atomic.Int64 // requests that failed or timed out
	deliveredN atomic.Int64 // deliveries
}

func newOutageLog() *outageLog {
	return &outageLog{
		outcome:   map[string]string{},
		tagOf:     map[string]string{},
		acked:     map[string]time.Time{},
		delivered: map[string]string{},
	}
}

// problem records something wrong seen in a callback. mu must be held.
func (l *outageLog) problem(format string, args ...any) {
	if len(l.problems) < 20 {
		l.problems = append(l.problems, fmt.Sprintf(format, args...))
	}
}

// publish sends acknowledged requests to subject until stop is closed.
// Requests are paced, so that load stays moderate on a shared machine and
// a publisher that meets an outage does not spin on it.
func (l *outageLog) publish(nc *nats.Conn, name, subject string, r *rand.Rand, stop <-chan struct{}) {
	for i := 0; ; i++ {
		id := fmt.Sprintf("%s-%d", name, i)
		m := nats.NewMsg(wire.DefaultIngestPrefix + "." + subject)
		// Mostly short delays; some long enough to fall due during an outage.
		d := r.IntN(300)
		if r.IntN(10) == 0 {
			d = 1000 + r.IntN(2000)
		}
		m.Header.Set("Delay", fmt.Sprintf("%dms", d))
		m.Data = []byte(id)
		l.mu.Lock()
		l.outcome[id] = outcomeInFlight
		l.mu.Unlock()
		rep, err := nc.RequestMsg(m, 2*time.Second)
		var body struct {
			Tag string `json:"tag"`
		}
		ok := err == nil && rep.Header.Get(wire.HeaderServiceErrorCode) == "" && json.Unmarshal(rep.Data, &body) == nil && body.Tag != ""
		l.mu.Lock()
		if ok {
			l.outcome[id] = outcomeAcked
			l.tagOf[id] = body.Tag
			l.acked[body.Tag] = time.Now()
		} else {
			l.outcome[id] = outcomeErrored
		}
		l.mu.Unlock()
		pause := 5 * time.Millisecond
		if ok {
			l.ackedN.Add(1)
		} else {
			l.erroredN.Add(1)
			pause = 50 * time.Millisecond
		}
		select {
		case <-stop:
			return
		case <-time.After(pause):
		}
	}
}

// onDelivery records a delivery and ACKs it. An ACK sent while the
// connection is down is buffered or lost; a lost one means a redelivery.
func (l *outageLog) onDelivery(m *nats.Msg) {
	tag := m.Header.Get(wire.HeaderTag)
	l.mu.Lock()
	if prev, ok := l.delivered[tag]; ok && prev != string(m.Data) {
		l.problem("tag %s delivered with payload %q and %q", tag, prev, m.Data)
	}
	l.delivered[tag] = string(m.Data)
	l.mu.Unlock()
	l.deliveredN.Add(1)
	_ = m.Respond(nil)
}

// deliveredAckedSince counts the tags acknowledged at or after t that have been
// delivered.
func (l *outageLog) deliveredAckedSince(t time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for tag, at := range l.acked {
		if _, ok := l.delivered[tag]; ok && !at.Before(t) {
			n++
		}
	}
	return n
}

// allDelivered reports the acknowledged tags not delivered yet.
func (l *outageLog) allDelivered() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	missing := 0
	for tag := range l.acked {
		if _, ok := l.delivered[tag]; !ok {
			missing++
		}
	}
	if missing > 0 {
		return fmt.Errorf("%d of %d acknowledged messages not delivered", missing, len(l.acked))
	}
	return nil
}

// check fails tb for anything the callbacks found, and for any delivery
// that cannot be traced to a request that was acknowledged with that tag,
// or that failed (then the service may have stored it without the reply
// getting through). It returns the deliveries of failed requests. Call it
// once the publishers have stopped.
func (l *outageLog) check(tb testing.TB) (fromErrored int) {
	tb.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range l.problems {
		tb.Error(p)
	}
	bad := 0
	for tag, id := range l.delivered {
		switch l.outcome[id] {
		case outcomeAcked:
			if l.tagOf[id] == tag {
				continue
			}
		case outcomeErrored:
			fromErrored++
			continue
		}
		if bad++; bad <= 5 {
			tb.Errorf("delivered %s with payload %q: request outcome %q, reply tag %q", tag, id, l.outcome[id], l.tagOf[id])
		}
	}
	if bad > 0 {
		tb.Errorf("%d deliveries not traced to an acknowledged or failed request", bad)
	}
	return fromErrored
}

// checkStored lists the messages pending on subject and GETs each one's
// payload, and fails tb for any that cannot be traced to a request that was
// acknowledged with that tag, or that failed: what the service stores must
// have been asked for. It returns how many it checked. Call it once the
// publishers have stopped.
func (l *outageLog) checkStored(tb testing.TB, nc *nats.Conn, subject string) int {
	tb.Helper()
	checked := 0
	after := ""
	for {
		var page wire.ListReply
		apiCall(tb, nc, "LIST", map[string]any{"subject": subject, "limit": 1000, "after": after}, &page)
		for _, mi := range page.Messages {
			rep := apiRequest(tb, nc, "GET", map[string]any{"tag": mi.Tag, "payload": true})
			if rep.Header.Get(wire.HeaderServiceErrorCode) == "404" {
				continue // delivered and ACKed since the LIST
			}
			var got wire.MessageInfo
			if err := json.Unmarshal(rep.Data, &got); err != nil || rep.Header.Get(wire.HeaderServiceErrorCode) != "" {
				tb.Fatalf("GET %s: reply %q with headers %v: %v", mi.Tag, rep.Data, rep.Header, err)
			}
			id := string(got.Payload)
			l.mu.Lock()
			outcome, tag := l.outcome[id], l.tagOf[id]
			l.mu.Unlock()
			if !(outcome == outcomeAcked && tag == mi.Tag) && outcome != outcomeErrored {
				tb.Errorf("stored %s with payload %q: request outcome %q, reply tag %q", mi.Tag, id, outcome, tag)
			}
			checked++
		}
		if page.Next == "" {
			return checked
		}
		after = page.Next
	}
}

// freePort returns a TCP port on the loopback that was free a moment ago.
func freePort(tb testing.TB) int {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// runServerOn runs an embedded nats-server on port, so that a test can stop
// it and start a new one where clients will find it again.
func runServerOn(tb testing.TB, port int) *server.Server {
	tb.Helper()
	opts := natsserver.DefaultTestOptions
	opts.Port = port
	s := natsserver.RunServer(&opts)
	tb.Cleanup(s.Shutdown)
	return s
}

// readyStatus is the status code of GET /readyz, or an error.
func readyStatus(c *http.Client, addr string) (int, error) {
	resp, err := c.Get("http://" + addr + "/readyz")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	return resp.StatusCode, nil
}

// waitReady polls /readyz until it answers want.
func waitReady(tb testing.TB, c *http.Client, addr string, want int) {
	tb.Helper()
	checkFor(tb, 60*time.Second, 20*time.Millisecond, func() error {
		code, err := readyStatus(c, addr)
		if err != nil {
			return err
		}
		if code != want {
			return fmt.Errorf("/readyz %d, want %d", code, want)
		}
		return nil
	})
}

// reconnecting connects to url and keeps reconnecting for ever, quickly,
// as a client that rides out an outage would.
func reconnecting(tb testing.TB, url string) *nats.Conn {
	tb.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		tb.Fatalf("connect: %v", err)
	}
	tb.Cleanup(nc.Close)
	return nc
}

// startOutageClients subscribes a consumer that ACKs everything on
// subject and starts publishers to it. The returned func stops the
// publishers and waits for them; calling it again is harmless.
func startOutageClients(tb testing.TB, l *outageLog, url, subject string) (stop func()) {
	tb.Helper()
	consumer := reconnecting(tb, url)
	sub, err := consumer.Subscribe(subject, l.onDelivery)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = sub.Unsubscribe() })
	_ = sub.SetPendingLimits(-1, -1)
	if err := consumer.Flush(); err != nil {
		tb.Fatal(err)
	}
	pub := reconnecting(tb, url)
	done := make(chan struct{})
	var wg sync.WaitGroup
	for p := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.publish(pub, fmt.Sprintf("p%d", p), subject, rand.New(rand.NewPCG(uint64(p), 3)), done)
		}()
	}
	var once sync.Once
	stop = func() {
		once.Do(func() { close(done) })
		wg.Wait()
	}
	tb.Cleanup(stop)
	return stop
}

// waitCount waits until counter has grown by n from its value now.
func waitCount(tb testing.TB, what string, counter *atomic.Int64, n int64) {
	tb.Helper()
	base := counter.Load()
	checkFor(tb, 60*time.Second, 5*time.Millisecond, func() error {
		if got := counter.Load() - base; got < n {
			return fmt.Errorf("%s: %d of %d", what, got, n)
		}
		return nil
	})
}

// TestOutage_NATSRestart_ServiceRecovers runs the real binary against a
// nats-server that is stopped mid-load and started again on the same port.
// It checks that /readyz reports the outage and the recovery, that the
// service reconnects by itself and delivers again (messages scheduled after
// the restart arrive), that nothing it acknowledged is lost, and that it
// acknowledged nothing it did not store: every delivery traces back to a
// request that was acknowledged with that tag, or that failed. It runs the
// binary because what it checks is serve's own: its connection's
// reconnect settings and its /readyz, which the server package under
// cmd/natsdelay sets up and this package cannot import;
// TestOutage_ForceReconnect_InProcess is the same load on the bridge in
// process.
func TestOutage_NATSRestart_ServiceRecovers(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := natsdelayBinary(t)
	port := freePort(t)
	srv := runServerOn(t, port)
	url := srv.ClientURL()
	httpAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	hc := &http.Client{Timeout: 5 * time.Second}

	proc := launch(t, bin, nil, "serve", "--nats", url, "--data-dir", t.TempDir(), "--engine", "pebble",
		"--ack-wait", "1s", "--http", httpAddr)
	stopped := false
	defer func() {
		if !stopped {
			proc.kill(t)
		}
	}()
	waitReady(t, hc, httpAddr, http.StatusOK)

	l := newOutageLog()
	stopClients := startOutageClients(t, l, url, "outage.proc")
	waitCount(t, "acknowledged before the outage", &l.ackedN, 100)
	waitCount(t, "delivered before the outage", &l.deliveredN, 50)

	srv.Shutdown()
	srv.WaitForShutdown()
	waitReady(t, hc, httpAddr, http.StatusServiceUnavailable)
	// Both publishers meet the outage before the server comes back.
	waitCount(t, "requests failed during the outage", &l.erroredN, 2)
	t.Logf("NATS down: %d acknowledged, %d delivered, %d failed so far", l.ackedN.Load(), l.deliveredN.Load(), l.erroredN.Load())

	runServerOn(t, port)
	waitReady(t, hc, httpAddr, http.StatusOK)
	restarted := time.Now()
	checkFor(t, 60*time.Second, 20*time.Millisecond, func() error {
		if n := l.deliveredAckedSince(restarted); n < 50 {
			return fmt.Errorf("%d messages acknowledged after the restart delivered, want 50", n)
		}
		return nil
	})
	stopClients()
	nc := reconnecting(t, url)
	stored := l.checkStored(t, nc, "outage.proc")
	checkFor(t, 60*time.Second, 20*time.Millisecond, l.allDelivered)
	// Everything delivered is ACKed: once the ACKs lost in the outage are
	// made good by redeliveries, nothing is left stored.
	waitPendingWithin(t, nc, 0, 60*time.Second)
	proc.stop(t)
	stopped = true
	fromErrored := l.check(t)
	t.Logf("acknowledged: %d, failed requests: %d, delivered: %d (of failed requests: %d), checked by GET: %d, lost: 0",
		l.ackedN.Load(), l.erroredN.Load(), len(l.delivered), fromErrored, stored)
}

// TestOutage_ForceReconnect_InProcess runs the service in process over a
// reconnecting nats.go connection and makes that connection, and the
// clients', reconnect several times under load. It checks that ingest and
// delivery keep working across each reconnect and that nothing
// acknowledged is lost.
func TestOutage_ForceReconnect_InProcess(t *testing.T) {
	srv := startServer(t)
	svcConn := reconnecting(t, srv.ClientURL())
	svc := bridgetest.StartOn(t, svcConn, engines[1].open(t, t.TempDir()), func(c *bridge.Config) {
		c.Delivery.AckWait = time.Second
	})

	l := newOutageLog()
	stopClients := startOutageClients(t, l, srv.ClientURL(), "outage.inproc")
	const reconnects = 5
	for i := range reconnects {
		waitCount(t, "acknowledged", &l.ackedN, 30)
		waitCount(t, "delivered", &l.deliveredN, 30)
		before := svcConn.Stats().Reconnects
		if err := svcConn.ForceReconnect(); err != nil {
			t.Fatalf("ForceReconnect: %v", err)
		}
		checkFor(t, 30*time.Second, 5*time.Millisecond, func() error {
			if svcConn.Stats().Reconnects == before {
				return fmt.Errorf("reconnect %d: still %d reconnects", i+1, before)
			}
			return svc.Ready()
		})
	}
	// Ingest and delivery work after the last reconnect too.
	waitCount(t, "acknowledged after the last reconnect", &l.ackedN, 30)
	waitCount(t, "delivered after the last reconnect", &l.deliveredN, 30)
	stopClients()
	checkFor(t, 60*time.Second, 20*time.Millisecond, l.allDelivered)
	waitPendingWithin(t, connect(t, srv), 0, 60*time.Second)
	fromErrored := l.check(t)
	t.Logf("reconnects: %d, acknowledged: %d, failed requests: %d, delivered: %d (of failed requests: %d), lost: 0",
		reconnects, l.ackedN.Load(), l.erroredN.Load(), len(l.delivered), fromErrored)
}
