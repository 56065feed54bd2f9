package bridge

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"net/textproto"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/test"
	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/keys"
)

// TestAppendTime_AsTimeFormat checks that the service's own time
// formatting writes what time.Format writes with wire.TimeLayout, so
// deliveries, replies and INFO keep their documented time form.
func TestAppendTime_AsTimeFormat(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	ns := []int64{0, 1, 999_999, 1_000_000, int64(time.Second) - 1, 1_798_135_200_123_456_789,
		time.Date(2262, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano() - 1, time.Date(2024, 2, 29, 23, 59, 59, 999_999_999, time.UTC).UnixNano()}
	for range 10_000 {
		ns = append(ns, rng.Int64N(math.MaxInt64))
	}
	for i, v := range ns {
		want := time.Unix(0, v).UTC().Format(wire.TimeLayout)
		if got := formatTime(v); got != want {
			t.Fatalf("formatTime(%d) = %q, want %q", v, got, want)
		}
		// Again from the second kept by the call before, and a time of
		// the same second and of the one before the last.
		if got := formatTime(v); got != want {
			t.Fatalf("formatTime(%d) from its kept second = %q, want %q", v, got, want)
		}
		same := v - v%int64(time.Second) + rng.Int64N(int64(time.Second))
		if got, want := formatTime(same), time.Unix(0, same).UTC().Format(wire.TimeLayout); got != want {
			t.Fatalf("formatTime(%d) in a kept second = %q, want %q", same, got, want)
		}
		if i > 0 {
			if got, want := formatTime(ns[i-1]), time.Unix(0, ns[i-1]).UTC().Format(wire.TimeLayout); got != want {
				t.Fatalf("formatTime(%d) after another second = %q, want %q", ns[i-1], got, want)
			}
		}
		if len(want) != timeLen {
			t.Fatalf("%q is %d bytes, not timeLen %d", want, len(want), timeLen)
		}
	}
}

// deliveryCases are stored messages whose deliveries differ in every
// header the service adds or replaces.
func deliveryCases() map[string]*delaystore.StoredMessage {
	now := time.Date(2026, 12, 3, 10, 0, 0, 123_456_789, time.UTC).UnixNano()
	base := func() *delaystore.StoredMessage {
		return &delaystore.StoredMessage{Subject: "orders.eu.1", Payload: make([]byte, 100), EnqueuedAtNs: now, FireAtNs: now + 5e9}
	}
	cases := map[string]*delaystore.StoredMessage{"plain": base()}
	m := base()
	m.Headers = []*delaystore.Header{{Name: "X-A", Values: []string{"1", "  padded  ", ""}}, {Name: "x-a", Values: []string{"2"}}}
	cases["headers, values trimmed"] = m
	m = base()
	m.ClientId = "order 42"
	m.Headers = []*delaystore.Header{{Name: "delay-tag", Values: []string{"stored by an older version"}}, {Name: "DELAY-ID", Values: []string{"x"}}}
	cases["client id, own names stored"] = m
	m = base()
	m.ClientId = "sched"
	m.Recurrence = &delaystore.Recurrence{Id: "sched", EveryNs: int64(90 * time.Second), OccurrenceNs: now, Seq: 1}
	cases["recurring every"] = m
	m = proto.Clone(m).(*delaystore.StoredMessage)
	m.Recurrence.Planned, m.Recurrence.NextNs = true, now+int64(90*time.Second)
	cases["recurring planned"] = m
	m = base()
	m.Recurrence = &delaystore.Recurrence{Cron: " 0 9 * * MON-FRI ", Zone: "Europe/Berlin", OccurrenceNs: now, Seq: 3}
	cases["recurring cron, no id"] = m
	m = base()
	m.Headers = []*delaystore.Header{{Name: "Nats-Msg-Id", Values: []string{"the publisher's"}}}
	cases["own Nats-Msg-Id"] = m
	m = proto.Clone(cases["recurring every"]).(*delaystore.StoredMessage)
	m.Headers = []*delaystore.Header{{Name: "Nats-Msg-Id", Values: []string{"the publisher's"}}}
	cases["recurring, own Nats-Msg-Id"] = m
	m = base()
	m.Headers = []*delaystore.Header{{Name: "nats-msg-id", Values: []string{"not read by the server"}}}
	cases["Nats-Msg-Id in another case"] = m
	return cases
}

// TestDeliveryHeaderLen_AsBuilt checks that the size ingest computes for a
// delivery and its dead letter is the size of the header the publisher
// builds, so that ingest refuses exactly the messages that could never be
// published (bad input gets a clear error, nothing acknowledged is
// undeliverable for its size).
func TestDeliveryHeaderLen_AsBuilt(t *testing.T) {
	for name, m := range deliveryCases() {
		for _, attempt := range []uint32{0, 1, 9, 10, 12345, math.MaxUint32} {
			built := headerLen(deliveryHeader(keys.Key{}, m, attempt, 0))
			if got := deliveryHeaderLen(m, attempt, false); got != built {
				t.Errorf("%s, attempt %d: deliveryHeaderLen = %d, built header is %d", name, attempt, got, built)
			}
			dl := deadLetterMsg("dead", keys.Key{}, m, attempt, "reason of twenty-two b")
			if got := deliveryHeaderLen(m, attempt, false) + deadLetterExtraLen(m.Subject, len("reason of twenty-two b")); got != headerLen(dl.Header) {
				t.Errorf("%s, attempt %d: dead letter %d, built header is %d", name, attempt, got, headerLen(dl.Header))
			}
		}
		if m.Recurrence != nil {
			c := proto.Clone(m).(*delaystore.StoredMessage)
			c.Recurrence.Planned, c.Recurrence.NextNs = true, 1
			if got, built := deliveryHeaderLen(m, 1, true), headerLen(deliveryHeader(keys.Key{}, c, 1, 0)); got != built {
				t.Errorf("%s with Delay-Next: deliveryHeaderLen = %d, built header is %d", name, got, built)
			}
		}
	}
}

// TestFillDeliveryHeader_LenAsHeaderLen checks that the size
// fillDeliveryHeader counts as it builds a delivery's header is the size
// headerLen measures of the header built, which the publisher checks
// against the server's max_control_line; a name stored twice included.
func TestFillDeliveryHeader_LenAsHeaderLen(t *testing.T) {
	cases := deliveryCases()
	m := proto.Clone(cases["headers, values trimmed"]).(*delaystore.StoredMessage)
	m.Headers = append(m.Headers, &delaystore.Header{Name: "X-A", Values: []string{"stored twice"}})
	cases["a name stored twice"] = m
	for name, m := range cases {
		for _, attempt := range []uint32{1, 10, math.MaxUint32} {
			h := nats.Header{}
			got := fillDeliveryHeader(h, new(ownValues), keys.Key{}.Tag(), m, attempt)
			if want := headerLen(h); got != want {
				t.Errorf("%s, attempt %d: fillDeliveryHeader counted %d bytes, headerLen is %d", name, attempt, got, want)
			}
		}
	}
}

// TestDeliver_ReusedHeaderHoldsOnlyItsMessage checks that the header map
// Deliver reuses carries nothing from the delivery before it: each
// delivery arrives with exactly the headers deliveryMsg gives it.
func TestDeliver_ReusedHeaderHoldsOnlyItsMessage(t *testing.T) {
	opts := natsserver.DefaultTestOptions
	opts.Port = -1
	srv := natsserver.RunServer(&opts)
	defer srv.Shutdown()
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	sub, err := nc.SubscribeSync("orders.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	p := newPublisher(nc, wire.DefaultAckPrefix, DefaultMaxControlLine)
	cases := deliveryCases()
	// The richest first, then the plainest: a leftover would show.
	order := []string{"client id, own names stored", "recurring planned", "headers, values trimmed", "plain", "recurring cron, no id"}
	for i, name := range order {
		k := keys.New(uint64(i), 1, uint64(i))
		if err := p.Deliver(k, cases[name], uint32(i+1)); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got, err := sub.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		want := deliveryMsg(wire.DefaultAckPrefix, k, cases[name], uint32(i+1))
		if got.Reply != want.Reply {
			t.Errorf("%s: reply %q, want %q", name, got.Reply, want.Reply)
		}
		if len(got.Header) != len(want.Header) {
			t.Errorf("%s: %d headers %v, want %d %v", name, len(got.Header), got.Header, len(want.Header), want.Header)
		}
		for hk, hv := range want.Header {
			var trimmed []string
			for _, v := range hv {
				trimmed = append(trimmed, trimHeaderValue(v))
			}
			if g := got.Header[hk]; !equalStrings(g, trimmed) {
				t.Errorf("%s: header %s = %q, want %q", name, hk, g, trimmed)
			}
		}
	}
}

// trimHeaderValue is what a header value reads as after the wire: nats.go
// trims the ends when it parses a header.
func trimHeaderValue(v string) string { return textproto.TrimString(v) }

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestScheduleReply_AsJSONMarshal checks that the reply to a schedule is
// byte for byte what encoding/json writes for wire.ScheduleReply, for
// subjects that need escaping and subjects that do not, so publishers'
// parsers see the documented reply.
func TestScheduleReply_AsJSONMarshal(t *testing.T) {
	now := time.Date(2026, 12, 3, 10, 0, 0, 987_654_321, time.UTC).UnixNano()
	for _, subj := range []string{"orders.eu.1", "a", "a-b_c.$x.~", `q"uote`, `back\slash`, "a<b>c&d", "ünï.cödé", "tab\tx", "del\x7f", "line\u2028sep"} {
		m := &delaystore.StoredMessage{Subject: subj, FireAtNs: now}
		k := keys.New(0x0123456789abcdef, 42, 7)
		want, err := json.Marshal(wire.ScheduleReply{Tag: k.Tag(), Subject: subj, FireAt: formatTime(now)})
		if err != nil {
			t.Fatal(err)
		}
		if got := scheduleReply(k, m); string(got) != string(want) {
			t.Errorf("subject %q: reply %s, want %s", subj, got, want)
		}
		// As the answerer's reused buffers are: emptied, not cleared.
		used := append(make([]byte, 0, 8), "leftover bytes of an earlier reply"...)
		if got := appendScheduleReply(used[:0], k, m); string(got) != string(want) {
			t.Errorf("subject %q: reply in a reused buffer %s, want %s", subj, got, want)
		}
	}
}

// TestDeliveryHeader_MsgID checks which Nats-Msg-Id a delivery carries, the
// id a stream de-duplicates on: the tag, or a one-off message's own id;
// never a recurring schedule's own, which would make a stream keep only
// its first occurrence.
func TestDeliveryHeader_MsgID(t *testing.T) {
	cases := deliveryCases()
	k := keys.Key{1, 2, 3}
	for name, want := range map[string]string{
		"plain":                       k.Tag(),
		"recurring every":             k.Tag(),
		"own Nats-Msg-Id":             "the publisher's",
		"recurring, own Nats-Msg-Id":  k.Tag(),
		"Nats-Msg-Id in another case": k.Tag(),
	} {
		h := deliveryHeader(k, cases[name], 1, 0)
		if got := h.Values(headerMsgID); len(got) != 1 || got[0] != want {
			t.Errorf("%s: Nats-Msg-Id %q, want only %q", name, got, want)
		}
		// A dead letter must not be dropped as a duplicate of its delivery
		// by a stream that captures both subjects.
		dl := deadLetterMsg("dead", k, cases[name], 1, "term")
		if got := dl.Header.Values(headerMsgID); len(got) != 1 || got[0] != want+".dead" {
			t.Errorf("%s: dead letter's Nats-Msg-Id %q, want only %q", name, got, want+".dead")
		}
	}
}

// TestDeliveryHeader_OccurrenceTimes checks the times and the schedule an
// occurrence's delivery carries, which share one string: Delay-Fire-At,
// Delay-Enqueued-At, Delay-Occurrence and, once planned with a next
// time, Delay-Next, each as formatTime writes it; and Delay-Schedule of
// an interval as time.Duration writes it, for more intervals than the
// kept values hold.
func TestDeliveryHeader_OccurrenceTimes(t *testing.T) {
	occ := time.Date(2031, 5, 6, 7, 8, 9, 123_456_789, time.UTC).UnixNano()
	for _, planned := range []bool{false, true} {
		for i := range maxEverySpecs + 10 {
			every := time.Duration(i+1) * 1500 * time.Millisecond
			m := &delaystore.StoredMessage{Subject: "s", FireAtNs: occ + 7e6, EnqueuedAtNs: occ - 3e9,
				Recurrence: &delaystore.Recurrence{EveryNs: int64(every), OccurrenceNs: occ, Planned: planned}}
			if planned {
				m.Recurrence.NextNs = occ + int64(every)
			}
			h := deliveryHeader(keys.Key{1}, m, 1, 0)
			want := map[string]string{
				wire.HeaderFireAt:     formatTime(m.FireAtNs),
				wire.HeaderEnqueuedAt: formatTime(m.EnqueuedAtNs),
				wire.HeaderOccurrence: formatTime(occ),
				wire.HeaderSchedule:   "@every " + every.String(),
				wire.HeaderNext:       "",
			}
			if planned {
				want[wire.HeaderNext] = formatTime(occ + int64(every))
			}
			for name, v := range want {
				got := h.Values(name)
				if (v == "" && len(got) != 0) || (v != "" && (len(got) != 1 || got[0] != v)) {
					t.Fatalf("every %v, planned %v: %s %q, want %q", every, planned, name, got, v)
				}
			}
		}
	}
}
