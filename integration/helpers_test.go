// Package integration_test runs natsdelay end to end: an embedded
// nats-server, a real store, bridge.New, and nothing but nats.go on the
// client side, so every test exercises the wire protocol exactly as a user
// would.
package integration_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge"
	"github.com/natsdelay/natsdelay/bridge/bridgetest"
	"github.com/natsdelay/natsdelay/bridge/client"
	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/delaystore/boltstore"
	"github.com/natsdelay/natsdelay/delaystore/pebblestore"
	"github.com/natsdelay/natsdelay/keys"
)

// wait bounds every wait for an event. CI machines have two cores and run
// the race detector, and a machine doing other work can be several times
// slower still, so it is generous; a passing test never waits this long.
const wait = 30 * time.Second

// engine opens a store. Durable engines keep their data in dir and can be
// reopened on it; the others ignore dir.
type engine struct {
	name    string
	durable bool
	open    func(tb testing.TB, dir string) delaystore.Store
}

// engines are the stores the core flow and the restart tests run against.
var engines = []engine{
	{name: "pebble-memory", open: func(tb testing.TB, _ string) delaystore.Store {
		return openPebble(tb, pebblestore.Config{InMemory: true})
	}},
	{name: "pebble-disk", durable: true, open: func(tb testing.TB, dir string) delaystore.Store {
		return openPebble(tb, pebblestore.Config{Dir: dir})
	}},
	{name: "bolt", durable: true, open: func(tb testing.TB, dir string) delaystore.Store {
		tb.Helper()
		st, err := boltstore.Open(boltstore.Config{Path: filepath.Join(dir, "natsdelay.db")})
		if err != nil {
			tb.Fatalf("boltstore.Open: %v", err)
		}
		return st
	}},
}

func openPebble(tb testing.TB, cfg pebblestore.Config) delaystore.Store {
	tb.Helper()
	st, err := pebblestore.Open(cfg)
	if err != nil {
		tb.Fatalf("pebblestore.Open: %v", err)
	}
	return st
}

// The running service comes from bridgetest, the one harness for it.
var (
	memStore     = bridgetest.MemStore
	startServer  = bridgetest.RunServer
	testLogger   = bridgetest.Logger
	startService = bridgetest.Start
)

// connect opens a client connection that does not reconnect, closed when
// tb ends.
func connect(tb testing.TB, srv *server.Server) *nats.Conn {
	tb.Helper()
	return bridgetest.Connect(tb, srv, nats.MaxReconnects(0))
}

// harness is one server, one service on an in-memory store, and one client
// connection.
type harness struct {
	srv *server.Server
	svc *bridge.Service
	nc  *nats.Conn
}

func newHarness(tb testing.TB, mod func(*bridge.Config), opts ...bridge.Option) *harness {
	tb.Helper()
	h := bridgetest.New(tb, mod, opts...)
	return &harness{srv: h.Server, svc: h.Service, nc: h.Conn}
}

// newMsg builds an ingest message for target with headers given as name,
// value pairs; a name given twice gets both values.
func newMsg(target, data string, hdr ...string) *nats.Msg {
	if len(hdr)%2 != 0 {
		panic("newMsg: odd number of header arguments")
	}
	m := nats.NewMsg(wire.DefaultIngestPrefix + "." + target)
	for i := 0; i < len(hdr); i += 2 {
		m.Header.Add(hdr[i], hdr[i+1])
	}
	m.Data = []byte(data)
	return m
}

// scheduled is a successful ingest reply.
type scheduled struct {
	Tag       string `json:"tag"`
	Subject   string `json:"subject"`
	FireAtRaw string `json:"fire_at"`
	Folded    bool   `json:"folded"`
	FireAt    time.Time
	Key       keys.Key
}

// schedule sends m as a request and fails tb unless the reply is a success.
func schedule(tb testing.TB, nc *nats.Conn, m *nats.Msg) scheduled {
	tb.Helper()
	rep, err := nc.RequestMsg(m, wait)
	if err != nil {
		tb.Fatalf("schedule %s: %v", m.Subject, err)
	}
	if code := rep.Header.Get(wire.HeaderServiceErrorCode); code != "" {
		tb.Fatalf("schedule %s: error %s: %s", m.Subject, code, rep.Header.Get(wire.HeaderServiceError))
	}
	return parseScheduled(tb, rep.Data)
}

func parseScheduled(tb testing.TB, data []byte) scheduled {
	tb.Helper()
	var s scheduled
	if err := json.Unmarshal(data, &s); err != nil {
		tb.Fatalf("schedule reply %q: %v", data, err)
	}
	var err error
	if s.Key, err = keys.ParseTag(s.Tag); err != nil {
		tb.Fatalf("schedule reply %q: tag: %v", data, err)
	}
	s.FireAt = parseTime(tb, s.FireAtRaw)
	return s
}

// parseTime parses the protocol's RFC 3339 times.
func parseTime(tb testing.TB, v string) time.Time {
	tb.Helper()
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		tb.Fatalf("time %q: %v", v, err)
	}
	return t
}

// received is a delivery and when the test saw it.
type received struct {
	*nats.Msg
	at time.Time
}

// subscribe delivers the messages on subject to the returned channel,
// stamped on arrival. The buffer is large enough for every test; when it
// is full the test fails rather than blocking the connection.
func subscribe(tb testing.TB, nc *nats.Conn, subject string) <-chan received {
	tb.Helper()
	ch := make(chan received, 8192)
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
		select {
		case ch <- received{Msg: m, at: time.Now()}:
		default:
			tb.Errorf("subscription %s: buffer full", subject)
		}
	})
	if err != nil {
		tb.Fatalf("subscribe %s: %v", subject, err)
	}
	tb.Cleanup(func() { _ = sub.Unsubscribe() })
	// The subscription must be known to the server before the test goes on,
	// or a delivery could find no responders.
	if err := nc.Flush(); err != nil {
		tb.Fatalf("flush: %v", err)
	}
	return ch
}

// next returns the next message on ch, failing tb after wait.
func next(tb testing.TB, ch <-chan received, what string) received {
	tb.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(wait):
		tb.Fatalf("%s: nothing received within %v", what, wait)
		return received{}
	}
}

// quiet fails tb if anything arrives on ch within d. It is an observation
// window for "this must not happen", not a way to wait for something.
func quiet(tb testing.TB, ch <-chan received, d time.Duration, what string) {
	tb.Helper()
	select {
	case r := <-ch:
		tb.Fatalf("%s: got %s %q with headers %v", what, r.Subject, r.Data, r.Header)
	case <-time.After(d):
	}
}

// checkFor calls f every interval until it returns nil, and fails tb with
// f's last error once timeout has passed.
func checkFor(tb testing.TB, timeout, interval time.Duration, f func() error) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("after %v: %v", timeout, err)
		}
		time.Sleep(interval)
	}
}

// waitProgress waits until count reaches want, failing tb only when it
// stops growing for stall: a liveness check of a long drain, whose pace
// is the host's, not the service's promise.
func waitProgress(tb testing.TB, stall time.Duration, want int, count func() int, what string) {
	tb.Helper()
	last, since := -1, time.Now()
	for {
		n := count()
		if n >= want {
			return
		}
		if n != last {
			last, since = n, time.Now()
		} else if time.Since(since) > stall {
			tb.Fatalf("%s: %d of %d, and none more for %v", what, n, want, stall)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// attempt is a delivery's Delay-Attempt.
func attempt(tb testing.TB, m *nats.Msg) int {
	tb.Helper()
	n, err := strconv.Atoi(m.Header.Get(wire.HeaderAttempt))
	if err != nil {
		tb.Fatalf("%s %q: %v", wire.HeaderAttempt, m.Header.Get(wire.HeaderAttempt), err)
	}
	return n
}

// wantAttempt fails tb unless m is delivery number n.
func wantAttempt(tb testing.TB, m *nats.Msg, n int) {
	tb.Helper()
	if got := attempt(tb, m); got != n {
		tb.Fatalf("%s = %d, want %d (headers %v)", wire.HeaderAttempt, got, n, m.Header)
	}
}

// ackSync answers the delivery m with payload and waits for the service to
// confirm that the answer was applied.
func ackSync(tb testing.TB, nc *nats.Conn, m *nats.Msg, payload string) {
	tb.Helper()
	rep, err := nc.Request(m.Reply, []byte(payload), wait)
	if err != nil {
		tb.Fatalf("ack %q on %s: %v", payload, m.Reply, err)
	}
	if string(rep.Data) != "+OK" {
		tb.Fatalf("ack %q on %s: reply %q with headers %v, want +OK", payload, m.Reply, rep.Data, rep.Header)
	}
}

// tagKey is the storage key in a delivery's Delay-Tag.
func tagKey(tb testing.TB, m *nats.Msg) keys.Key {
	tb.Helper()
	k, err := keys.ParseTag(m.Header.Get(wire.HeaderTag))
	if err != nil {
		tb.Fatalf("%s: %v (headers %v)", wire.HeaderTag, err, m.Header)
	}
	return k
}

// The tests read the service's state as a user does, over the API
// ($DELAY.API.*, through the client package): INFO for the counts, GET
// for one message, SUBJECTS and LIST for one subject's. The few checks of
// what no public surface shows are in storestate_test.go.

// api is a client of the service's API on nc.
func api(nc *nats.Conn) *client.Client {
	c, err := client.New(nc, client.WithTimeout(wait))
	if err != nil {
		panic(err) // NB: wait is a constant more than 0
	}
	return c
}

// pendingCount is the count of pending messages INFO reports, or why
// there is none: no answer, an error answer, or a store that is failing,
// whose counts are zero, which is not "nothing pending".
func pendingCount(nc *nats.Conn) (uint64, error) {
	r, err := api(nc).Info(context.Background())
	switch {
	case err != nil:
		return 0, fmt.Errorf("INFO: %w", err)
	case r.Storage != "ok":
		return 0, fmt.Errorf("INFO: storage %q, so its counts say nothing", r.Storage)
	}
	return r.Counts.Pending, nil
}

// pending is pendingCount, failing tb if INFO does not tell.
func pending(tb testing.TB, nc *nats.Conn) uint64 {
	tb.Helper()
	n, err := pendingCount(nc)
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

// waitPending waits until INFO reports exactly n pending messages.
func waitPending(tb testing.TB, nc *nats.Conn, n uint64) {
	tb.Helper()
	waitPendingWithin(tb, nc, n, wait)
}

// waitPendingWithin is waitPending for waits longer than the usual: ACKs
// lost in an outage are made good by redeliveries after the ack wait.
func waitPendingWithin(tb testing.TB, nc *nats.Conn, n uint64, d time.Duration) {
	tb.Helper()
	checkFor(tb, d, 20*time.Millisecond, func() error {
		got, err := pendingCount(nc)
		if err == nil && got != n {
			err = fmt.Errorf("pending = %d, want %d", got, n)
		}
		return err
	})
}

// pendingFor is the count of pending messages of subject SUBJECTS reports.
func pendingFor(tb testing.TB, nc *nats.Conn, subject string) uint64 {
	tb.Helper()
	r, err := api(nc).SubjectsPage(context.Background(), wire.SubjectsRequest{Filter: subject})
	if err != nil {
		tb.Fatalf("SUBJECTS %s: %v", subject, err)
	}
	var n uint64
	for _, s := range r.Subjects {
		if s.Subject == subject {
			n += s.Pending
		}
	}
	return n
}

// waitGone waits until GET finds no pending message under k.
func waitGone(tb testing.TB, nc *nats.Conn, k keys.Key) {
	tb.Helper()
	checkFor(tb, wait, 10*time.Millisecond, func() error { return isGone(nc, k) })
}

// isGone is nil if GET answers 404 for k: the message is settled or was
// never stored. Any other answer, or none, is an error.
func isGone(nc *nats.Conn, k keys.Key) error {
	_, err := api(nc).Get(context.Background(), wire.MessageRef{Tag: k.Tag()})
	switch {
	case errors.Is(err, wire.ErrNotFound):
		return nil
	case err != nil:
		return fmt.Errorf("GET %s: %w", k, err)
	}
	return fmt.Errorf("message %s is still pending", k)
}

// stored fails tb unless GET finds the message under k pending, and
// returns it with its payload. Its attempt is the one in flight, if any.
func stored(tb testing.TB, nc *nats.Conn, k keys.Key) *client.MessageInfo {
	tb.Helper()
	m, err := api(nc).Get(context.Background(), wire.MessageRef{Tag: k.Tag(), Payload: true})
	if err != nil {
		tb.Fatalf("GET %s: %v", k, err)
	}
	return m
}

// notEarly fails tb if r was received before the fire time in its
// Delay-Fire-At header or before want. The header has whole milliseconds
// and is truncated, so it is never later than the real fire time.
func notEarly(tb testing.TB, r received, want time.Time) {
	tb.Helper()
	fireAt := parseTime(tb, r.Header.Get(wire.HeaderFireAt))
	if r.at.Before(fireAt) || r.at.Before(want) {
		tb.Fatalf("delivered early: received at %s, %s %s, scheduled for %s",
			r.at.Format(time.RFC3339Nano), wire.HeaderFireAt, fireAt.Format(time.RFC3339Nano), want.Format(time.RFC3339Nano))
	}
}

// scheduleMany sends msgs as requests without waiting for each reply, in
// order on one connection, so the service receives (and numbers) them in
// slice order, and returns the replies in the same order. It fails tb if
// any is an error.
func scheduleMany(tb testing.TB, nc *nats.Conn, msgs []*nats.Msg) []scheduled {
	tb.Helper()
	out := make([]scheduled, len(msgs))
	for i, rep := range requestMany(tb, nc, msgs) {
		if code := rep.Header.Get(wire.HeaderServiceErrorCode); code != "" {
			tb.Fatalf("schedule %d: error %s: %s", i, code, rep.Header.Get(wire.HeaderServiceError))
		}
		out[i] = parseScheduled(tb, rep.Data)
	}
	return out
}

// requestMany sends msgs as requests without waiting for each reply and
// returns the replies in the same order, failing tb if any is missing.
func requestMany(tb testing.TB, nc *nats.Conn, msgs []*nats.Msg) []*nats.Msg {
	tb.Helper()
	inbox := nats.NewInbox()
	replies := make(chan *nats.Msg, len(msgs))
	sub, err := nc.Subscribe(inbox+".*", func(m *nats.Msg) { replies <- m })
	if err != nil {
		tb.Fatalf("subscribe replies: %v", err)
	}
	defer sub.Unsubscribe()
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		tb.Fatal(err)
	}
	for i, m := range msgs {
		m.Reply = inbox + "." + strconv.Itoa(i)
		if err := nc.PublishMsg(m); err != nil {
			tb.Fatalf("publish %d: %v", i, err)
		}
	}
	out := make([]*nats.Msg, len(msgs))
	// NB: the wait is for the next reply, not for all of them: a loaded
	// machine answers thousands slowly, while a lost reply stops them.
	silence := time.NewTimer(wait)
	defer silence.Stop()
	for got := range msgs {
		var rep *nats.Msg
		select {
		case rep = <-replies:
			silence.Reset(wait)
		case <-silence.C:
			tb.Fatalf("%d of %d replies, then none for %v", got, len(msgs), wait)
		}
		i, err := strconv.Atoi(rep.Subject[len(inbox)+1:])
		if err != nil || out[i] != nil {
			tb.Fatalf("unexpected reply on %s", rep.Subject)
		}
		out[i] = rep
	}
	return out
}
