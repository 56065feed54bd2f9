package integration_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/test"
	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge"
	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/keys"
)

// adversarialSize is how many well-behaved messages the adversarial mix
// sends, and over how long the hostile side runs beside them.
// NATSDELAY_SOAK=1 (make soak) runs the large size.
func adversarialSize() (good int, span time.Duration) {
	if os.Getenv("NATSDELAY_SOAK") != "" {
		return 30000, 60 * time.Second
	}
	return 600, 3 * time.Second
}

// adversarialMaxPayload is the server's max_payload in the adversarial
// mix: small, so that payloads near and over it are cheap.
const adversarialMaxPayload = 64 << 10

// goodLedger is what the well-behaved stream sent and saw.
type goodLedger struct {
	mu     sync.Mutex
	acked  map[keys.Key]scheduled   // acknowledged by the service
	sent   map[keys.Key]time.Time   // when the test sent it
	stored map[keys.Key]time.Time   // when the test had its acknowledgement
	seen   map[keys.Key][]time.Time // arrivals of each delivery, by tag
	acks   map[keys.Key]bool        // the consumer ACKed it
	firsts map[string][]keys.Key    // first deliveries by subject, in arrival order
	errs   []string
}

func (l *goodLedger) problem(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.errs) < 20 {
		l.errs = append(l.errs, fmt.Sprintf(format, args...))
	}
}

// actors are the goroutines of the mix; stop ends them and wait waits.
type actors struct {
	stop chan struct{}
	wg   sync.WaitGroup
}

func (a *actors) run(f func(stop <-chan struct{})) {
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		f(a.stop)
	}()
}

func (a *actors) end() {
	close(a.stop)
	a.wg.Wait()
}

// TestAdversarial_Mix_GoodStreamUnharmed runs hostile publishers and
// consumers against one service (real nats-server, Pebble on disk, a small
// in-flight window and ack wait, max deliver with a dead-letter subject),
// beside a well-behaved stream. The hostile side sends bad headers, long
// subjects, payloads near and over max_payload, tiny ones, plain publishes
// of garbage, NAK storms with huge and zero delays, no answers, consumers
// that vanish, answers with a Status: 503 header, mistyped answers, and
// ACKs for tags that are not theirs. The guarantees checked:
//
//   - the service stays connected, ready and answering: every hostile
//     request gets an answer (a success or a 400), never silence;
//   - every message of the good stream that was acknowledged is delivered,
//     never before its fire time, and once ACKed is settled;
//   - on each good subject, first deliveries arrive in fire order (of
//     the messages stored before the other was sent).
func TestAdversarial_Mix_GoodStreamUnharmed(t *testing.T) {
	opts := natsserver.DefaultTestOptions
	opts.Port = -1
	opts.MaxPayload = adversarialMaxPayload
	srv := natsserver.RunServer(&opts)
	t.Cleanup(srv.Shutdown)
	st := engines[1].open(t, filepath.Join(t.TempDir(), "data"))
	svc := startService(t, srv, st, func(c *bridge.Config) {
		c.Delivery.MaxInFlight = 64
		c.Delivery.AckWait = 300 * time.Millisecond
		c.Delivery.MaxDeliver = 4
		c.Delivery.DeadLetterSubject = "adv.dead"
	})
	good, span := adversarialSize()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d, %d good messages over %v", seed, good, span)

	l := &goodLedger{acked: map[keys.Key]scheduled{}, seen: map[keys.Key][]time.Time{}, acks: map[keys.Key]bool{}, sent: map[keys.Key]time.Time{}, stored: map[keys.Key]time.Time{}, firsts: map[string][]keys.Key{}}
	goodNC := connect(t, srv)
	goodSub, err := goodNC.Subscribe("good.>", func(m *nats.Msg) {
		at := time.Now()
		k, err := keys.ParseTag(m.Header.Get(wire.HeaderTag))
		if err != nil {
			l.problem("good delivery without a valid tag: %v", m.Header)
			return
		}
		l.mu.Lock()
		if len(l.seen[k]) == 0 {
			l.firsts[m.Subject] = append(l.firsts[m.Subject], k)
		}
		l.seen[k] = append(l.seen[k], at)
		l.mu.Unlock()
		if err := m.Respond([]byte("+ACK")); err != nil {
			l.problem("ack %s: %v", k, err)
			return
		}
		l.mu.Lock()
		l.acks[k] = true
		l.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	_ = goodSub.SetPendingLimits(-1, -1)
	if err := goodNC.Flush(); err != nil {
		t.Fatal(err)
	}

	a := &actors{stop: make(chan struct{})}
	for i := range 2 {
		r := rand.New(rand.NewPCG(seed, uint64(10+i)))
		a.run(func(stop <-chan struct{}) { hostilePublisher(t, srv.ClientURL(), r, stop, l) })
	}
	for i := range 3 {
		nc := connect(t, srv)
		r := rand.New(rand.NewPCG(seed, uint64(20+i)))
		a.run(func(stop <-chan struct{}) { hostileConsumer(t, nc, r, stop, l) })
	}
	{
		nc := connect(t, srv)
		r := rand.New(rand.NewPCG(seed, 30))
		a.run(func(stop <-chan struct{}) { ackFlooder(nc, r, stop) })
	}

	// The good stream: pipelined requests, a few subjects, delays of up
	// to 300ms.
	pubNC := connect(t, srv)
	r := rand.New(rand.NewPCG(seed, 1))
	msgs := make([]*nats.Msg, good)
	for i := range msgs {
		msgs[i] = newMsg(fmt.Sprintf("good.%d", r.IntN(8)), strconv.Itoa(i), "Delay", fmt.Sprintf("%dms", r.IntN(300)))
	}
	const batch = 20
	tick := time.NewTicker(span / time.Duration(good/batch))
	defer tick.Stop()
	for start := 0; start < len(msgs); start += batch {
		<-tick.C
		sent := time.Now()
		for _, s := range scheduleMany(t, pubNC, msgs[start:min(start+batch, len(msgs))]) {
			l.mu.Lock()
			l.acked[s.Key], l.sent[s.Key], l.stored[s.Key] = s, sent, time.Now()
			l.mu.Unlock()
		}
	}
	a.end()
	t.Logf("good stream acknowledged: %d; hostile actors stopped", good)

	checkFor(t, 6*wait, 20*time.Millisecond, func() error {
		l.mu.Lock()
		defer l.mu.Unlock()
		missing := 0
		for k := range l.acked {
			if !l.acks[k] {
				missing++
			}
		}
		if missing > 0 {
			return fmt.Errorf("%d of %d acknowledged good messages not yet delivered and ACKed (service ready: %v)", missing, len(l.acked), svc.Ready())
		}
		return nil
	})
	if err := svc.Ready(); err != nil {
		t.Fatalf("service not ready after the mix: %v", err)
	}

	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.errs {
		t.Error(e)
	}
	redelivered := 0
	for k, s := range l.acked {
		arrivals := l.seen[k]
		if len(arrivals) > 1 {
			redelivered++
		}
		for _, at := range arrivals {
			if at.Before(s.FireAt) {
				t.Errorf("%s on %s delivered %v early", k, s.Subject, s.FireAt.Sub(at))
			}
		}
	}
	// Order: a message that sorts before one already delivered on its
	// subject must not come after it, if it was stored before that one
	// was even sent. (One stored later, as pipelined publishers can do
	// with a message due sooner, cannot go first.) The batches go one
	// after the other, so that holds for every pair from different
	// batches; within a batch the order of storing is not known.
	for subject, ks := range l.firsts {
		for i := 1; i < len(ks); i++ {
			for j := range i {
				earlier, later := ks[j], ks[i]
				if bytes.Compare(later[:], earlier[:]) < 0 && l.stored[later].Before(l.sent[earlier]) {
					t.Errorf("%s: first delivery of %s (fire %v) after %s (fire %v), though stored before that one was sent", subject,
						later, l.acked[later].FireAt, earlier, l.acked[earlier].FireAt)
				}
			}
		}
	}
	t.Logf("good messages delivered %d, of which redelivered %d (ack wait %v under load); none early, in order", len(l.acked), redelivered, 300*time.Millisecond)
	t.Logf("service stats after the mix: %+v", svc.Stats())
}

// hostilePublisher sends hostile ingest until stop: each request must get
// an answer, a success or a 400, never a 503 or silence.
func hostilePublisher(t *testing.T, url string, r *rand.Rand, stop <-chan struct{}, l *goodLedger) {
	nc, err := nats.Connect(url)
	if err != nil {
		l.problem("hostile publisher: %v", err)
		return
	}
	defer func() { nc.Close() }()
	kinds := []func() *nats.Msg{
		func() *nats.Msg { return newMsg("hostile.a", "x", "Delay", string(garbage(r, 1, true)[0])) },
		func() *nats.Msg { return newMsg("hostile.a", "x", "Delay-Ttl-Ms", "5") },
		func() *nats.Msg { return newMsg("hostile.a", "x", "Delay-Cancel", "true") },
		// Targets of 3,990 to 4,034 bytes: the service's delivery of
		// them (its reply subject is longer than a request's inbox) can
		// exceed the server's 4,096-byte control line where the ingest
		// did not. The longest ones exceed it for the publisher too, and
		// the server closes the publisher's connection.
		func() *nats.Msg { return newMsg("hostile."+strings.Repeat("l", 3982+r.IntN(45)), "x") },
		func() *nats.Msg { return newMsg("hostile."+strings.Repeat("m", 3000+r.IntN(1000)), "x") },
		func() *nats.Msg {
			return newMsg("hostile.big", string(make([]byte, adversarialMaxPayload-r.IntN(400))))
		},
		func() *nats.Msg { return newMsg("hostile.tiny", "") },
		func() *nats.Msg { return newMsg("hostile.a", "x", "Delay-At", "1969-12-31T23:30:00-01:00") },
		func() *nats.Msg { return newMsg("hostile.a", "x", "Delay-At", "2026-01-01T00:00:00+24:00") },
		func() *nats.Msg { return newMsg("hostile.a", "x", "Delay", "2562048h") },
		func() *nats.Msg { return newMsg("hostile.a", "x", "delay-tag", "forged", "Delay", "10ms") },
		func() *nats.Msg {
			return newMsg("hostile.a", "x", "X-Big", strings.Repeat("h", r.IntN(8000)), "Delay", "5ms")
		},
		func() *nats.Msg { return newMsg("hostile.*", "x") },
		func() *nats.Msg {
			return newMsg("hostile.b", "x", "Delay", fmt.Sprintf("%dms", r.IntN(50)), "Delay-Max-Deliver", "2")
		},
		func() *nats.Msg { return newMsg("hostile.c", "x", "Delay-TTL", "50ms") },
	}
	// NB: about 500 a second at most: enough to meet every limit many
	// times, while the store, under the race detector, keeps up with the
	// payloads near max_payload that a tighter loop would pile into it.
	pace := time.NewTicker(2 * time.Millisecond)
	defer pace.Stop()
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		case <-pace.C:
		}
		m := kinds[r.IntN(len(kinds))]()
		if i%5 == 4 {
			// A plain publish: nobody to tell, nothing must break.
			_ = nc.PublishMsg(m)
			continue
		}
		rep, err := nc.RequestMsg(m, wait)
		if nc.IsClosed() {
			// The server closed our own connection: our publish was too
			// long for its control line. Not the service's doing.
			if nc, err = nats.Connect(url); err != nil {
				l.problem("hostile publisher: reconnect: %v", err)
				return
			}
			continue
		}
		if err != nil {
			l.problem("hostile request on %.60s: %v (the service stopped answering)", m.Subject, err)
			return
		}
		if code := rep.Header.Get(wire.HeaderServiceErrorCode); code != "" && code != "400" {
			l.problem("hostile request on %.60s: %s %s, want a success or a 400", m.Subject, code, rep.Header.Get(wire.HeaderServiceError))
		}
	}
}

// hostileConsumer takes deliveries on hostile.> and answers them badly
// until stop, now and then vanishing for a while.
func hostileConsumer(t *testing.T, nc *nats.Conn, r *rand.Rand, stop <-chan struct{}, l *goodLedger) {
	var mu sync.Mutex // r is not safe for concurrent use
	answer := func(m *nats.Msg) {
		mu.Lock()
		n := r.IntN(12)
		mu.Unlock()
		switch n {
		case 0:
			_ = m.Respond([]byte("-NAK 2562047h"))
		case 1:
			_ = m.Respond([]byte(`-NAK {"delay": 9223372036854775807}`))
		case 2:
			_ = m.Respond([]byte("-NAK"))
		case 3:
			_ = m.Respond([]byte("ACK"))
		case 4:
			rep := nats.NewMsg(m.Reply)
			rep.Header.Set("Status", "503")
			_ = nc.PublishMsg(rep)
		case 5:
			_ = m.Respond([]byte("+WPI"))
		case 6:
			_ = m.Respond([]byte("+TERM bad"))
		case 7:
			_ = m.Respond([]byte("+ACK"))
		default:
			// No answer: the ack wait redelivers it.
		}
	}
	for {
		sub, err := nc.Subscribe("hostile.>", answer)
		if err != nil {
			l.problem("hostile subscribe: %v", err)
			return
		}
		mu.Lock()
		d := time.Duration(50+r.IntN(200)) * time.Millisecond
		mu.Unlock()
		select {
		case <-stop:
			_ = sub.Unsubscribe()
			return
		case <-time.After(d):
		}
		// Vanish for a while: deliveries meet no responders.
		_ = sub.Unsubscribe()
		select {
		case <-stop:
			return
		case <-time.After(d / 4):
		}
	}
}

// ackFlooder sends answers for tags that are not its own, and garbage
// tags, until stop. Every twentieth is a request that waits for the
// service's 400, so the flood runs at the service's pace rather than
// piling up minutes of backlog under the race detector (a faster flood
// is dropped by the client library; see docs/limits.md).
func ackFlooder(nc *nats.Conn, r *rand.Rand, stop <-chan struct{}) {
	var k keys.Key
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		for j := range k {
			k[j] = byte(r.UintN(256))
		}
		subject := wire.DefaultAckPrefix + "." + k.Tag()
		if i%3 == 0 {
			subject = wire.DefaultAckPrefix + ".not-a-tag"
		}
		payload := []byte([]string{"+ACK", "-NAK 1ms", "+TERM", "junk"}[i%4])
		if i%20 == 19 {
			_, _ = nc.Request(wire.DefaultAckPrefix+".not-a-tag", payload, wait)
			continue
		}
		_ = nc.Publish(subject, payload)
	}
}
