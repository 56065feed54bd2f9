package integration_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	natsserver "github.com/nats-io/nats-server/v2/test"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/natsdelay/natsdelay/bridge"
	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/delaystore"
)

// startServerWith runs an embedded nats-server like startServer, with mod
// applied to its options.
func startServerWith(tb testing.TB, mod func(*server.Options)) *server.Server {
	tb.Helper()
	opts := natsserver.DefaultTestOptions
	opts.Port = -1
	mod(&opts)
	s := natsserver.RunServer(&opts)
	tb.Cleanup(s.Shutdown)
	return s
}

// requestVia sends m as a request whose reply subject is the short
// subject reply, so that the request's own protocol line leaves as much
// room as possible for its target subject.
func requestVia(tb testing.TB, nc *nats.Conn, reply string, m *nats.Msg) *nats.Msg {
	tb.Helper()
	sub, err := nc.SubscribeSync(reply)
	if err != nil {
		tb.Fatalf("subscribe %s: %v", reply, err)
	}
	defer sub.Unsubscribe()
	m.Reply = reply
	if err := nc.PublishMsg(m); err != nil {
		tb.Fatalf("publish %s: %v", clip([]byte(m.Subject)), err)
	}
	rep, err := sub.NextMsg(wait)
	if err != nil {
		tb.Fatalf("reply to %s: %v", clip([]byte(m.Subject)), err)
	}
	return rep
}

// longSubject is a concrete subject of exactly n bytes.
func longSubject(n int) string {
	return "long." + strings.Repeat("s", n-len("long."))
}

// wantServing fails tb unless the service is still connected and still
// schedules and delivers: an ordinary message goes all the way through.
func wantServing(tb testing.TB, h *harness) {
	tb.Helper()
	if err := h.svc.Ready(); err != nil {
		tb.Fatalf("service not ready: %v", err)
	}
	ch := subscribe(tb, h.nc, "alive.t")
	schedule(tb, h.nc, newMsg("alive.t", "still here"))
	r := next(tb, ch, "an ordinary delivery after the hostile one")
	ackSync(tb, h.nc, r.Msg, "+ACK")
}

// TestIngest_LongSubject_Refused checks that one publish cannot
// take the service off NATS: a target subject whose delivery's protocol
// line (subject, the $DELAY.ACK.<tag> reply, header and total sizes) would
// exceed the server's max_control_line is refused with a 400 that states
// the limit and the overage, and the longest subject that is accepted is
// delivered without the server closing the service's connection.
func TestIngest_LongSubject_Refused(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	const maxControlLine = 4096 // nats-server's default

	// The ingest line is "delay.<subject> r <hdr> <total>": a subject
	// this long still reaches the service, but its delivery would not fit.
	rep := requestVia(t, h.nc, "r", newMsg(longSubject(4040), "x"))
	wantError(t, "a 4040-byte subject", rep, 400, "over the server's max_control_line of 4096")
	if p := pending(t, h.nc); p != 0 {
		t.Fatalf("pending = %d after a refused message, want 0", p)
	}

	// Find the longest subject that is accepted, far in the future so
	// nothing is delivered yet.
	longest := 0
	for n := 3900; n < maxControlLine; n++ {
		rep := requestVia(t, h.nc, "r", newMsg(longSubject(n), "x", "Delay", "1h"))
		if rep.Header.Get(wire.HeaderServiceErrorCode) != "" {
			wantError(t, fmt.Sprintf("a %d-byte subject", n), rep, 400, "max_control_line")
			break
		}
		longest = n
	}
	if longest == 0 || longest > maxControlLine-len(wire.DefaultAckPrefix+".")-48-len("  0 0") {
		t.Fatalf("longest accepted subject is %d bytes: want a limit below %d that leaves room for the reply and sizes", longest, maxControlLine)
	}
	subj := longSubject(longest)
	ch := subscribe(t, h.nc, subj)
	if rep := requestVia(t, h.nc, "r", newMsg(subj, "x")); rep.Header.Get(wire.HeaderServiceErrorCode) != "" {
		t.Fatalf("the longest subject, due now: %s", rep.Header.Get(wire.HeaderServiceError))
	}
	r := next(t, ch, "the longest accepted subject")
	ackSync(t, h.nc, r.Msg, "+ACK")
	wantServing(t, h)
}

// storedTooLong returns a server and a store that holds a message due
// now whose 4060-byte subject is too long to deliver, as an older version
// could have stored it.
func storedTooLong(t *testing.T) (*server.Server, delaystore.Store, string) {
	t.Helper()
	srv := startServer(t)
	st := memStore(t)
	now := time.Now()
	subj := longSubject(4060)
	preStore(t, st, &delaystore.StoredMessage{Subject: subj, Payload: []byte("x"), EnqueuedAtNs: now.UnixNano(), FireAtNs: now.UnixNano()})
	return srv, st, subj
}

// TestDelivery_LongSubjectStoredBefore_Parked checks that a message stored by an
// older version, whose delivery would exceed the server's
// max_control_line, does not take the service off NATS when it is due:
// it is not published, it is parked once (counted in
// natsdelay_messages_undeliverable_total, not retried in a loop) and stays
// pending, so it can be found and canceled, and every other subject is
// still delivered.
func TestDelivery_LongSubjectStoredBefore_Parked(t *testing.T) {
	t.Parallel()
	srv, st, subj := storedTooLong(t)
	nc := connect(t, srv)
	ch := subscribe(t, nc, subj)
	reg := prometheus.NewRegistry()
	svc := startService(t, srv, st, nil, bridge.WithRegisterer(reg))
	h := &harness{srv: srv, svc: svc, nc: nc}
	checkFor(t, wait, 5*time.Millisecond, func() error {
		if n := gauge(t, reg, "natsdelay_messages_undeliverable_total"); n != 1 {
			return fmt.Errorf("%v messages undeliverable, want 1", n)
		}
		return nil
	})
	wantServing(t, h)
	quiet(t, ch, 100*time.Millisecond, "the over-long delivery")
	if n := gauge(t, reg, "natsdelay_messages_undeliverable_total"); n != 1 {
		t.Fatalf("natsdelay_messages_undeliverable_total = %v, want 1: the parked message was tried again", n)
	}
	if err := svc.Ready(); err != nil {
		t.Fatalf("service not ready after the over-long message was due: %v", err)
	}
	// It is kept, not lost, and the way out is the API: LIST finds it,
	// CANCEL removes it.
	body, _ := json.Marshal(map[string]string{"subject": subj})
	rep, err := nc.Request(wire.DefaultAPIPrefix+".LIST", body, wait)
	if err != nil {
		t.Fatal(err)
	}
	var page wire.ListReply
	if err := json.Unmarshal(rep.Data, &page); err != nil || len(page.Messages) != 1 {
		t.Fatalf("LIST of the long subject: %q (%v), want the one message, kept", rep.Data, err)
	}
	rep, err = nc.Request(wire.DefaultAPIPrefix+".CANCEL", []byte(`{"tag":"`+page.Messages[0].Tag+`"}`), wait)
	if err != nil || string(rep.Data) != `{"canceled":true}` {
		t.Fatalf("CANCEL: %q, %v", rep.Data, err)
	}
	waitPending(t, nc, 0)
}

// TestDeadLetter_LongSubjectStoredBefore_Published checks the same message
// with a dead-letter subject set: the dead letter fits (the long subject
// travels in a header there), so the message is dead-lettered once, with
// the reason "undeliverable: ...", and deleted.
func TestDeadLetter_LongSubjectStoredBefore_Published(t *testing.T) {
	t.Parallel()
	srv, st, subj := storedTooLong(t)
	nc := connect(t, srv)
	dead := subscribe(t, nc, "dead.letters")
	svc := startService(t, srv, st, func(c *bridge.Config) { c.Delivery.DeadLetterSubject = "dead.letters" })
	r := next(t, dead, "the dead letter of the undeliverable message")
	if got := r.Header.Get(wire.HeaderSubject); got != subj {
		t.Fatalf("dead letter's %s is %d bytes, want the %d-byte subject", wire.HeaderSubject, len(got), len(subj))
	}
	if reason := r.Header.Get(wire.HeaderReason); !strings.HasPrefix(reason, "undeliverable: too large to publish: a 4060-byte subject") {
		t.Fatalf("dead letter's reason %q, want undeliverable: too large to publish: a 4060-byte subject ...", reason)
	}
	waitPending(t, nc, 0)
	wantServing(t, &harness{srv: srv, svc: svc, nc: nc})
	quiet(t, dead, 100*time.Millisecond, "a second dead letter")
}

// TestIngest_PayloadNearMax_Refused checks that every message the
// service accepts can be delivered: a payload that fits max_payload alone
// but not with the headers the delivery adds is refused with a 400 that
// states the limit and the overage, and a payload that is smaller by that
// overage is accepted and delivered.
func TestIngest_PayloadNearMax_Refused(t *testing.T) {
	t.Parallel()
	const maxPayload = 8192
	srv := startServerWith(t, func(o *server.Options) { o.MaxPayload = maxPayload })
	svc := startService(t, srv, memStore(t), nil)
	h := &harness{srv: srv, svc: svc, nc: connect(t, srv)}
	ch := subscribe(t, h.nc, "big.t")

	hdr := []string{"X-Trace", "abc", "Delay-Id", "id-1"}
	// The ingest message itself fits: payload plus its own small headers.
	size := maxPayload - 100
	rep, err := h.nc.RequestMsg(newMsg("big.t", strings.Repeat("p", size), hdr...), wait)
	if err != nil {
		t.Fatal(err)
	}
	wantError(t, "a payload near max_payload", rep, 400, "over the server's max_payload of 8192")
	over := overage(t, rep)

	m := schedule(t, h.nc, newMsg("big.t", strings.Repeat("p", size-over), hdr...))
	r := next(t, ch, "the largest payload accepted")
	if len(r.Data) != size-over || r.Header.Get(wire.HeaderTag) != m.Tag {
		t.Fatalf("delivered %d bytes with tag %q, want %d bytes with tag %s", len(r.Data), r.Header.Get(wire.HeaderTag), size-over, m.Tag)
	}
	ackSync(t, h.nc, r.Msg, "+ACK")
	wantServing(t, h)
}

// TestDeadLetter_PayloadNearMax_Published checks that with a dead-letter
// subject every accepted message can also be dead-lettered: the dead
// letter adds Delay-Subject and Delay-Reason, so the largest accepted
// payload is smaller, and that one is dead-lettered when TERMed.
func TestDeadLetter_PayloadNearMax_Published(t *testing.T) {
	t.Parallel()
	const maxPayload = 8192
	srv := startServerWith(t, func(o *server.Options) { o.MaxPayload = maxPayload })
	svc := startService(t, srv, memStore(t), func(c *bridge.Config) { c.Delivery.DeadLetterSubject = "dead.t" })
	h := &harness{srv: srv, svc: svc, nc: connect(t, srv)}
	ch := subscribe(t, h.nc, "big.dl.t")
	dead := subscribe(t, h.nc, "dead.t")

	// It fits as a delivery, but not with the dead letter's headers.
	size := maxPayload - 250
	rep, err := h.nc.RequestMsg(newMsg("big.dl.t", strings.Repeat("p", size)), wait)
	if err != nil {
		t.Fatal(err)
	}
	wantError(t, "a payload near max_payload with dead letters", rep, 400, "the dead letter")
	over := overage(t, rep)

	schedule(t, h.nc, newMsg("big.dl.t", strings.Repeat("p", size-over)))
	r := next(t, ch, "the largest payload accepted")
	ackSync(t, h.nc, r.Msg, "+TERM "+strings.Repeat("why ", 100))
	d := next(t, dead, "the dead letter of the largest payload")
	if len(d.Data) != size-over || d.Header.Get(wire.HeaderSubject) != "big.dl.t" {
		t.Fatalf("dead letter of %d bytes for %q, want %d bytes for big.dl.t", len(d.Data), d.Header.Get(wire.HeaderSubject), size-over)
	}
	wantServing(t, h)
}

// overage reads the "<n> over" figure of a size error.
func overage(tb testing.TB, rep *nats.Msg) int {
	tb.Helper()
	desc := rep.Header.Get(wire.HeaderServiceError)
	before, _, ok := strings.Cut(desc, " over the server's")
	if !ok {
		tb.Fatalf("description %q does not say by how much", desc)
	}
	n, err := strconv.Atoi(before[strings.LastIndexByte(before, ' ')+1:])
	if err != nil || n <= 0 {
		tb.Fatalf("description %q: overage: %v", desc, err)
	}
	return n
}

// warnings is a slog handler that passes records to the test log and
// hands WARN records whose message starts with prefix to a channel.
type warnings struct {
	slog.Handler
	prefix string
	ch     chan slog.Record
}

func newWarnings(tb testing.TB, prefix string) *warnings {
	return &warnings{Handler: slog.NewTextHandler(tb.Output(), nil), prefix: prefix, ch: make(chan slog.Record, 1024)}
}

func (w *warnings) Handle(ctx context.Context, r slog.Record) error {
	if r.Level == slog.LevelWarn && strings.HasPrefix(r.Message, w.prefix) {
		select {
		case w.ch <- r.Clone():
		default:
		}
	}
	return w.Handler.Handle(ctx, r)
}

func (w *warnings) WithAttrs(as []slog.Attr) slog.Handler {
	return &warnings{Handler: w.Handler.WithAttrs(as), prefix: w.prefix, ch: w.ch}
}

func (w *warnings) WithGroup(name string) slog.Handler {
	return &warnings{Handler: w.Handler.WithGroup(name), prefix: w.prefix, ch: w.ch}
}

// attr is the value of key in r, as a string.
func attr(r slog.Record, key string) string {
	var v string
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v = a.Value.String()
			return false
		}
		return true
	})
	return v
}

// counterValue is the value of the counter name with the given labels in
// reg, 0 when it has not been counted.
func counterValue(tb testing.TB, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	tb.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		tb.Fatalf("gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if labels[lp.GetName()] != lp.GetValue() {
					continue metric
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// TestAnswer_Bad_CountedAndLogged checks that a consumer that answers a
// delivery with something the service does not understand (ACK without
// the plus, sent as a plain publish as `nats reply` does) is told about:
// a WARN log at most once per interval with the count of those
// suppressed, a bad-answers metric with the reason, no longer counted as
// an invalid ingest, and a 400 when the answer was a request. The
// message is not settled by it: it is delivered again.
func TestAnswer_Bad_CountedAndLogged(t *testing.T) {
	t.Parallel()
	var offset atomic.Int64
	reg := prometheus.NewRegistry()
	logs := newWarnings(t, "bad answer")
	srv := startServer(t)
	startService(t, srv, memStore(t), func(c *bridge.Config) {
		c.Delivery.AckWait, c.Logger = 200*time.Millisecond, slog.New(logs)
		c.Now = func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	}, bridge.WithRegisterer(reg))
	nc := connect(t, srv)
	ch := subscribe(t, nc, "answer.t")
	schedule(t, nc, newMsg("answer.t", "x"))
	r := next(t, ch, "the delivery")

	bad := map[string]string{"reason": "payload"}
	if err := nc.Publish(r.Reply, []byte("ACK")); err != nil {
		t.Fatal(err)
	}
	var w slog.Record
	select {
	case w = <-logs.ch:
	case <-time.After(wait):
		t.Fatal("no WARN for a bad answer")
	}
	if attr(w, "reason") != "payload" || !strings.Contains(attr(w, "err"), `"ACK"`) || attr(w, "suppressed") != "0" {
		t.Fatalf("warning %q %v: want reason payload, the answer quoted, suppressed 0", w.Message, w)
	}
	// More bad answers within the interval are counted, not logged.
	for range 5 {
		if err := nc.Publish(r.Reply, []byte("ACK")); err != nil {
			t.Fatal(err)
		}
	}
	checkFor(t, wait, 5*time.Millisecond, func() error {
		if v := counterValue(t, reg, "natsdelay_bad_answers_total", bad); v != 6 {
			return fmt.Errorf("natsdelay_bad_answers_total{reason=payload} = %v, want 6", v)
		}
		return nil
	})
	select {
	case w := <-logs.ch:
		t.Fatalf("second warning within the interval: %v", w)
	default:
	}
	if v := counterValue(t, reg, "natsdelay_ingest_invalid_unanswered_total", nil); v != 0 {
		t.Fatalf("natsdelay_ingest_invalid_unanswered_total = %v: a bad answer is not an ingest", v)
	}
	// After the interval the next one is logged, with the count of the
	// ones suppressed.
	offset.Store(int64(time.Minute))
	if err := nc.Publish(r.Reply, []byte("ACK")); err != nil {
		t.Fatal(err)
	}
	select {
	case w = <-logs.ch:
	case <-time.After(wait):
		t.Fatal("no WARN for a bad answer after the interval")
	}
	if attr(w, "suppressed") != "5" {
		t.Fatalf("warning %v: want suppressed 5", w)
	}
	// A bad tag has its own reason.
	if err := nc.Publish(wire.DefaultAckPrefix+".nothex", []byte("+ACK")); err != nil {
		t.Fatal(err)
	}
	checkFor(t, wait, 5*time.Millisecond, func() error {
		if v := counterValue(t, reg, "natsdelay_bad_answers_total", map[string]string{"reason": "tag"}); v != 1 {
			return fmt.Errorf("natsdelay_bad_answers_total{reason=tag} = %v, want 1", v)
		}
		return nil
	})
	// As a request the same answer gets a 400.
	rep, err := nc.Request(r.Reply, []byte("ACK"), wait)
	if err != nil {
		t.Fatal(err)
	}
	wantError(t, "ACK without the plus", rep, 400, `ack "ACK"`)
	// The bad answers settled nothing: the message comes again.
	r2 := next(t, ch, "the redelivery after bad answers")
	wantAttempt(t, r2.Msg, 2)
	ackSync(t, nc, r2.Msg, "+ACK")
}

// TestIngest_HeaderRules checks the header rules of ingest: an
// unknown header in the reserved Delay- prefix, under any spelling, is a
// 400 that lists the known ones instead of being passed on silently, and
// so is a header name nats.go cannot publish, which would make the
// message undeliverable; the known ones still work in any case.
func TestIngest_HeaderRules(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	const known = "Delay, Delay-At, Delay-TTL, Delay-Id, Delay-Ack, Delay-Max-Deliver"
	for _, hdr := range [][]string{
		{"Delay-Ttl-Ms", "5000"},
		{"Delay-Cancel", "true"},
		{"delay-tag", "forged"},
		{"DELAY-ATTEMPT", "7"},
		{"Delay-", "x"},
	} {
		rep, err := h.nc.RequestMsg(newMsg("hdr.t", "x", hdr...), wait)
		if err != nil {
			t.Fatal(err)
		}
		wantError(t, hdr[0], rep, 400, fmt.Sprintf("header %s: unknown in the reserved Delay- prefix: want one of %s", hdr[0], known))
	}
	schedule(t, h.nc, newMsg("hdr.t", "x", "delay", "1h", "DELAY-TTL", "1s", "delay-id", "a", "Delay-ack", "none", "delay-max-deliver", "3", "Delayed", "passed on"))

	// nats.go reads any header name but publishes only printable ASCII
	// without a colon; such a message could never be delivered.
	rep := rawRequest(t, h.srv, "delay.hdr.t", "NATS/1.0\r\nX Space: 1\r\n\r\n", "x")
	if !strings.Contains(rep, "400") || !strings.Contains(rep, "printable ASCII") {
		t.Fatalf("header name with a space: reply %q, want a 400 about printable ASCII", rep)
	}
	rep = rawRequest(t, h.srv, "delay.hdr.t", "NATS/1.0\r\nX-Grüße: 1\r\n\r\n", "x")
	if !strings.Contains(rep, "400") || !strings.Contains(rep, "printable ASCII") {
		t.Fatalf("header name not ASCII: reply %q, want a 400 about printable ASCII", rep)
	}
	if p := pending(t, h.nc); p != 1 {
		t.Fatalf("pending = %d, want only the valid message", p)
	}
	wantServing(t, h)
}

// rawRequest sends one HPUB with the raw header block hdr over its own
// TCP connection, and returns the raw reply (headers and body).
func rawRequest(tb testing.TB, srv *server.Server, subject, hdr, data string) string {
	tb.Helper()
	addr := srv.Addr().String()
	c, err := net.DialTimeout("tcp", addr, wait)
	if err != nil {
		tb.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(wait))
	rd := bufio.NewReader(c)
	if _, err := rd.ReadString('\n'); err != nil { // INFO
		tb.Fatal(err)
	}
	fmt.Fprintf(c, "CONNECT {\"verbose\":false,\"pedantic\":false,\"headers\":true,\"no_responders\":true,\"protocol\":1}\r\nSUB raw.reply 1\r\n")
	fmt.Fprintf(c, "HPUB %s raw.reply %d %d\r\n%s%s\r\nPING\r\n", subject, len(hdr), len(hdr)+len(data), hdr, data)
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			tb.Fatalf("raw reply: %v", err)
		}
		f := strings.Fields(line)
		switch {
		case len(f) == 0, f[0] == "PONG", f[0] == "PING", f[0] == "INFO", f[0] == "+OK":
			continue
		case f[0] == "HMSG" || f[0] == "MSG":
			n, _ := strconv.Atoi(f[len(f)-1])
			b := make([]byte, n+2)
			if _, err := io.ReadFull(rd, b); err != nil {
				tb.Fatal(err)
			}
			return string(b[:n])
		default:
			tb.Fatalf("raw reply: unexpected %q", line)
		}
	}
}

// TestIngest_DelayAt_Edges checks the time rules of ingest against the
// instant, not the local calendar: 1970 means the Unix epoch in UTC, a
// zone offset must be within RFC 3339's ±23:59, and a duration too large
// for the service says so and what the maximum is.
func TestIngest_DelayAt_Edges(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	for _, c := range []struct{ name, value, want string }{
		{"Delay-At", "1970-01-01T00:30:00+01:00", "before 1970-01-01T00:00:00Z"},
		{"Delay-At", "2030-01-01T00:00:00+24:00", "zone offset +24:00: want -23:59 to +23:59"},
		{"Delay-At", "2030-01-01T00:00:00-24:00", "zone offset -24:00"},
		{"Delay-At", "2030-01-01T00:00:00+12:60", "zone offset +12:60"},
		{"Delay", "2562048h", `Delay "2562048h": too large: the maximum is 2562047h47m16.854775807s`},
		{"Delay-TTL", "9999999999h", `Delay-TTL "9999999999h": too large`},
		{"Delay", "99999999999999999999", "too large: the maximum is"},
	} {
		rep, err := h.nc.RequestMsg(newMsg("at.t", "x", c.name, c.value), wait)
		if err != nil {
			t.Fatal(err)
		}
		wantError(t, c.name+" "+c.value, rep, 400, c.want)
	}
	// 23:30 on the last day of 1969 at -01:00 is half past midnight on the
	// first day of 1970 in UTC: in the past, so due now.
	ch := subscribe(t, h.nc, "at.t")
	schedule(t, h.nc, newMsg("at.t", "x", "Delay-At", "1969-12-31T23:30:00-01:00"))
	schedule(t, h.nc, newMsg("at.t", "y", "Delay-At", "2030-01-01T00:00:00+23:59", "Delay-Id", "far"))
	r := next(t, ch, "a Delay-At in the first hour of 1970 UTC")
	ackSync(t, h.nc, r.Msg, "+ACK")
}

// TestDelivery_OwnHeaders_ReplaceStored checks that a delivery carries exactly one
// of each of the service's own headers, its own values, whatever the case
// of a publisher header of the same name stored by an older version.
func TestDelivery_OwnHeaders_ReplaceStored(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	st := memStore(t)
	now := time.Now()
	preStore(t, st, &delaystore.StoredMessage{
		Subject: "own.t", Payload: []byte("x"), EnqueuedAtNs: now.UnixNano(), FireAtNs: now.UnixNano(),
		Headers: []*delaystore.Header{
			{Name: "delay-tag", Values: []string{"forged"}},
			{Name: "DELAY-ATTEMPT", Values: []string{"99"}},
			{Name: "Delay-Fire-At", Values: []string{"never"}},
			{Name: "X-Kept", Values: []string{"yes"}},
		},
	})
	nc := connect(t, srv)
	ch := subscribe(t, nc, "own.t")
	startService(t, srv, st, nil)
	r := next(t, ch, "the delivery")
	for _, name := range []string{wire.HeaderTag, wire.HeaderAttempt, wire.HeaderFireAt} {
		var vals []string
		for k, vs := range r.Header {
			if strings.EqualFold(k, name) {
				vals = append(vals, vs...)
			}
		}
		if len(vals) != 1 || vals[0] == "forged" || vals[0] == "99" || vals[0] == "never" {
			t.Fatalf("%s in any case: %q, want only the service's value (headers %v)", name, vals, r.Header)
		}
	}
	if r.Header.Get("X-Kept") != "yes" {
		t.Fatalf("X-Kept = %q, want yes: other headers are passed on", r.Header.Get("X-Kept"))
	}
	ackSync(t, nc, r.Msg, "+ACK")
}

// TestIngest_InvalidPlainPublish_Warns checks that an invalid message
// published without a reply subject, which nobody can be told about, is
// not dropped silently: it is logged at WARN (rate-limited, with the count
// of those held back) and counted, and nothing is stored.
func TestIngest_InvalidPlainPublish_Warns(t *testing.T) {
	t.Parallel()
	logs := newWarnings(t, "invalid message")
	srv := startServer(t)
	startService(t, srv, memStore(t), func(c *bridge.Config) { c.Logger = slog.New(logs) })
	nc := connect(t, srv)
	if err := nc.PublishMsg(newMsg("plain.t", "x", "Delay", "90x")); err != nil {
		t.Fatal(err)
	}
	select {
	case w := <-logs.ch:
		if !strings.Contains(attr(w, "err"), `Delay "90x"`) || attr(w, "subject") != "delay.plain.t" || attr(w, "suppressed") != "0" {
			t.Fatalf("warning %v: want the subject, the error and suppressed 0", w)
		}
	case <-time.After(wait):
		t.Fatal("no WARN for an invalid plain publish")
	}
	if p := pending(t, nc); p != 0 {
		t.Fatalf("pending = %d, want 0", p)
	}
}

// TestAPI_LargeReplies_FitMaxPayload checks that an API request whose reply
// would exceed the server's max_payload is answered rather than left to
// time out: GET of a large payload gets a 400 that says so and how to ask
// instead, and LIST returns fewer messages per page, so that every page
// fits, and pages through all of them.
func TestAPI_LargeReplies_FitMaxPayload(t *testing.T) {
	t.Parallel()
	const maxPayload = 8192
	srv := startServerWith(t, func(o *server.Options) { o.MaxPayload = maxPayload })
	startService(t, srv, memStore(t), nil)
	nc := connect(t, srv)
	api := wire.DefaultAPIPrefix + "."

	big := schedule(t, nc, newMsg("api.big.t", strings.Repeat("p", 7000), "Delay", "1h"))
	rep, err := nc.Request(api+"GET", []byte(`{"tag":"`+big.Tag+`","payload":true}`), wait)
	if err != nil {
		t.Fatalf("GET with a large payload: %v", err)
	}
	wantError(t, "GET with a large payload", rep, 400, `over the server's max_payload of 8192; ask without "payload"`)
	rep, err = nc.Request(api+"GET", []byte(`{"tag":"`+big.Tag+`"}`), wait)
	if err != nil || rep.Header.Get(wire.HeaderServiceErrorCode) != "" {
		t.Fatalf("GET without the payload: %v %v", err, rep.Header)
	}

	const n = 5
	var tags []string
	for i := range n {
		m := schedule(t, nc, newMsg("api.list.t", "x", "Delay", "1h", "X-Big", strings.Repeat(strconv.Itoa(i), 3000)))
		tags = append(tags, m.Tag)
	}
	var got []string
	after := ""
	for pages := 0; len(got) < n; pages++ {
		if pages > n {
			t.Fatalf("more than %d pages for %d messages: %v", n, n, got)
		}
		req := `{"subject":"api.list.t"`
		if after != "" {
			req += `,"after":"` + after + `"`
		}
		rep, err := nc.Request(api+"LIST", []byte(req+"}"), wait)
		if err != nil {
			t.Fatalf("LIST page %d: %v", pages, err)
		}
		if code := rep.Header.Get(wire.HeaderServiceErrorCode); code != "" {
			t.Fatalf("LIST page %d: %s %s", pages, code, rep.Header.Get(wire.HeaderServiceError))
		}
		var page wire.ListReply
		if err := json.Unmarshal(rep.Data, &page); err != nil {
			t.Fatal(err)
		}
		if len(page.Messages) == 0 {
			t.Fatalf("LIST page %d is empty with %d of %d listed", pages, len(got), n)
		}
		for _, m := range page.Messages {
			got = append(got, m.Tag)
		}
		if page.Next == "" && len(got) < n {
			t.Fatalf("LIST ended after %d of %d messages", len(got), n)
		}
		after = page.Next
	}
	if strings.Join(got, ",") != strings.Join(tags, ",") {
		t.Fatalf("LIST gave %v, want %v", got, tags)
	}
}

// TestIngest_DelayInDays checks that Delay and Delay-TTL take whole days
// first, as people write them (a day is 24 hours): the reply's fire_at is
// that far out; that years get a 400 that says to give days; and that a
// -NAK delay in days holds the redelivery back.
func TestIngest_DelayInDays(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	for _, c := range []struct {
		delay string
		want  time.Duration
	}{{"7d", 7 * 24 * time.Hour}, {"1d12h", 36 * time.Hour}, {"0d", 0}} {
		before := time.Now()
		s := schedule(t, h.nc, newMsg("days.t", "x", "Delay", c.delay, "Delay-TTL", "1d"))
		if lo, hi := before.Add(c.want).Add(-time.Millisecond), time.Now().Add(c.want).Add(time.Millisecond); s.FireAt.Before(lo) || s.FireAt.After(hi) {
			t.Fatalf("Delay %s: fire_at %v, want between %v and %v", c.delay, s.FireAt, lo, hi)
		}
	}
	for _, c := range []struct{ delay, want string }{
		{"100y", "years vary in length: give days, such as 365d"},
		{"1.5d", "whole days such as 7d or 1d12h"},
		{"7d-1h", "whole days such as 7d or 1d12h"},
		{"106752d", "too large"},
	} {
		rep, err := h.nc.RequestMsg(newMsg("days.t", "x", "Delay", c.delay), wait)
		if err != nil {
			t.Fatal(err)
		}
		wantError(t, "Delay "+c.delay, rep, 400, c.want)
	}
	ch := subscribe(t, h.nc, "days.nak")
	schedule(t, h.nc, newMsg("days.nak", "x"))
	r := next(t, ch, "the delivery to NAK")
	ackSync(t, h.nc, r.Msg, "-NAK 1d")
	quiet(t, ch, 200*time.Millisecond, "a redelivery a day early")
}
