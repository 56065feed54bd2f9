package integration_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/keys"
)

// crashLoopSize is how many times each engine is killed, and how many
// messages each round schedules. NATSDELAY_SOAK=1 (make soak) runs the
// long version; the default keeps both engines well under two minutes on
// two cores.
func crashLoopSize() (kills, perRound int) {
	if os.Getenv("NATSDELAY_SOAK") != "" {
		return 200, 60
	}
	return 12, 40
}

// verdict is how the consumer answers a delivery. It depends only on the
// tag and the attempt, so a redelivery after a crash gets a fresh, but
// reproducible, answer, and from the third attempt on every message is
// ACKed, so the loop ends with nothing pending.
type verdict int

const (
	verdictAck verdict = iota
	verdictNak
	verdictIgnore // no answer: the ack wait redelivers it
)

func decide(tag string, attempt int) verdict {
	if attempt >= 3 {
		return verdictAck
	}
	h := fnv.New32a()
	h.Write([]byte(tag))
	h.Write([]byte{byte(attempt)})
	return verdict(h.Sum32() % 3)
}

// killMoment says when a round kills the service.
type killMoment int

const (
	killDuringIngest   killMoment = iota // requests waiting for their fsync
	killDuringDelivery                   // deliveries going out and being answered
	killAfterAckBurst                    // deletes of a burst of ACKs being flushed
	killMoments
)

func (k killMoment) String() string {
	return [...]string{"ingest", "delivery", "ack burst"}[k]
}

// crashLoop is what the clients of one engine's loop saw. mu guards the
// maps and slices; the atomic counters are read by the round driver to see
// when it is time to kill.
type crashLoop struct {
	mu         sync.Mutex
	acked      map[string]time.Time // tag -> fire_at of the ingest reply
	ids        map[uint64]string    // event ID -> the tag that carried it
	deliveries map[string]int       // tag -> deliveries seen
	firstRecv  map[string]time.Time // tag -> earliest receive time
	headerFire map[string]time.Time // tag -> Delay-Fire-At of its first delivery
	ackSent    map[string]bool      // tag -> an ACK was sent at least once
	problems   []string             // what the callbacks found wrong; they cannot fail the test
	// lives, when not nil, holds the tags and attempts the current
	// process delivered (see trackLives); twice counts deliveries one
	// process made again.
	lives   *lifeLog
	reqErrs map[string]int // ingest request failures, by what failed, to tell why a round stalls
	up      chan struct{}  // closed while a process is ready; replaced at each kill

	replies atomic.Int64 // successful ingest replies
	failed  atomic.Int64 // ingest requests that failed
	recv    atomic.Int64 // deliveries
	acks    atomic.Int64 // ACKs sent
	naks    atomic.Int64 // NAKs sent
	ignores atomic.Int64 // deliveries left unanswered
}

func newCrashLoop() *crashLoop {
	return &crashLoop{
		acked:      map[string]time.Time{},
		ids:        map[uint64]string{},
		deliveries: map[string]int{},
		firstRecv:  map[string]time.Time{},
		headerFire: map[string]time.Time{},
		ackSent:    map[string]bool{},
		reqErrs:    map[string]int{},
		up:         make(chan struct{}),
	}
}

// lifeLog is what one process of a loop that restarts a single process
// delivered. A process counts a message's attempts up from what it read
// at its start, one for every delivery it makes, so a second delivery of
// the same attempt by one process is a duplicate, whatever the consumer
// answered and however long the ack wait; after a crash the next process
// may repeat an attempt (docs/protocol.md: the count is written a second
// after the delivery), which is why the log starts afresh for each.
type lifeLog struct {
	life  int                   // processes ended so far
	seen  map[tagAttempt]bool   // the current process's deliveries
	twice int                   // deliveries one process made again
	first map[tagAttempt]string // when each was received, for the failure's message
}

type tagAttempt struct {
	tag     string
	attempt int
}

// lifeSubject is the subject, under the consumer's subscription, on which
// the loop marks the end of a process's life (see endLife).
func lifeSubject(subject string) string { return subject + ".life" }

// trackLives makes l check that no process delivers a message twice (see
// lifeLog). Only for a loop that runs one process at a time and calls
// endLife once each is gone: deliveries cannot be told apart by process
// otherwise.
func (l *crashLoop) trackLives() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lives = &lifeLog{seen: map[tagAttempt]bool{}, first: map[tagAttempt]string{}}
}

// endLife marks, in the consumer's stream, that the process just killed
// will deliver nothing more. It waits until srv has closed every
// connection of natsdelay's: the server reads what a killed process sent
// before it sees the connection closed, so every delivery of that
// process is by then queued to the consumer, ahead of the mark published
// after it; and the next process is started only once the mark is in
// the server (the flush), so its deliveries come after it.
func endLife(t *testing.T, srv *server.Server, consumer *nats.Conn, subject string) {
	t.Helper()
	checkFor(t, 30*time.Second, 2*time.Millisecond, func() error {
		cz, err := srv.Connz(&server.ConnzOptions{})
		if err != nil {
			return err
		}
		for _, c := range cz.Conns {
			if c.Name == "natsdelay" {
				return fmt.Errorf("natsdelay's connection %d still open after its SIGKILL", c.Cid)
			}
		}
		return nil
	})
	if err := consumer.Publish(lifeSubject(subject), nil); err != nil {
		t.Fatal(err)
	}
	if err := consumer.Flush(); err != nil {
		t.Fatal(err)
	}
}

// sawInLife records a delivery of tag's attempt by the current process and
// reports one it made before. mu must be held.
func (l *crashLoop) sawInLife(tag string, attempt int, at time.Time) {
	if l.lives == nil {
		return
	}
	k := tagAttempt{tag, attempt}
	if l.lives.seen[k] {
		l.lives.twice++
		l.problem("%s attempt %d delivered twice by one process (life %d): first received at %s, again at %s",
			tag, attempt, l.lives.life+1, l.lives.first[k], at.Format(time.RFC3339Nano))
		return
	}
	l.lives.seen[k] = true
	l.lives.first[k] = at.Format(time.RFC3339Nano)
}

// problem records something wrong seen in a callback. mu must be held.
func (l *crashLoop) problem(format string, args ...any) {
	// Keep the first few: one is enough to debug, thousands would flood.
	if len(l.problems) < 20 {
		l.problems = append(l.problems, fmt.Sprintf(format, args...))
	}
}

// sawTag checks that tag's event ID was not given to another tag. mu must
// be held.
func (l *crashLoop) sawTag(tag string) {
	k, err := keys.ParseTag(tag)
	if err != nil {
		l.problem("tag %q: %v", tag, err)
		return
	}
	if prev, ok := l.ids[k.EventID()]; ok && prev != tag {
		l.problem("event ID %d assigned twice: %s and %s", k.EventID(), prev, tag)
	}
	l.ids[k.EventID()] = tag
}

// requestFailed counts an ingest request that failed, by its error or
// its service error.
func (l *crashLoop) requestFailed(err error, rep *nats.Msg) {
	what := fmt.Sprint(err)
	if err == nil {
		what = rep.Header.Get(wire.HeaderServiceErrorCode) + " " + rep.Header.Get(wire.HeaderServiceError)
	}
	l.failed.Add(1)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.reqErrs[what]++
}

// upChan is closed once the current (or next) process is ready.
func (l *crashLoop) upChan() chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.up
}

func (l *crashLoop) setUp() { close(l.upChan()) }

func (l *crashLoop) setDown() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.up = make(chan struct{})
}

// onDelivery answers a delivery as decide says and records it. It runs on
// the subscription's goroutine and never blocks on anything but mu.
func (l *crashLoop) onDelivery(m *nats.Msg) {
	now := time.Now()
	if strings.HasSuffix(m.Subject, ".life") {
		// The loop's mark that a process is gone (see endLife).
		l.mu.Lock()
		if l.lives != nil {
			l.lives.life++
			clear(l.lives.seen)
			clear(l.lives.first)
		}
		l.mu.Unlock()
		return
	}
	tag := m.Header.Get(wire.HeaderTag)
	n, aerr := strconv.Atoi(m.Header.Get(wire.HeaderAttempt))
	fire, ferr := time.Parse(time.RFC3339Nano, m.Header.Get(wire.HeaderFireAt))
	v := decide(tag, n)
	l.mu.Lock()
	switch {
	case aerr != nil || n < 1:
		l.problem("%s %q on %s", wire.HeaderAttempt, m.Header.Get(wire.HeaderAttempt), tag)
	case ferr != nil:
		l.problem("%s %q on %s", wire.HeaderFireAt, m.Header.Get(wire.HeaderFireAt), tag)
	case now.Before(fire):
		// The header is rounded down, so it is never later than the real
		// fire time: a receive time before it is early for sure.
		l.problem("%s delivered at %s, before its %s %s", tag, now.Format(time.RFC3339Nano), wire.HeaderFireAt, fire.Format(time.RFC3339Nano))
	}
	l.sawTag(tag)
	if aerr == nil {
		l.sawInLife(tag, n, now)
	}
	l.deliveries[tag]++
	if first, ok := l.firstRecv[tag]; !ok || now.Before(first) {
		l.firstRecv[tag] = now
	}
	if _, ok := l.headerFire[tag]; !ok && ferr == nil {
		l.headerFire[tag] = fire
	}
	if v == verdictAck {
		l.ackSent[tag] = true
	}
	l.mu.Unlock()
	l.recv.Add(1)

	// NB: answered outside mu: Respond is I/O. An answer sent to a process
	// that is being killed is lost, which is what the loop is about.
	switch v {
	case verdictAck:
		l.acks.Add(1)
		_ = m.Respond(nil)
	case verdictNak:
		l.naks.Add(1)
		_ = m.Respond([]byte("-NAK"))
	case verdictIgnore:
		l.ignores.Add(1)
	}
}

// ingestToken asks a publisher for one message. A zero at means a random
// relative delay, none for one message in three (due when its batch
// commits, which the group commit may hand to the dispatcher:
// docs/architecture.md, "A message due at ingest"); otherwise the message is due at that absolute time, so
// that a round can make many messages fire, and be ACKed, together.
type ingestToken struct{ at time.Time }

// publish schedules one message per token until stop is closed. A request
// that fails made no promise and is not recorded, and its token is tried
// again with a new request: a token dropped on a failure would leave a
// round that fed it waiting for replies that no request is left to bring,
// however soon the service answers again. After "no responders" (the
// service is down, or a cluster's leader not yet subscribed) it waits for
// the next process, or a moment if this one is up.
func (l *crashLoop) publish(nc *nats.Conn, subject string, r *rand.Rand, tokens <-chan ingestToken, stop <-chan struct{}) {
	for {
		var tok ingestToken
		select {
		case <-stop:
			return
		case tok = <-tokens:
		}
		for !l.publishOne(nc, subject, r, tok, stop) {
			select {
			case <-stop:
				return
			default:
			}
		}
	}
}

// noRespondersPause is how long a publisher waits after "no responders"
// or a 503 while a process is up, before it asks again: a cluster's new
// leader subscribes, and serves, a moment after it is elected.
const noRespondersPause = 20 * time.Millisecond

// publishOne makes one request for tok and reports whether it was
// answered with a tag.
func (l *crashLoop) publishOne(nc *nats.Conn, subject string, r *rand.Rand, tok ingestToken, stop <-chan struct{}) bool {
	up := l.upChan()
	m := nats.NewMsg(fmt.Sprintf("%s.%s.s%d", wire.DefaultIngestPrefix, subject, r.IntN(4)))
	switch {
	case tok.at.IsZero() && r.IntN(3) == 0:
		m.Header.Set("Delay", "0s")
	case tok.at.IsZero():
		m.Header.Set("Delay", fmt.Sprintf("%dms", r.IntN(501)))
	default:
		m.Header.Set("Delay-At", tok.at.UTC().Format(time.RFC3339Nano))
	}
	m.Data = []byte("payload")
	rep, err := nc.RequestMsg(m, 2*time.Second)
	if err != nil || rep.Header.Get(wire.HeaderServiceErrorCode) != "" {
		l.requestFailed(err, rep)
		if errors.Is(err, nats.ErrNoResponders) || err == nil { // err nil: a 503
			select {
			case <-up:
				time.Sleep(noRespondersPause)
			case <-stop:
			}
		}
		return false
	}
	var body struct {
		Tag    string `json:"tag"`
		FireAt string `json:"fire_at"`
	}
	jerr := json.Unmarshal(rep.Data, &body)
	fire, terr := time.Parse(time.RFC3339Nano, body.FireAt)
	l.mu.Lock()
	if jerr != nil || terr != nil {
		l.problem("ingest reply %q: %v %v", rep.Data, jerr, terr)
	} else {
		l.sawTag(body.Tag)
		l.acked[body.Tag] = fire
	}
	l.mu.Unlock()
	l.replies.Add(1)
	return true
}

// TestCrashLoop_SIGKILL_NothingAcknowledgedLost runs the real binary on
// each durable engine and SIGKILLs it again and again: while requests wait
// for their fsync, while deliveries go out, and right after a burst of
// ACKs, when deletes are being flushed. The consumer ACKs some deliveries,
// NAKs some and ignores some. It checks that nothing acknowledged is lost
// (every message whose ingest reply arrived is delivered and ACKed), that
// nothing is delivered before its fire time, that no event ID is assigned
// twice, and that once everything is ACKed nothing stays pending.
func TestCrashLoop_SIGKILL_NothingAcknowledgedLost(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := natsdelayBinary(t)
	for i, engine := range []string{"pebble", "bolt"} {
		t.Run(engine, func(t *testing.T) { crashLoopEngine(t, bin, engine, uint64(i)) })
	}
}

func crashLoopEngine(t *testing.T, bin, engine string, seed uint64) {
	kills, perRound := crashLoopSize()
	start := time.Now()
	srv := startServer(t)
	url := srv.ClientURL()
	dir := t.TempDir()
	subject := "crashloop." + engine
	l := newCrashLoop()
	l.trackLives()
	traffic := startCrashTraffic(t, srv, l, subject, seed, perRound)

	var proc *serviceProcess
	defer func() {
		// Only when the test failed midway: the process is never left behind.
		if proc != nil {
			proc.kill(t)
		}
	}()
	r := rand.New(rand.NewPCG(seed, 99))
	moments := [killMoments]int{}
	var handedOff uint64 // by the processes killed, as each last told INFO
	for round := range kills {
		proc = launch(t, bin, []string{"NATSDELAY_HTTP="}, "serve", "--nats", url, "--data-dir", dir,
			"--engine", engine, "--ack-wait", "1s")
		l.setUp()
		moment := killMoment(r.IntN(int(killMoments)))
		moments[moment]++
		switch moment {
		case killDuringIngest:
			traffic.feed(ingestToken{}, perRound)
			waitGrowth(t, "ingest replies", &l.replies, int64(perRound/4))
			handedOff += handedOffNow(traffic.consumer)
			// Random, so the kill lands anywhere in the commits that follow.
			time.Sleep(time.Duration(r.IntN(30)) * time.Millisecond)
		case killDuringDelivery:
			traffic.feed(ingestToken{}, perRound)
			waitGrowth(t, "deliveries", &l.recv, int64(perRound/2))
			handedOff += handedOffNow(traffic.consumer)
			time.Sleep(time.Duration(r.IntN(200)) * time.Millisecond)
		case killAfterAckBurst:
			// One fire time for the whole round, so the ACKs come in a burst.
			traffic.feed(ingestToken{at: time.Now().Add(300 * time.Millisecond)}, perRound)
			waitGrowth(t, "ACKs", &l.acks, int64(perRound/5))
			handedOff += handedOffNow(traffic.consumer)
			time.Sleep(time.Duration(r.IntN(5)) * time.Millisecond)
		}
		l.setDown()
		proc.kill(t)
		proc = nil
		endLife(t, srv, traffic.consumer, subject)
		t.Logf("round %d: killed during %s after %d acknowledged, %d delivered", round+1, moment, l.replies.Load(), l.recv.Load())
		// Down for a random while: publishers meet no responders, and
		// deliveries that were due pile up for the next process.
		time.Sleep(time.Duration(r.IntN(100)) * time.Millisecond)
	}

	proc = launch(t, bin, []string{"NATSDELAY_HTTP="}, "serve", "--nats", url, "--data-dir", dir,
		"--engine", engine, "--ack-wait", "1s")
	l.setUp()
	traffic.stopPublishers()
	l.settle(t, traffic.consumer)
	handedOff += handedOffNow(traffic.consumer)
	proc.stop(t)
	proc = nil
	lost, deliveries, redeliveries := l.verify(t)
	l.mu.Lock()
	defer l.mu.Unlock()
	t.Logf("%s: kills survived: %d (ingest %d, delivery %d, ack burst %d), acknowledged messages checked: %d, "+
		"messages delivered: %d, deliveries: %d, redeliveries: %d, NAKs: %d, unanswered: %d, ACKs: %d, lost: %d, "+
		"delivered twice by one process: %d, handed off at ingest (INFO before each kill): %d, in %v",
		engine, kills, moments[killDuringIngest], moments[killDuringDelivery], moments[killAfterAckBurst],
		len(l.acked), len(l.deliveries), deliveries, redeliveries, l.naks.Load(), l.ignores.Load(), l.acks.Load(), lost,
		l.lives.twice, handedOff, time.Since(start).Round(time.Millisecond))
}

// handedOffNow is INFO's handed_off, or 0 if INFO is not answered in 5 s:
// the count is for the log, and a loaded process's silence is no fault.
func handedOffNow(nc *nats.Conn) uint64 {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	data, err := api(nc).Request(ctx, "INFO", nil)
	var r wire.InfoReply
	if err != nil || json.Unmarshal(data, &r) != nil {
		return 0
	}
	return r.Stats.HandedOff
}

// settle waits until every acknowledged message was delivered and ACKed,
// and INFO (on nc) says nothing is pending.
func (l *crashLoop) settle(t *testing.T, nc *nats.Conn) {
	t.Helper()
	checkFor(t, 90*time.Second, 20*time.Millisecond, func() error {
		l.mu.Lock()
		defer l.mu.Unlock()
		undelivered, unacked := 0, 0
		for tag := range l.acked {
			switch {
			case l.deliveries[tag] == 0:
				undelivered++
			case !l.ackSent[tag]:
				unacked++
			}
		}
		if undelivered+unacked > 0 {
			return fmt.Errorf("of %d acknowledged messages, %d not delivered and %d delivered but not ACKed yet",
				len(l.acked), undelivered, unacked)
		}
		return nil
	})
	// ACKs sent to a killed process were lost; those messages come back and
	// are ACKed again, so pending reaches zero only once every one is done.
	waitPendingWithin(t, nc, 0, 90*time.Second)
}

// verify fails t for what the callbacks saw wrong, for every acknowledged
// message never delivered or delivered before its fire_at, and for a
// Delay-Fire-At that differs from the ingest reply's. It returns the
// messages lost, the deliveries and the redeliveries.
func (l *crashLoop) verify(t *testing.T) (lost, deliveries, redeliveries int) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range l.problems {
		t.Error(p)
	}
	early := 0
	for tag, fire := range l.acked {
		recv, ok := l.firstRecv[tag]
		if !ok {
			lost++
			continue
		}
		// fire_at is rounded down to the millisecond, so it is at most 1ms
		// before the real fire time and never after it.
		if recv.Before(fire) {
			early++
			if early <= 5 {
				t.Errorf("%s received at %s, before its fire_at %s", tag, recv.Format(time.RFC3339Nano), fire.Format(time.RFC3339Nano))
			}
		}
		if hf, ok := l.headerFire[tag]; ok && !hf.Equal(fire) {
			t.Errorf("%s: %s %s, but the ingest reply said fire_at %s", tag, wire.HeaderFireAt, hf.Format(time.RFC3339Nano), fire.Format(time.RFC3339Nano))
		}
	}
	for _, n := range l.deliveries {
		deliveries += n
		redeliveries += n - 1
	}
	if lost > 0 || early > 0 {
		t.Errorf("%d acknowledged messages lost, %d delivered early", lost, early)
	}
	if l.lives != nil && l.lives.twice > 0 {
		t.Errorf("%d deliveries made again by the process that made them first", l.lives.twice)
	}
	return lost, deliveries, redeliveries
}

// crashTraffic is a crash loop's load: a consumer of subject.> that
// answers as the loop says, and publishers that schedule one message per
// token fed to them.
type crashTraffic struct {
	consumer *nats.Conn
	tokens   chan ingestToken
	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
}

// startCrashTraffic subscribes a consumer of subject.> for l and starts
// four publishers, seeded from seed, on one connection, so that ingest
// batches group commits as real load does. The tokens have room for four
// rounds of perRound. The publishers stop when the test ends, if not
// before.
func startCrashTraffic(t *testing.T, srv *server.Server, l *crashLoop, subject string, seed uint64, perRound int) *crashTraffic {
	t.Helper()
	c := &crashTraffic{consumer: connect(t, srv), tokens: make(chan ingestToken, 4*perRound), stop: make(chan struct{})}
	sub, err := c.consumer.Subscribe(subject+".>", l.onDelivery)
	if err != nil {
		t.Fatal(err)
	}
	_ = sub.SetPendingLimits(-1, -1)
	if err := c.consumer.Flush(); err != nil {
		t.Fatal(err)
	}
	pubConn := connect(t, srv)
	const publishers = 4
	for p := range publishers {
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			l.publish(pubConn, subject, rand.New(rand.NewPCG(seed, uint64(p))), c.tokens, c.stop)
		}()
	}
	t.Cleanup(c.stopPublishers) // before pubConn closes: cleanups run last first
	t.Cleanup(func() {
		if t.Failed() {
			l.mu.Lock()
			defer l.mu.Unlock()
			t.Logf("ingest requests that failed, by error: %v", l.reqErrs)
		}
	})
	return c
}

// feed offers n tokens to the publishers. NB: a round that finds the
// tokens full drops the rest, which only makes that round lighter, and
// never blocks a test whose publishers wait for a leader.
func (c *crashTraffic) feed(tok ingestToken, n int) {
	for range n {
		select {
		case c.tokens <- tok:
		default:
		}
	}
}

// stopPublishers stops the publishers and waits for them.
func (c *crashTraffic) stopPublishers() {
	c.stopOnce.Do(func() { close(c.stop) })
	c.wg.Wait()
}

// waitGrowth waits until counter has grown by n from its value now.
func waitGrowth(t *testing.T, what string, counter *atomic.Int64, n int64) {
	t.Helper()
	base := counter.Load()
	checkFor(t, time.Minute, 2*time.Millisecond, func() error {
		if got := counter.Load() - base; got < n {
			return fmt.Errorf("%s: %d of %d", what, got, n)
		}
		return nil
	})
}
