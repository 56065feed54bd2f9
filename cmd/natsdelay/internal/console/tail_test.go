package console_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	natsd "github.com/nats-io/nats-server/v2/server"
	natsserver "github.com/nats-io/nats-server/v2/test"
	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge/bridgetest"
	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/cmd/natsdelay/internal/server"
)

// withEvents turns the service's lifecycle events on, as serve --events.
func withEvents(o *server.Options) { o.Service.Events = true }

// sseEvent is one Server-Sent Event as a browser's EventSource reads it:
// its type ("message" when none is named) and its data lines joined.
type sseEvent struct {
	Type, Data string
}

// sseStream is a live tail's stream read over real HTTP, as an
// EventSource would read it. It is read on the test's goroutine: a test
// that stops reading is a browser that does not keep up.
type sseStream struct {
	resp   *http.Response
	r      *bufio.Reader
	cancel context.CancelFunc
}

// streamClient has no timeout of its own: a stream's request carries a
// deadline in its context instead. Its receive buffer is small and fixed,
// so that what a client that stops reading can hold does not depend on
// the machine's TCP autotuning.
var streamClient = &http.Client{Transport: &http.Transport{
	DisableCompression: true,
	DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetReadBuffer(64 << 10)
		}
		return c, err
	},
}}

// openTailWhenFree opens a stream, asking again while every place is
// taken: a stream's place is given back just after its body ends, so the
// first ask after one ended may still find none.
func openTailWhenFree(t *testing.T, base, what string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		st, code, body := openTail(t, base, "", "", "")
		if st != nil {
			return
		}
		if code != http.StatusServiceUnavailable || time.Now().After(deadline) {
			t.Fatalf("%s: %d %s", what, code, body)
		}
	}
}

// openTail opens the live tail stream of query as user (when set); the
// request fails after 30s at the latest, so that a test waiting on an
// event that never comes fails instead of hanging. It returns the status
// and body of a refusal, or the open stream.
func openTail(t *testing.T, base, query, user, pass string) (*sseStream, int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/ui/tail/stream?"+query, nil)
	req.Header.Set("Accept", "text/event-stream")
	if user != "" {
		req.SetBasicAuth(user, pass)
	}
	resp, err := streamClient.Do(req)
	if err != nil {
		cancel()
		t.Fatalf("GET the tail stream %s: %v", query, err)
	}
	if resp.StatusCode != http.StatusOK {
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		resp.Body.Close()
		cancel()
		return nil, resp.StatusCode, b.String()
	}
	s := &sseStream{resp: resp, r: bufio.NewReader(resp.Body), cancel: cancel}
	t.Cleanup(s.close)
	return s, resp.StatusCode, ""
}

// mustOpenTail opens the stream of query and reads its first event, which
// must say the subscription is in place; it returns the subject it names.
func mustOpenTail(t *testing.T, base, query string) (*sseStream, string) {
	t.Helper()
	s, code, body := openTail(t, base, query, "", "")
	if s == nil {
		t.Fatalf("tail stream %s: status %d: %s", query, code, body)
	}
	if ct := s.resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("tail stream: Content-Type %q", ct)
	}
	e := s.next(t)
	var hello struct{ Subject string }
	if e.Type != "subscribed" || json.Unmarshal([]byte(e.Data), &hello) != nil {
		t.Fatalf("tail stream %s: first event %+v, want subscribed with its subject", query, e)
	}
	return s, hello.Subject
}

// close hangs up, as a browser that leaves the page.
func (s *sseStream) close() {
	s.cancel()
	s.resp.Body.Close()
}

// next reads the next event; comments are skipped.
func (s *sseStream) next(t *testing.T) sseEvent {
	t.Helper()
	e, err := s.read()
	if err != nil {
		t.Fatalf("tail stream: %v", err)
	}
	return e
}

func (s *sseStream) read() (sseEvent, error) {
	var e sseEvent
	var data []string
	seen := false
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			return e, fmt.Errorf("read an event: %w", err)
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			if !seen {
				continue
			}
			if e.Type == "" {
				e.Type = "message"
			}
			e.Data = strings.Join(data, "\n")
			return e, nil
		case strings.HasPrefix(line, ":"):
			continue
		}
		seen = true
		name, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch name {
		case "event":
			e.Type = value
		case "data":
			data = append(data, value)
		}
	}
}

// lifecycle reads the next lifecycle event and decodes its body as the
// documented wire.Event, refusing any field it does not have.
func (s *sseStream) lifecycle(t *testing.T) wire.Event {
	t.Helper()
	e := s.next(t)
	if e.Type != "message" {
		t.Fatalf("tail stream: event %+v, want a lifecycle event", e)
	}
	var ev wire.Event
	dec := json.NewDecoder(strings.NewReader(e.Data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ev); err != nil {
		t.Fatalf("tail stream: body %s: %v", e.Data, err)
	}
	return ev
}

// TestTail_Stream_EventsOfTheFilter checks the live tail's stream over
// real HTTP against the real service with --events: it first says the
// subscription is in place and on which subject; a message scheduled,
// delivered and acked on a subject of the filter arrives as its
// scheduled, delivered and acked events, each with the body
// docs/protocol.md documents (exactly the fields of wire.Event, the tag
// and subject of the message); an event of a subject outside the filter,
// told before them, does not arrive; and a kind filter passes that kind
// only.
func TestTail_Stream_EventsOfTheFilter(t *testing.T) {
	s := serve(t, "127.0.0.1:0", true, nil, withEvents)
	all, subject := mustOpenTail(t, s.base, "subject="+url.QueryEscape("tail.>"))
	if subject != wire.DefaultEventPrefix+".*.tail.>" {
		t.Errorf("subscribed to %q, want %s.*.tail.>", subject, wire.DefaultEventPrefix)
	}
	delivered, subject := mustOpenTail(t, s.base, "subject="+url.QueryEscape("tail.*")+"&kind=delivered")
	if subject != wire.DefaultEventPrefix+".delivered.tail.*" {
		t.Errorf("subscribed to %q, want %s.delivered.tail.*", subject, wire.DefaultEventPrefix)
	}

	deliveries := make(chan *nats.Msg, 4)
	sub, err := s.nc.ChanSubscribe("tail.a", deliveries)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	// Told first (its ingest answers before the next one is sent), so
	// it would arrive first if the filter let it through.
	s.schedule(t, "other.a", []byte("not mine"), "Delay", "1h")
	tag := s.schedule(t, "tail.a", []byte("hi"), "Delay", "50ms", "Delay-Id", "order-7")
	var m *nats.Msg
	select {
	case m = <-deliveries:
	case <-time.After(10 * time.Second):
		t.Fatal("no delivery of tail.a")
	}
	rep, err := s.nc.Request(m.Reply, []byte("+ACK"), 5*time.Second)
	if err != nil {
		t.Fatalf("ack: %v", err)
	}
	if string(rep.Data) != "+OK" {
		t.Fatalf("ack: %q, want +OK", rep.Data)
	}

	// A delivery is told once its flush returns, which its ACK may beat:
	// delivered and acked come in either order, after scheduled.
	want := []string{wire.EventScheduled, wire.EventDelivered + " " + wire.EventAcked}
	var got []string
	for range 3 {
		ev := all.lifecycle(t)
		if ev.Tag != tag || ev.Subject != "tail.a" || ev.ID != "order-7" || ev.FireAt == "" || ev.At == "" {
			t.Errorf("event %+v: want the tag %s, subject tail.a, id order-7 and its times", ev, tag)
		}
		got = append(got, ev.Kind)
	}
	if got[0] != want[0] || !strings.Contains(want[1], got[1]) || !strings.Contains(want[1], got[2]) || got[1] == got[2] {
		t.Errorf("events %q, want scheduled, then delivered and acked", got)
	}
	if ev := delivered.lifecycle(t); ev.Kind != wire.EventDelivered || ev.Tag != tag || ev.Attempt != 1 {
		t.Errorf("kind=delivered: %+v, want the delivery of %s, attempt 1", ev, tag)
	}
}

// TestTail_BadFilter_Refused checks that a filter that is not a NATS
// subject filter, or a kind that is none, is refused with a 400 that says
// what is wrong, by the stream and by the page, and subscribes nothing.
func TestTail_BadFilter_Refused(t *testing.T) {
	s := serve(t, "127.0.0.1:0", true, nil, withEvents)
	for _, q := range []string{"subject=" + url.QueryEscape("orders.>.x"), "subject=" + url.QueryEscape("orders..x"),
		"subject=" + url.QueryEscape("ord*"), "subject=" + url.QueryEscape("a b"), "kind=exploded"} {
		st, code, body := openTail(t, s.base, q, "", "")
		if st != nil {
			t.Fatalf("stream %s: opened, want a 400", q)
		}
		mustStatus(t, "stream "+q, code, http.StatusBadRequest, body)
		if !strings.Contains(body, "400 bad request") || !(strings.Contains(body, `"filter"`) || strings.Contains(body, "event kind")) {
			t.Errorf("stream %s: %q does not say what is wrong", q, body)
		}
		code, page, _ := get(t, s.base+"/ui/tail?"+q, "", "")
		mustStatus(t, "page "+q, code, http.StatusBadRequest, page)
		if strings.Contains(page, "data-stream") {
			t.Errorf("page %s: offers a stream for a bad filter", q)
		}
	}
}

// TestTail_EventsOff_SaysHow checks the live tail of a service without
// --events: the page says events are off and how to turn them on, and
// offers no stream, which answers 503 saying the same.
func TestTail_EventsOff_SaysHow(t *testing.T) {
	s := serve(t, "127.0.0.1:0", true, nil)
	code, page, _ := get(t, s.base+"/ui/tail", "", "")
	mustStatus(t, "GET /ui/tail", code, http.StatusOK, page)
	if !strings.Contains(page, `id="tail-off"`) || !strings.Contains(page, "--events") || strings.Contains(page, "data-stream") {
		t.Errorf("the page does not say that events are off and how to turn them on:\n%s", page)
	}
	st, code, body := openTail(t, s.base, "", "", "")
	if st != nil {
		t.Fatal("the stream opened with events off")
	}
	mustStatus(t, "the stream", code, http.StatusServiceUnavailable, body)
	if !strings.Contains(body, "--events") {
		t.Errorf("the stream's refusal %q does not say how to turn events on", body)
	}
}

// TestTail_Disconnect_ReleasesSubscription checks that a browser that
// goes releases its stream's subscription at the NATS server: while the
// stream is open, an event published on its filter reaches it; once the
// client hangs up, a request on that subject finds no responder at all
// (the server has no interest left), and the console counts no stream.
func TestTail_Disconnect_ReleasesSubscription(t *testing.T) {
	s := serve(t, "127.0.0.1:0", true, nil, withEvents)
	st, _ := mustOpenTail(t, s.base, "subject=gone.*")
	probe := wire.DefaultEventPrefix + ".scheduled.gone.x"
	if err := s.nc.Publish(probe, []byte(`{"kind":"scheduled","probe":1}`)); err != nil {
		t.Fatal(err)
	}
	if e := st.next(t); e.Data != `{"kind":"scheduled","probe":1}` {
		t.Fatalf("the stream got %+v, want the probe", e)
	}
	st.close()
	deadline := time.Now().Add(15 * time.Second)
	for {
		_, err := s.nc.Request(probe, nil, 100*time.Millisecond)
		if errors.Is(err, nats.ErrNoResponders) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the subscription is still there after the client went: the probe request gave %v", err)
		}
	}
}

// TestTail_SlowBrowser_DropsCounted checks that a browser that does not
// keep up never holds up the service or the stream's subscription:
// while the client reads nothing, a flood of events is published on its
// filter and the service takes and answers a message as usual; once it
// reads again, every event of the flood either arrives or is counted in
// a "dropped" event, and some were dropped.
func TestTail_SlowBrowser_DropsCounted(t *testing.T) {
	s := serve(t, "127.0.0.1:0", true, nil, withEvents)
	st, _ := mustOpenTail(t, s.base, "subject=flood.*")
	// More than the socket buffers between the stream and the client,
	// and the stream's own buffer, can hold.
	const n = 20000
	pad := strings.Repeat("x", 1000)
	for i := range n {
		body := `{"kind":"scheduled","n":` + strconv.Itoa(i) + `,"pad":"` + pad + `"}`
		if err := s.nc.Publish(wire.DefaultEventPrefix+".scheduled.flood.x", []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	// The service is not held up by the stuck browser.
	s.schedule(t, "elsewhere.y", []byte("still served"), "Delay", "1h")

	received, dropped, last := 0, 0, -1
	for received+dropped < n {
		e := st.next(t)
		switch e.Type {
		case "dropped":
			d, err := strconv.Atoi(e.Data)
			if err != nil || d < dropped {
				t.Fatalf("dropped %q after %d", e.Data, dropped)
			}
			dropped = d
		case "message":
			var ev struct {
				Kind string
				N    *int
			}
			if err := json.Unmarshal([]byte(e.Data), &ev); err != nil {
				t.Fatalf("event %q: %v", e.Data, err)
			}
			if ev.N == nil {
				t.Fatalf("event %q: not one of the flood", e.Data)
			}
			if *ev.N <= last {
				t.Fatalf("event %d after %d: out of order", *ev.N, last)
			}
			last = *ev.N
			received++
		default:
			t.Fatalf("unexpected event %+v", e)
		}
	}
	if received+dropped != n || dropped == 0 {
		t.Errorf("received %d and dropped %d of %d: want all accounted for, and some dropped", received, dropped, n)
	}
	t.Logf("received %d, dropped %d", received, dropped)
}

// TestTail_ServerClose_EndsStreams checks that closing the server ends
// each open stream, telling the browser why, before the service stops:
// the client reads an "end" event and then the end of the body, and
// Close returns (goleak, in TestMain, sees no stream left).
func TestTail_ServerClose_EndsStreams(t *testing.T) {
	s := serve(t, "127.0.0.1:0", true, nil, withEvents)
	st, _ := mustOpenTail(t, s.base, "")
	if err := s.srv.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if e := st.next(t); e.Type != "end" || !strings.Contains(e.Data, "stopping") {
		t.Errorf("after Close: %+v, want end, saying the console is stopping", e)
	}
	if e, err := st.read(); err == nil {
		t.Errorf("after the end: %+v, want the end of the stream", e)
	}
}

// TestTail_Bounded checks that the open streams are bounded: with 32
// open, another is refused with a 503 that says why; once one closes,
// a new one opens.
func TestTail_Bounded(t *testing.T) {
	s := serve(t, "127.0.0.1:0", true, nil, withEvents)
	var open []*sseStream
	for range 32 {
		st, _ := mustOpenTail(t, s.base, "")
		open = append(open, st)
	}
	st, code, body := openTail(t, s.base, "", "", "")
	if st != nil {
		t.Fatal("a 33rd stream opened")
	}
	mustStatus(t, "the 33rd stream", code, http.StatusServiceUnavailable, body)
	if !strings.Contains(body, "too many live tails") {
		t.Errorf("the 33rd stream: %q does not say why", body)
	}
	open[0].close()
	openTailWhenFree(t, s.base, "after one closed")
}

// TestTail_OffLoopback_NeedsLogin checks that the live tail is behind the
// console's login as every page is: off loopback with --ui-auth, its page
// and its stream answer 401 without credentials or with a wrong password,
// and the stream opens with the password of the file.
func TestTail_OffLoopback_NeedsLogin(t *testing.T) {
	s := serve(t, "0.0.0.0:0", true, passwordFile(t, "ops", "correct horse battery staple"), withEvents)
	for _, pass := range []string{"", "wrong"} {
		user := ""
		if pass != "" {
			user = "ops"
		}
		code, body, _ := get(t, s.base+"/ui/tail", user, pass)
		mustStatus(t, "the page, password "+strconv.Quote(pass), code, http.StatusUnauthorized, body)
		st, code, body := openTail(t, s.base, "", user, pass)
		if st != nil {
			t.Fatalf("the stream opened with password %q", pass)
		}
		mustStatus(t, "the stream, password "+strconv.Quote(pass), code, http.StatusUnauthorized, body)
	}
	code, page, _ := get(t, s.base+"/ui/tail", "ops", "correct horse battery staple")
	mustStatus(t, "the page, logged in", code, http.StatusOK, page)
	st, code, body := openTail(t, s.base, "", "ops", "correct horse battery staple")
	if st == nil {
		t.Fatalf("the stream, logged in: %d %s", code, body)
	}
	if e := st.next(t); e.Type != "subscribed" {
		t.Errorf("the stream, logged in: %+v, want subscribed", e)
	}
}

// TestTail_PermissionDenied_SaysWhich checks the live tail on a NATS
// server with permissions: with the service's user as docs/operations.md
// gave it before the tail (no subscribe permission on the events), the
// stream is refused with a 503 that names the permission to add; with
// the permissions docs/operations.md gives it now, the stream opens.
func TestTail_PermissionDenied_SaysWhich(t *testing.T) {
	base := []string{"delay.>", "$DELAY.ACK.>", "$DELAY.ACK", "$DELAY.API.>", "$SRV.>"}
	opts := natsserver.DefaultTestOptions
	opts.Port = -1
	opts.Users = []*natsd.User{
		{Username: "old", Password: "pw", Permissions: &natsd.Permissions{
			Publish: &natsd.SubjectPermission{Allow: []string{">"}}, Subscribe: &natsd.SubjectPermission{Allow: base}}},
		{Username: "natsdelay", Password: "pw", Permissions: &natsd.Permissions{
			Publish: &natsd.SubjectPermission{Allow: []string{">"}}, Subscribe: &natsd.SubjectPermission{Allow: append(base, "$DELAY.EVENT.>")}}},
	}
	ns := natsserver.RunServer(&opts)
	t.Cleanup(ns.Shutdown)
	open := func(user string) string {
		o := server.Options{
			Logger: bridgetest.Logger(t), Engine: "memory", HTTP: "127.0.0.1:0", UI: true,
			Connect: func(extra ...nats.Option) (*nats.Conn, error) {
				return nats.Connect(ns.ClientURL(), append([]nats.Option{nats.UserInfo(user, "pw")}, extra...)...)
			},
		}
		o.Service.Engine, o.Service.Events = "memory", true
		srv, err := server.Open(context.Background(), o)
		if err != nil {
			t.Fatalf("server.Open as %s: %v", user, err)
		}
		t.Cleanup(func() { _ = srv.Close() })
		_, port, _ := net.SplitHostPort(srv.HTTPAddr())
		return "http://127.0.0.1:" + port
	}

	st, code, body := openTail(t, open("old"), "subject=orders.%3E", "", "")
	if st != nil {
		t.Fatal("the stream opened without the permission to subscribe")
	}
	mustStatus(t, "the stream without the permission", code, http.StatusServiceUnavailable, body)
	if !strings.Contains(body, "refused the live tail's subscription to $DELAY.EVENT.*.orders.>") || !strings.Contains(body, "subscribe permission on $DELAY.EVENT.>") {
		t.Errorf("the refusal %q does not name the permission to add", body)
	}
	if st, _ := mustOpenTail(t, open("natsdelay"), "subject=orders.%3E"); st == nil {
		t.Fatal("no stream with the permission")
	}
}

// TestTail_IdleStreams_EndOnTime checks that streams on which no event
// flows do not keep their places: a client opens every one of them and
// reads nothing, and another is refused (503); with no event published,
// each held stream ends after the idle time, saying why, and a new
// browser's stream then opens.
func TestTail_IdleStreams_EndOnTime(t *testing.T) {
	const idle = 2 * time.Second
	s := serve(t, "127.0.0.1:0", true, nil, withEvents, func(o *server.Options) { o.UITailIdle = idle })
	var held []*sseStream
	start := time.Now()
	for range 32 {
		st, _ := mustOpenTail(t, s.base, "subject=quiet.*")
		held = append(held, st)
	}
	st, code, body := openTail(t, s.base, "", "", "")
	// NB: only when the 33rd was answered within the idle time of the
	// first held stream is every place surely still held; a machine slow
	// enough to take longer may have ended the first already.
	if took := time.Since(start); took < idle && (st != nil || code != http.StatusServiceUnavailable) {
		t.Fatalf("a 33rd stream while 32 are held: %d %s, want 503", code, body)
	} else if took >= idle {
		t.Logf("opening 33 streams took %v, over the idle time %v: the 33rd's answer (%d) is not checked", took, idle, code)
	}
	if st != nil {
		st.close()
	}
	for i, st := range held {
		if e := st.next(t); e.Type != "end" || !strings.Contains(e.Data, "no event for") {
			t.Fatalf("held stream %d: %+v, want end, saying it was idle", i, e)
		}
		if e, err := st.read(); err == nil {
			t.Fatalf("held stream %d after its end: %+v, want the end of the stream", i, e)
		}
	}
	openTailWhenFree(t, s.base, "a new stream after the idle ones ended")
}
