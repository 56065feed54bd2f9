package integration_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/natsdelay/natsdelay/bridge"
	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/keys"
)

// apiRequest sends body to $DELAY.API.<verb> and returns the raw reply. A
// body that is not a string or []byte is sent as JSON.
func apiRequest(tb testing.TB, nc *nats.Conn, verb string, body any) *nats.Msg {
	tb.Helper()
	var data []byte
	switch b := body.(type) {
	case nil:
	case string:
		data = []byte(b)
	case []byte:
		data = b
	default:
		var err error
		if data, err = json.Marshal(b); err != nil {
			tb.Fatalf("%s request: %v", verb, err)
		}
	}
	rep, err := nc.Request(wire.DefaultAPIPrefix+"."+verb, data, wait)
	if err != nil {
		tb.Fatalf("%s %s: %v", verb, data, err)
	}
	return rep
}

// apiCall sends body to verb through the client package, fails tb unless
// the reply is a success, and decodes it into out. Tests of the error
// answers' wire form use apiRequest.
func apiCall(tb testing.TB, nc *nats.Conn, verb string, body, out any) {
	tb.Helper()
	data, err := api(nc).Request(context.Background(), verb, body)
	if err != nil {
		tb.Fatalf("%s %v: %v", verb, body, err)
	}
	if err := json.Unmarshal(data, out); err != nil {
		tb.Fatalf("%s reply %q: %v", verb, data, err)
	}
}

// wantServiceError fails tb unless rep is an error answer in the micro
// convention with code: both status headers, and a JSON body carrying the
// same code and description. It returns the description.
func wantServiceError(tb testing.TB, rep *nats.Msg, code int) string {
	tb.Helper()
	desc := rep.Header.Get(wire.HeaderServiceError)
	if got := rep.Header.Get(wire.HeaderServiceErrorCode); got != strconv.Itoa(code) || desc == "" {
		tb.Fatalf("reply %q with headers %v, want error code %d with a description", rep.Data, rep.Header, code)
	}
	var body struct {
		Error *wire.ServiceError `json:"error"`
	}
	dec := json.NewDecoder(strings.NewReader(string(rep.Data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil || body.Error == nil {
		tb.Fatalf("error body %q: %v", rep.Data, err)
	}
	if body.Error.Code != code || body.Error.Description != desc {
		tb.Fatalf("error body %+v, want code %d and the header's description %q", body.Error, code, desc)
	}
	return desc
}

// apiError sends body to verb and fails tb unless the answer is an error
// with code whose description contains want.
func apiError(tb testing.TB, nc *nats.Conn, verb string, body any, code int, want string) {
	tb.Helper()
	desc := wantServiceError(tb, apiRequest(tb, nc, verb, body), code)
	if !strings.Contains(desc, want) {
		tb.Fatalf("%s %v: error %q, want it to contain %q", verb, body, desc, want)
	}
}

func info(tb testing.TB, nc *nats.Conn) wire.InfoReply {
	tb.Helper()
	var r wire.InfoReply
	apiCall(tb, nc, "INFO", nil, &r)
	return r
}

// cancelReply is the success body of CANCEL.
type cancelReply struct {
	Canceled bool `json:"canceled"`
}

// pauseSubjects pauses the subjects of pattern and returns what resumes
// them. A test whose step must come before a message falls due (a
// cancel, a replace, a +TERM of a message not yet delivered) runs that
// step paused: on a loaded machine the requests before it can take
// longer than a short delay.
func pauseSubjects(tb testing.TB, nc *nats.Conn, pattern string) (resume func()) {
	tb.Helper()
	var lim wire.Limit
	apiCall(tb, nc, wire.VerbPause, wire.PatternRequest{Pattern: pattern}, &lim)
	if !lim.Paused {
		tb.Fatalf("PAUSE %s answered %+v", pattern, lim)
	}
	return func() {
		tb.Helper()
		apiCall(tb, nc, wire.VerbResume, wire.PatternRequest{Pattern: pattern}, &lim)
	}
}

// cancelTag cancels the message with tag and fails tb unless it was.
func cancelTag(tb testing.TB, nc *nats.Conn, tag string) {
	tb.Helper()
	var r cancelReply
	apiCall(tb, nc, "CANCEL", map[string]string{"tag": tag}, &r)
	if !r.Canceled {
		tb.Fatalf("CANCEL %s: canceled = false", tag)
	}
}

// windowMessages are scheduled by the INFO tests, one per count window:
// due now (nobody listens, so it stays pending), within a minute, an hour,
// a day, and beyond a day.
var windowMessages = []struct{ subject, delay string }{
	{"info.now", "0"},
	{"info.30s", "30s"},
	{"info.30m", "30m"},
	{"info.12h", "12h"},
	{"info.48h", "48h"},
}

// windowCounts are the counts of windowMessages. The windows nest: a
// message within the minute is also within the hour and the day.
var windowCounts = wire.Counts{Pending: 5, Subjects: 5, DueNow: 1, NextMinute: 1, NextHour: 2, NextDay: 3}

func scheduleWindows(tb testing.TB, nc *nats.Conn) {
	tb.Helper()
	for _, w := range windowMessages {
		schedule(tb, nc, newMsg(w.subject, "x", "Delay", w.delay))
	}
}

// waitCounts polls INFO until its counts are want. The due-now message
// bounces off "no responders" and is in flight for a moment each time, so
// a single read could catch in_flight 1.
func waitCounts(tb testing.TB, nc *nats.Conn, want wire.Counts) wire.InfoReply {
	tb.Helper()
	var r wire.InfoReply
	checkFor(tb, wait, 20*time.Millisecond, func() error {
		if r = info(tb, nc); r.Counts != want {
			return fmt.Errorf("counts %+v, want %+v", r.Counts, want)
		}
		return nil
	})
	return r
}

// TestAPI_Info checks that INFO reports the version, the engine, the
// configuration, and counts that put each pending message in the right
// time windows, with a delivered but unACKed message counted in flight.
func TestAPI_Info(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *bridge.Config) {
		c.Engine = "pebble-memory"
		c.Delivery.AckWait = time.Minute
		c.Delivery.MaxDeliver = 5
		c.Delivery.Backoff = []time.Duration{time.Second, 10 * time.Second}
		c.Delivery.DeadLetterSubject = "api.dlq"
		c.MaxPayload = 4096
	})
	empty := info(t, h.nc)
	if empty.Counts != (wire.Counts{}) {
		t.Fatalf("counts of an empty service %+v, want all zero", empty.Counts)
	}

	scheduleWindows(t, h.nc)
	got := subscribe(t, h.nc, "info.inflight")
	schedule(t, h.nc, newMsg("info.inflight", "x"))
	next(t, got, "delivery to hold in flight")
	want := windowCounts
	want.Pending++
	want.Subjects++
	want.DueNow++ // a delivered message stays due until it is ACKed
	want.InFlight = 1
	r := waitCounts(t, h.nc, want)

	if r.Version != bridge.Version || r.Engine != "pebble-memory" {
		t.Fatalf("version %q engine %q, want %q and pebble-memory", r.Version, r.Engine, bridge.Version)
	}
	wantCfg := wire.ConfigSummary{
		IngestPrefix: wire.DefaultIngestPrefix, AckPrefix: wire.DefaultAckPrefix, APIPrefix: wire.DefaultAPIPrefix,
		AckWait: "1m0s", MaxDeliver: 5, Backoff: []string{"1s", "10s"}, DeadLetterSubject: "api.dlq", DeadRetention: "168h0m0s",
		TimeBucket: "0s", MaxPayload: 4096, MaxControlLine: bridge.DefaultMaxControlLine,
	}
	if fmt.Sprint(r.Config) != fmt.Sprint(wantCfg) {
		t.Fatalf("config %+v, want %+v", r.Config, wantCfg)
	}
	// A delivery counts once the flush after it tells that it reached a
	// subscriber, which may be after the subscriber has it. The due-now
	// message only bounces, so it never counts.
	checkFor(t, wait, 10*time.Millisecond, func() error {
		if st := info(t, h.nc).Stats; st.Delivered != 1 {
			return fmt.Errorf("stats %+v: want the one delivery that reached a subscriber counted", st)
		}
		return nil
	})
}

// TestAPI_Info_CountsAfterRestart checks that the counts are exact after a
// restart on a durable store: they come from what is stored, not from
// what the process saw.
func TestAPI_Info_CountsAfterRestart(t *testing.T) {
	t.Parallel()
	e := engines[1]
	if e.name != "pebble-disk" {
		t.Fatalf("engines[1] is %s, want pebble-disk", e.name)
	}
	dir := t.TempDir()
	srv := startServer(t)
	nc := connect(t, srv)
	svc := startService(t, srv, e.open(t, dir), nil)
	scheduleWindows(t, nc)
	waitCounts(t, nc, windowCounts)
	if err := svc.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	startService(t, srv, e.open(t, dir), nil)
	waitCounts(t, nc, windowCounts)
}

// TestAPI_Get checks that GET finds a pending message by tag and by
// subject and id, reports what was scheduled, leaves out the control
// headers, and returns the payload (base64 in JSON) only when asked.
func TestAPI_Get(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	m := newMsg("get.a", "hello", "Delay", "1h", "Delay-Id", "g1", "Delay-TTL", "1h", "X-Multi", "1", "X-Multi", "2")
	before := time.Now().Truncate(time.Millisecond)
	rep := schedule(t, h.nc, m)
	emptyRep := schedule(t, h.nc, newMsg("get.a", "", "Delay", "2h"))

	var byTag, byID wire.MessageInfo
	apiCall(t, h.nc, "GET", map[string]string{"tag": rep.Tag}, &byTag)
	apiCall(t, h.nc, "GET", map[string]string{"subject": "get.a", "id": "g1"}, &byID)
	if !reflect.DeepEqual(byTag, byID) {
		t.Fatalf("by tag %+v and by id %+v differ", byTag, byID)
	}
	if byTag.Tag != rep.Tag || byTag.Subject != "get.a" || byTag.ID != "g1" || byTag.FireAt != rep.FireAtRaw ||
		byTag.Attempt != 0 || byTag.Ack != "explicit" || byTag.Size != 5 || byTag.Payload != nil {
		t.Fatalf("GET %+v, want tag %s, subject get.a, id g1, fire_at %s, attempt 0, explicit, size 5, no payload",
			byTag, rep.Tag, rep.FireAtRaw)
	}
	if enq := parseTime(t, byTag.EnqueuedAt); enq.Before(before) || enq.After(rep.FireAt) {
		t.Fatalf("enqueued_at %s, want between %s and the fire time", byTag.EnqueuedAt, before)
	}
	if exp := parseTime(t, byTag.ExpireAt); !exp.Equal(rep.FireAt.Add(time.Hour)) {
		t.Fatalf("expire_at %s, want fire_at + 1h", byTag.ExpireAt)
	}
	if want := map[string][]string{"X-Multi": {"1", "2"}}; fmt.Sprint(byTag.Headers) != fmt.Sprint(want) {
		t.Fatalf("headers %v, want %v without control headers", byTag.Headers, want)
	}

	// With "payload": true the payload is a base64 string, and an empty
	// payload is there as "", so a client can tell it from "not asked".
	for _, c := range []struct{ tag, payload string }{{rep.Tag, "hello"}, {emptyRep.Tag, ""}} {
		raw := apiRequest(t, h.nc, "GET", map[string]any{"tag": c.tag, "payload": true})
		var fields map[string]any
		if err := json.Unmarshal(raw.Data, &fields); err != nil {
			t.Fatalf("GET reply %q: %v", raw.Data, err)
		}
		if fields["payload"] != base64.StdEncoding.EncodeToString([]byte(c.payload)) {
			t.Fatalf("GET with payload: %q, want payload %q in base64", raw.Data, c.payload)
		}
		var mi wire.MessageInfo
		if err := json.Unmarshal(raw.Data, &mi); err != nil || string(mi.Payload) != c.payload {
			t.Fatalf("GET with payload: %q decodes to %q (%v), want %q", raw.Data, mi.Payload, err, c.payload)
		}
	}
}

// TestAPI_Get_AttemptAfterRedelivery checks that GET reports the attempt
// of the last delivery once a message has been redelivered.
func TestAPI_Get_AttemptAfterRedelivery(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *bridge.Config) { c.Delivery.AckWait = 300 * time.Millisecond })
	got := subscribe(t, h.nc, "get.attempt")
	rep := schedule(t, h.nc, newMsg("get.attempt", "x"))
	wantAttempt(t, next(t, got, "attempt 1").Msg, 1)
	r2 := next(t, got, "attempt 2 after the ack wait")
	wantAttempt(t, r2.Msg, 2)
	// The attempt is written after the delivery is flushed, so it may lag
	// the delivery by a moment.
	checkFor(t, wait, 10*time.Millisecond, func() error {
		var mi wire.MessageInfo
		apiCall(t, h.nc, "GET", map[string]string{"tag": rep.Tag}, &mi)
		if mi.Attempt != 2 {
			return fmt.Errorf("attempt %d, want 2", mi.Attempt)
		}
		return nil
	})
	ackSync(t, h.nc, r2.Msg, "+ACK")
	apiError(t, h.nc, "GET", map[string]string{"tag": rep.Tag}, 404, "no pending message")
}

// TestAPI_Get_Errors checks the answers to GET requests that find nothing
// (404) or make no sense (400).
func TestAPI_Get_Errors(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	rep := schedule(t, h.nc, newMsg("get.err", "x", "Delay", "1h", "Delay-Id", "known"))
	unknown := keys.Make("get.err", time.Now().UnixMilli(), 0, 1<<40).Tag()
	for _, c := range []struct {
		name string
		body any
		code int
		want string
	}{
		{"unknown tag", map[string]string{"tag": unknown}, 404, "no pending message"},
		{"unknown id", map[string]string{"subject": "get.err", "id": "nope"}, 404, "no pending message"},
		{"id of another subject", map[string]string{"subject": "get.other", "id": "known"}, 404, "no pending message"},
		{"bad JSON", `{"tag":`, 400, "request body"},
		{"not an object", `[1]`, 400, "request body"},
		{"unknown field", map[string]any{"tag": rep.Tag, "bogus": 1}, 400, "bogus"},
		{"trailing data", `{"tag":"` + rep.Tag + `"} {}`, 400, "after the JSON"},
		{"tag and subject", map[string]string{"tag": rep.Tag, "subject": "get.err", "id": "known"}, 400, "not both"},
		{"neither", `{}`, 400, `give "tag"`},
		{"empty body", "", 400, `give "tag"`},
		{"bad tag", map[string]string{"tag": "xyz"}, 400, "xyz"},
		{"subject without id", map[string]string{"subject": "get.err"}, 400, `give "tag"`},
		{"id without subject", map[string]string{"id": "known"}, 400, `give "tag"`},
		{"wildcard subject", map[string]string{"subject": "get.*", "id": "known"}, 400, "get.*"},
	} {
		t.Run(c.name, func(t *testing.T) {
			apiError(t, h.nc, "GET", c.body, c.code, c.want)
		})
	}
}

// listAll pages through LIST for subject with limit and returns every tag
// in the order given, failing tb if a page is out of shape.
func listAll(tb testing.TB, nc *nats.Conn, subject string, limit int) []string {
	tb.Helper()
	var tags []string
	after := ""
	for page := 0; ; page++ {
		if page > 1000 {
			tb.Fatalf("LIST %s: paging does not end", subject)
		}
		req := map[string]any{"subject": subject, "limit": limit}
		if after != "" {
			req["after"] = after
		}
		var r wire.ListReply
		apiCall(tb, nc, "LIST", req, &r)
		if r.Subject != subject || len(r.Messages) > limit {
			tb.Fatalf("LIST %v: subject %q with %d messages", req, r.Subject, len(r.Messages))
		}
		for _, m := range r.Messages {
			if m.Subject != subject || m.Payload != nil {
				tb.Fatalf("LIST %s: message %+v", subject, m)
			}
			tags = append(tags, m.Tag)
		}
		if r.Next == "" {
			return tags
		}
		if len(r.Messages) != limit || r.Next != r.Messages[len(r.Messages)-1].Tag {
			tb.Fatalf("LIST %v: next %s after %d of %d messages, want the last tag of a full page", req, r.Next, len(r.Messages), limit)
		}
		after = r.Next
	}
}

// TestAPI_List checks that LIST returns the pending messages of one
// subject, and only them, in fire order (ties in publish order), and that
// paging with "limit" and "after"/"next" returns each exactly once.
func TestAPI_List(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	// Absolute fire times make ties exact; the minutes are out of order so
	// fire order differs from publish order.
	base := time.Now().Add(time.Hour).Truncate(time.Second)
	minutes := []int{5, 1, 3, 1, 4, 2, 1, 5, 3, 2, 6}
	var msgs []*nats.Msg
	for i, m := range minutes {
		at := strconv.FormatInt(base.Add(time.Duration(m)*time.Minute).Unix(), 10)
		msgs = append(msgs, newMsg("list.a", strconv.Itoa(i), "Delay-At", at))
		// Neighbours that must not show up: another subject, and one below.
		msgs = append(msgs, newMsg("list.b", "b", "Delay-At", at), newMsg("list.a.x", "x", "Delay-At", at))
	}
	reps := scheduleMany(t, h.nc, msgs)
	type entry struct {
		minute, i int
		tag       string
	}
	var want []entry
	for i, m := range minutes {
		want = append(want, entry{m, i, reps[3*i].Tag})
	}
	slices.SortStableFunc(want, func(a, b entry) int { return a.minute - b.minute })
	var wantTags []string
	for _, e := range want {
		wantTags = append(wantTags, e.tag)
	}

	var r wire.ListReply
	apiCall(t, h.nc, "LIST", map[string]string{"subject": "list.a"}, &r)
	if r.Next != "" || len(r.Messages) != len(minutes) {
		t.Fatalf("LIST with the default limit: %d messages, next %q; want all %d", len(r.Messages), r.Next, len(minutes))
	}
	for i, m := range r.Messages {
		if m.Tag != wantTags[i] || m.FireAt != reps[3*want[i].i].FireAtRaw || m.Size != len(strconv.Itoa(want[i].i)) {
			t.Fatalf("LIST message %d: %+v, want tag %s (message %d)", i, m, wantTags[i], want[i].i)
		}
	}
	for _, limit := range []int{1, 3, len(minutes), len(minutes) + 1, 1000} {
		if got := listAll(t, h.nc, "list.a", limit); !slices.Equal(got, wantTags) {
			t.Fatalf("LIST with limit %d: %v, want %v", limit, got, wantTags)
		}
	}

	apiCall(t, h.nc, "LIST", map[string]string{"subject": "list.none"}, &r)
	if r.Messages == nil || len(r.Messages) != 0 || r.Next != "" {
		t.Fatalf("LIST of a subject without messages: %+v, want an empty list", r)
	}
}

// TestAPI_List_Errors checks that LIST rejects requests it cannot answer
// with a 400 that says why.
func TestAPI_List_Errors(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	other := schedule(t, h.nc, newMsg("list.other", "x", "Delay", "1h"))
	for _, c := range []struct {
		name string
		body any
		want string
	}{
		{"missing subject", `{"limit":10}`, `"subject" is required`},
		{"empty body", ``, `"subject" is required`},
		{"limit 0", `{"subject":"list.e","limit":0}`, `"limit" 0`},
		{"limit 1001", `{"subject":"list.e","limit":1001}`, `"limit" 1001`},
		{"limit -1", `{"subject":"list.e","limit":-1}`, `"limit" -1`},
		{"limit not a number", `{"subject":"list.e","limit":"5"}`, "request body"},
		{"after of another subject", map[string]string{"subject": "list.e", "after": other.Tag}, "is not a tag of subject"},
		{"bad after", map[string]string{"subject": "list.e", "after": "nothex"}, `"after"`},
		{"wildcard *", map[string]string{"subject": "list.*"}, "list.*"},
		{"wildcard >", map[string]string{"subject": "list.>"}, "list.>"},
		{"unknown field", `{"subject":"list.e","tag":"x"}`, "request body"},
	} {
		t.Run(c.name, func(t *testing.T) {
			apiError(t, h.nc, "LIST", c.body, 400, c.want)
		})
	}
}

// TestAPI_Cancel checks that CANCEL by tag and by subject and id deletes
// the message, that a second CANCEL is a 404, and that other messages are
// untouched.
func TestAPI_Cancel(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	a := schedule(t, h.nc, newMsg("cancel.a", "a", "Delay", "1h"))
	b := schedule(t, h.nc, newMsg("cancel.a", "b", "Delay", "1h", "Delay-Id", "b"))
	keep := schedule(t, h.nc, newMsg("cancel.a", "keep", "Delay", "1h", "Delay-Id", "keep"))

	byTag := map[string]string{"tag": a.Tag}
	byID := map[string]string{"subject": "cancel.a", "id": "b"}
	for _, req := range []map[string]string{byTag, byID} {
		var r cancelReply
		apiCall(t, h.nc, "CANCEL", req, &r)
		if !r.Canceled {
			t.Fatalf("CANCEL %v: %+v, want canceled", req, r)
		}
		apiError(t, h.nc, "CANCEL", req, 404, "no pending message")
		apiError(t, h.nc, "GET", req, 404, "no pending message")
	}
	// The id is free again: scheduling with it makes a new message.
	b2 := schedule(t, h.nc, newMsg("cancel.a", "b2", "Delay", "1h", "Delay-Id", "b"))
	if b2.Tag == b.Tag {
		t.Fatalf("rescheduled id b has the canceled tag %s", b.Tag)
	}
	waitPending(t, h.nc, 2)
	stored(t, h.nc, keep.Key)
	if n := info(t, h.nc).Stats.Canceled; n != 2 {
		t.Fatalf("stats canceled = %d, want 2", n)
	}
}

// TestAPI_Cancel_NeverDelivered checks that a canceled message is never
// delivered: a later message on the same subject is, which proves that
// delivery went past the canceled one's fire time.
func TestAPI_Cancel_NeverDelivered(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	got := subscribe(t, h.nc, "cancel.never")
	// The subject is paused until the CANCEL is answered, so the
	// canceled message cannot fall due and go out first however slowly
	// a loaded machine takes the requests in: before, a schedule and a
	// cancel that together took more than its 300 ms delay failed it.
	resume := pauseSubjects(t, h.nc, "cancel.never")
	canceled := schedule(t, h.nc, newMsg("cancel.never", "canceled", "Delay", "300ms"))
	marker := schedule(t, h.nc, newMsg("cancel.never", "marker", "Delay", "600ms"))
	cancelTag(t, h.nc, canceled.Tag)
	resume()
	// Deliveries per subject go out in fire order, so had the canceled
	// message been delivered it would have come first.
	r := next(t, got, "marker delivery")
	if r.Header.Get(wire.HeaderTag) != marker.Tag {
		t.Fatalf("delivered %q with tag %s, want the marker %s", r.Data, r.Header.Get(wire.HeaderTag), marker.Tag)
	}
	ackSync(t, h.nc, r.Msg, "+ACK")
	waitPending(t, h.nc, 0)
	quiet(t, got, 100*time.Millisecond, "after the marker")
}

// TestAPI_Cancel_RacingDelivery checks the cancel guarantee under races:
// with 200 messages falling due while they are canceled, each one is
// delivered or canceled, and none is delivered after its CANCEL answered
// {"canceled":true}.
//
// Deliveries and CANCEL replies arrive on one subscription: the service
// publishes both on one connection, the server keeps their order to one
// subscriber, and one callback sees them in that order. Separate
// subscriptions would each have their own goroutine and could reorder
// what they saw.
func TestAPI_Cancel_RacingDelivery(t *testing.T) {
	t.Parallel()
	const n = 200
	h := newHarness(t, nil)
	target := "crace.deliver"
	replyPrefix := "crace.reply."

	var mu struct {
		sync.Mutex
		seq       int
		delivered map[string][]int // tag -> sequence numbers of its deliveries
		canceled  map[string]int   // tag -> sequence number of canceled:true
		answered  int
		errs      []string
	}
	mu.delivered = make(map[string][]int)
	mu.canceled = make(map[string]int)
	tags := make([]string, n)
	allAnswered := make(chan struct{})
	late := make(chan received, n)

	sub, err := h.nc.Subscribe("crace.>", func(m *nats.Msg) {
		mu.Lock()
		defer mu.Unlock()
		mu.seq++
		if m.Subject == target {
			tag := m.Header.Get(wire.HeaderTag)
			mu.delivered[tag] = append(mu.delivered[tag], mu.seq)
			if mu.answered == n {
				select {
				case late <- received{Msg: m, at: time.Now()}:
				default: // one late delivery already fails the test
				}
			}
			_ = m.Respond(nil) // ACK, so some CANCELs find nothing
			return
		}
		i, err := strconv.Atoi(strings.TrimPrefix(m.Subject, replyPrefix))
		if err != nil || i < 0 || i >= n {
			mu.errs = append(mu.errs, "reply on "+m.Subject)
			return
		}
		switch code := m.Header.Get(wire.HeaderServiceErrorCode); code {
		case "":
			var r cancelReply
			if err := json.Unmarshal(m.Data, &r); err != nil || !r.Canceled {
				mu.errs = append(mu.errs, fmt.Sprintf("CANCEL %d: %q", i, m.Data))
			}
			mu.canceled[tags[i]] = mu.seq
		case "404":
		default:
			mu.errs = append(mu.errs, fmt.Sprintf("CANCEL %d: error %s %s", i, code, m.Header.Get(wire.HeaderServiceError)))
		}
		if mu.answered++; mu.answered == n {
			close(allAnswered)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		t.Fatal(err)
	}
	if err := h.nc.Flush(); err != nil {
		t.Fatal(err)
	}

	// Fire times spread over 200ms, so the CANCELs below meet messages
	// that are delivered, in flight, being published and still waiting.
	msgs := make([]*nats.Msg, n)
	for i := range msgs {
		msgs[i] = newMsg(target, strconv.Itoa(i), "Delay", strconv.Itoa(i)+"ms")
	}
	for i, r := range scheduleMany(t, h.nc, msgs) {
		tags[i] = r.Tag
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := w; i < n; i += 4 {
				body, _ := json.Marshal(map[string]string{"tag": tags[i]})
				if err := h.nc.PublishRequest(wire.DefaultAPIPrefix+".CANCEL", replyPrefix+strconv.Itoa(i), body); err != nil {
					t.Errorf("CANCEL %d: %v", i, err)
				}
			}
		})
	}
	wg.Wait()
	select {
	case <-allAnswered:
	case <-time.After(wait):
		mu.Lock()
		answered := mu.answered
		mu.Unlock()
		t.Fatalf("only %d of %d CANCELs answered within %v", answered, n, wait)
	}

	// Every message is now ACKed or canceled, so none is left to deliver.
	waitPending(t, h.nc, 0)
	quiet(t, late, 200*time.Millisecond, "delivery after every CANCEL was answered")

	mu.Lock()
	defer mu.Unlock()
	for _, e := range mu.errs {
		t.Error(e)
	}
	both := 0
	for i, tag := range tags {
		cseq, canceled := mu.canceled[tag]
		ds := mu.delivered[tag]
		switch {
		case !canceled && len(ds) == 0:
			t.Errorf("message %d (%s): neither delivered nor canceled", i, tag)
		case canceled && len(ds) > 0:
			both++
			if last := ds[len(ds)-1]; last > cseq {
				t.Errorf("message %d (%s): delivered at %d, after its CANCEL answered canceled at %d", i, tag, last, cseq)
			}
		}
		if len(ds) > 1 {
			t.Errorf("message %d (%s): delivered %d times", i, tag, len(ds))
		}
	}
	t.Logf("%d delivered, %d canceled, %d both (canceled while in flight)", len(mu.delivered), len(mu.canceled), both)
}

// TestAPI_Cancel_InFlight checks that canceling a delivered but unACKed
// message stops its redelivery: nothing comes after the ack wait.
func TestAPI_Cancel_InFlight(t *testing.T) {
	t.Parallel()
	const ackWait = 300 * time.Millisecond
	h := newHarness(t, func(c *bridge.Config) { c.Delivery.AckWait = ackWait })
	got := subscribe(t, h.nc, "cancel.inflight")
	rep := schedule(t, h.nc, newMsg("cancel.inflight", "x"))
	wantAttempt(t, next(t, got, "delivery").Msg, 1)
	cancelTag(t, h.nc, rep.Tag)
	waitPending(t, h.nc, 0)
	quiet(t, got, 3*ackWait, "redelivery after CANCEL")
	if r := info(t, h.nc); r.Counts.InFlight != 0 {
		t.Fatalf("in_flight = %d after CANCEL, want 0", r.Counts.InFlight)
	}
}

// TestAPI_BadRequest_ChangesNothing checks that an API request refused
// with a 400 changes nothing: a CANCEL that names a pending message but is
// otherwise wrong leaves it pending.
func TestAPI_BadRequest_ChangesNothing(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	rep := schedule(t, h.nc, newMsg("bad.keep", "x", "Delay", "1h", "Delay-Id", "k"))
	for _, body := range []string{
		`{"tag":"` + rep.Tag + `","subject":"bad.keep"}`,
		`{"tag":"` + rep.Tag + `","payload":true}`,
		`{"tag":"` + rep.Tag + `","bogus":1}`,
		`{"tag":"` + rep.Tag + `"} {"tag":"` + rep.Tag + `"}`,
		`{"subject":"bad.keep"}`,
		`{"subject":"bad.*","id":"k"}`,
		`{"tag":"` + rep.Tag,
	} {
		wantServiceError(t, apiRequest(t, h.nc, "CANCEL", body), 400)
	}
	for _, verb := range []string{"INFO", "GET", "LIST"} {
		wantServiceError(t, apiRequest(t, h.nc, verb, `{"bogus":true}`), 400)
	}
	if p := pending(t, h.nc); p != 1 {
		t.Fatalf("pending = %d after bad requests, want 1", p)
	}
	var mi wire.MessageInfo
	apiCall(t, h.nc, "GET", map[string]string{"subject": "bad.keep", "id": "k"}, &mi)
	if mi.Tag != rep.Tag {
		t.Fatalf("GET by id: tag %s, want %s", mi.Tag, rep.Tag)
	}
}

// TestAPI_Micro_Discovery checks that the service answers the NATS micro
// discovery subjects as natsdelay with its version and all its endpoints,
// so `nats micro ls/info/stats` show it, and that the ingest endpoint
// counts the requests it takes.
func TestAPI_Micro_Discovery(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	discover := func(verb string, out any) {
		t.Helper()
		rep, err := h.nc.Request("$SRV."+verb+"."+wire.ServiceName, nil, wait)
		if err != nil {
			t.Fatalf("$SRV.%s: %v", verb, err)
		}
		if err := json.Unmarshal(rep.Data, out); err != nil {
			t.Fatalf("$SRV.%s reply %q: %v", verb, rep.Data, err)
		}
	}

	var ping micro.Ping
	discover("PING", &ping)
	if ping.Name != wire.ServiceName || ping.Version != bridge.Version || ping.ID == "" {
		t.Fatalf("PING %+v, want name %s version %s", ping, wire.ServiceName, bridge.Version)
	}

	var inf micro.Info
	discover("INFO", &inf)
	if inf.Name != wire.ServiceName || inf.Version != bridge.Version || inf.ID != ping.ID {
		t.Fatalf("INFO %+v, want name %s version %s id %s", inf.ServiceIdentity, wire.ServiceName, bridge.Version, ping.ID)
	}
	wantSubjects := map[string]string{
		"ingest":           wire.DefaultIngestPrefix + ".>",
		"js_schedule":      wire.DefaultJSSchedulePrefix + ".>",
		"info":             wire.DefaultAPIPrefix + ".INFO",
		"get":              wire.DefaultAPIPrefix + ".GET",
		"list":             wire.DefaultAPIPrefix + ".LIST",
		"cancel":           wire.DefaultAPIPrefix + ".CANCEL",
		"subjects":         wire.DefaultAPIPrefix + ".SUBJECTS",
		"schedules":        wire.DefaultAPIPrefix + ".SCHEDULES",
		"reschedule":       wire.DefaultAPIPrefix + ".RESCHEDULE",
		"fire":             wire.DefaultAPIPrefix + ".FIRE",
		"dead_list":        wire.DefaultAPIPrefix + ".DEAD.LIST",
		"bulk_cancel":      wire.DefaultAPIPrefix + ".BULK.CANCEL",
		"bulk_reschedule":  wire.DefaultAPIPrefix + ".BULK.RESCHEDULE",
		"bulk_fire":        wire.DefaultAPIPrefix + ".BULK.FIRE",
		"bulk_replay":      wire.DefaultAPIPrefix + ".BULK.REPLAY",
		"bulk_delete":      wire.DefaultAPIPrefix + ".BULK.DELETE",
		"dead_get":         wire.DefaultAPIPrefix + ".DEAD.GET",
		"limits_set":       wire.DefaultAPIPrefix + ".LIMITS.SET",
		"limits_get":       wire.DefaultAPIPrefix + ".LIMITS.GET",
		"limits_list":      wire.DefaultAPIPrefix + ".LIMITS.LIST",
		"limits_delete":    wire.DefaultAPIPrefix + ".LIMITS.DELETE",
		"pause":            wire.DefaultAPIPrefix + ".PAUSE",
		"resume":           wire.DefaultAPIPrefix + ".RESUME",
		"schedule_pause":   wire.DefaultAPIPrefix + ".SCHEDULE.PAUSE",
		"schedule_resume":  wire.DefaultAPIPrefix + ".SCHEDULE.RESUME",
		"schedule_trigger": wire.DefaultAPIPrefix + ".SCHEDULE.TRIGGER",
		"schedule_skip":    wire.DefaultAPIPrefix + ".SCHEDULE.SKIP",
		"schedule_edit":    wire.DefaultAPIPrefix + ".SCHEDULE.EDIT",
		"backup":           wire.DefaultAPIPrefix + ".BACKUP",
	}
	gotSubjects := make(map[string]string)
	for _, ep := range inf.Endpoints {
		gotSubjects[ep.Name] = ep.Subject
	}
	if fmt.Sprint(gotSubjects) != fmt.Sprint(wantSubjects) {
		t.Fatalf("INFO endpoints %v, want %v", gotSubjects, wantSubjects)
	}

	ingestRequests := func() int {
		var st micro.Stats
		discover("STATS", &st)
		if st.Name != wire.ServiceName || st.Version != bridge.Version {
			t.Fatalf("STATS %+v, want name %s version %s", st.ServiceIdentity, wire.ServiceName, bridge.Version)
		}
		for _, ep := range st.Endpoints {
			if ep.Name == "ingest" {
				if ep.Subject != wantSubjects["ingest"] {
					t.Fatalf("STATS ingest subject %q", ep.Subject)
				}
				return ep.NumRequests
			}
		}
		t.Fatalf("STATS %+v: no ingest endpoint", st)
		return 0
	}
	before := ingestRequests()
	for i := range 3 {
		schedule(t, h.nc, newMsg("srv.stats", strconv.Itoa(i), "Delay", "1h"))
	}
	checkFor(t, wait, 10*time.Millisecond, func() error {
		if got := ingestRequests(); got != before+3 {
			return fmt.Errorf("ingest num_requests = %d, want %d", got, before+3)
		}
		return nil
	})
}

// subjectsAll pages through SUBJECTS for filter with limit and returns
// every entry, checking that each page but the last is full and that next
// is its last subject.
func subjectsAll(tb testing.TB, nc *nats.Conn, filter string, limit int) []wire.SubjectInfo {
	tb.Helper()
	var all []wire.SubjectInfo
	req := map[string]any{"filter": filter, "limit": limit}
	for range 100 {
		var r wire.SubjectsReply
		apiCall(tb, nc, "SUBJECTS", req, &r)
		if r.Filter != filter || r.Subjects == nil {
			tb.Fatalf("SUBJECTS %v: filter %q, subjects %v", req, r.Filter, r.Subjects)
		}
		all = append(all, r.Subjects...)
		if r.Next == "" {
			return all
		}
		if len(r.Subjects) != limit || r.Next != r.Subjects[len(r.Subjects)-1].Subject {
			tb.Fatalf("SUBJECTS %v: next %q after %d subjects, want the last subject of a full page", req, r.Next, len(r.Subjects))
		}
		req["after"] = r.Next
	}
	tb.Fatalf("SUBJECTS %s: paging does not end", filter)
	return nil
}

// TestAPI_Subjects checks that SUBJECTS lists the subjects with pending
// messages that match a NATS filter, in subject order, each once across
// pages, with its pending and due-now counts.
func TestAPI_Subjects(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	// Nobody subscribes, so what is due stays pending.
	var msgs []*nats.Msg
	for subj, n := range map[string][2]int{ // due, later
		"subj.a":     {2, 1},
		"subj.b":     {0, 3},
		"subj.b.x":   {1, 0},
		"subj.c":     {1, 1},
		"other.a":    {0, 1},
		"subj.gone":  {0, 1},
		"subj.d.e.f": {0, 2},
	} {
		for range n[0] {
			msgs = append(msgs, newMsg(subj, "", "Delay", "1ms"))
		}
		for range n[1] {
			msgs = append(msgs, newMsg(subj, "", "Delay", "1h"))
		}
	}
	reps := scheduleMany(t, h.nc, msgs)
	for _, r := range reps {
		if r.Subject == "subj.gone" {
			cancelTag(t, h.nc, r.Tag)
		}
	}
	all := map[string]wire.SubjectInfo{
		"other.a":    {Subject: "other.a", Pending: 1},
		"subj.a":     {Subject: "subj.a", Pending: 3, DueNow: 2},
		"subj.b":     {Subject: "subj.b", Pending: 3},
		"subj.b.x":   {Subject: "subj.b.x", Pending: 1, DueNow: 1},
		"subj.c":     {Subject: "subj.c", Pending: 2, DueNow: 1},
		"subj.d.e.f": {Subject: "subj.d.e.f", Pending: 2},
	}
	want := func(subjects ...string) []wire.SubjectInfo {
		var out []wire.SubjectInfo
		for _, s := range subjects {
			out = append(out, all[s])
		}
		return out
	}
	for _, c := range []struct {
		filter string
		want   []wire.SubjectInfo
	}{
		{">", want("other.a", "subj.a", "subj.b", "subj.b.x", "subj.c", "subj.d.e.f")},
		{"subj.*", want("subj.a", "subj.b", "subj.c")},
		{"subj.>", want("subj.a", "subj.b", "subj.b.x", "subj.c", "subj.d.e.f")},
		{"*.a", want("other.a", "subj.a")},
		{"subj.*.*.f", want("subj.d.e.f")},
		{"subj.b", want("subj.b")},
		{"subj", nil},
		{"nothing.>", nil},
	} {
		for _, limit := range []int{1, 2, 1000} {
			got := subjectsAll(t, h.nc, c.filter, limit)
			for i := range got {
				// NB: a due subject's probe is in flight until its bounce
				// comes back: in_flight moves under the test.
				got[i].InFlight = 0
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("SUBJECTS %s with limit %d: %+v, want %+v", c.filter, limit, got, c.want)
			}
		}
	}

	// The filter is echoed as written, not as subj.\u003e.
	if rep := apiRequest(t, h.nc, "SUBJECTS", map[string]string{"filter": "subj.>"}); !strings.HasPrefix(string(rep.Data), `{"filter":"subj.>",`) {
		t.Errorf("SUBJECTS subj.> replied %s, want the filter as written", rep.Data)
	}

	// No filter is every subject, and "after" need not be pending.
	var r wire.SubjectsReply
	apiCall(t, h.nc, "SUBJECTS", map[string]string{"after": "subj.b.a"}, &r)
	if r.Filter != ">" || !reflect.DeepEqual(r.Subjects, want("subj.b.x", "subj.c", "subj.d.e.f")) || r.Next != "" {
		t.Errorf("SUBJECTS after subj.b.a: %+v", r)
	}
}

// TestAPI_Subjects_Errors checks that SUBJECTS rejects a filter or paging
// it cannot use with a 400 that says why.
func TestAPI_Subjects_Errors(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	for _, c := range []struct {
		name string
		body any
		want string
	}{
		{"empty token", map[string]string{"filter": "a..b"}, "empty token"},
		{"> not last", map[string]string{"filter": "a.>.b"}, "> must be the last token"},
		{"partial wildcard", map[string]string{"filter": "a.b*"}, "whole token"},
		{"white space", map[string]string{"filter": "a b"}, "white space"},
		{"limit 0", `{"limit":0}`, `"limit" 0`},
		{"limit 1001", `{"limit":1001}`, `"limit" 1001`},
		{"unknown field", `{"subject":"a"}`, "request body"},
	} {
		t.Run(c.name, func(t *testing.T) {
			apiError(t, h.nc, "SUBJECTS", c.body, 400, c.want)
		})
	}
}
