package integration_test

import (
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/natsdelay/natsdelay/bridge"
	"github.com/natsdelay/natsdelay/bridge/wire"
)

// ackAll answers every delivery on subjects with answer(n), n counting the
// deliveries from 1, and records the tags it ACKed. It stops when tb ends.
type ackAll struct {
	mu    sync.Mutex
	n     int
	acked map[string]bool
}

func startAckAll(tb testing.TB, nc *nats.Conn, subjects string, answer func(n int) string) *ackAll {
	tb.Helper()
	a := &ackAll{acked: map[string]bool{}}
	sub, err := nc.Subscribe(subjects, func(m *nats.Msg) {
		a.mu.Lock()
		a.n++
		p := answer(a.n)
		if p == "+ACK" {
			a.acked[m.Header.Get(wire.HeaderTag)] = true
		}
		a.mu.Unlock()
		if p != "" {
			_ = m.Respond([]byte(p))
		}
	})
	if err != nil {
		tb.Fatalf("subscribe %s: %v", subjects, err)
	}
	tb.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		tb.Fatal(err)
	}
	return a
}

func (a *ackAll) counts() (deliveries, acked int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.n, len(a.acked)
}

// scheduleSpread schedules n messages due now, spread over subjects
// prefix.0 .. prefix.(k-1).
func scheduleSpread(tb testing.TB, nc *nats.Conn, prefix string, k, n int) {
	tb.Helper()
	msgs := make([]*nats.Msg, n)
	for i := range msgs {
		msgs[i] = newMsg(prefix+"."+strconv.Itoa(i%k), strconv.Itoa(i))
	}
	scheduleMany(tb, nc, msgs)
}

// windowAlone sets the in-flight window to n and lets one subject take
// all of it, for tests of the window rather than of the subjects' shares
// (see TestWindow_SilentSubject_DoesNotStarveOthers).
func windowAlone(c *bridge.Config, n int) {
	c.Delivery.MaxInFlight, c.Delivery.SubjectMaxInFlight = n, n
}

// TestWindow_Full_NakThenAck checks that a full in-flight window
// keeps redeliveries and ACKs flowing: with MaxInFlight 100 and 150 due
// messages over three subjects, a consumer that NAKs the first 300
// deliveries (so the window is full of NAKed flights for a while) and then
// ACKs gets every message, and every one is settled. Redeliveries need no
// new room: the flights they redeliver hold their slots.
func TestWindow_Full_NakThenAck(t *testing.T) {
	t.Parallel()
	const window, n, naks = 100, 150, 300
	h := newHarness(t, func(c *bridge.Config) { windowAlone(c, window); c.Delivery.AckWait = time.Minute })
	a := startAckAll(t, h.nc, "win.nak.*", func(i int) string {
		if i <= naks {
			return "-NAK"
		}
		return "+ACK"
	})
	scheduleSpread(t, h.nc, "win.nak", 3, n)
	checkFor(t, wait, 10*time.Millisecond, func() error {
		if d, acked := a.counts(); acked < n {
			return fmt.Errorf("%d deliveries, %d of %d messages ACKed (stats %+v)", d, acked, n, h.svc.Stats())
		}
		return nil
	})
	waitPending(t, h.nc, 0)
}

// TestWindow_Full_SilentConsumerRecovers checks the same for a
// consumer that stops answering (as if it had crashed) until the window is
// full: the ack waits run out, the messages are redelivered while the
// window is still full, and once it answers again everything is ACKed.
func TestWindow_Full_SilentConsumerRecovers(t *testing.T) {
	t.Parallel()
	const window, n = 100, 150
	h := newHarness(t, func(c *bridge.Config) { windowAlone(c, window); c.Delivery.AckWait = 200 * time.Millisecond })
	a := startAckAll(t, h.nc, "win.silent.*", func(i int) string {
		if i <= window {
			return "" // no answer
		}
		return "+ACK"
	})
	scheduleSpread(t, h.nc, "win.silent", 3, n)
	checkFor(t, wait, 10*time.Millisecond, func() error {
		if d, acked := a.counts(); acked < n {
			return fmt.Errorf("%d deliveries, %d of %d messages ACKed (stats %+v)", d, acked, n, h.svc.Stats())
		}
		return nil
	})
	waitPending(t, h.nc, 0)
}

// TestWindow_Full_LongNaksDoNotStarveOthers checks that one consumer that
// NAKs with long delays cannot freeze every other subject by filling the
// in-flight window with flights that wait: with MaxInFlight 10, twenty
// messages on one subject NAKed with "-NAK 1h" leave that window full of
// waiting flights, yet the messages of another subject are all delivered,
// the long-waiting flights having been evicted to make room; and the NAKed
// messages are not delivered again before their hour is up (not early,
// evicted or not), while they stay pending.
func TestWindow_Full_LongNaksDoNotStarveOthers(t *testing.T) {
	t.Parallel()
	const window, stuck, others = 10, 20, 15
	h := newHarness(t, func(c *bridge.Config) { windowAlone(c, window); c.Delivery.AckWait = time.Minute })
	naked := startAckAll(t, h.nc, "win.longnak.*", func(int) string { return "-NAK 1h" })
	scheduleSpread(t, h.nc, "win.longnak", 1, stuck)
	checkFor(t, wait, 10*time.Millisecond, func() error {
		if d, _ := naked.counts(); d < window {
			return fmt.Errorf("%d deliveries NAKed, want the window's %d", d, window)
		}
		return nil
	})
	ok := startAckAll(t, h.nc, "win.other.*", func(int) string { return "+ACK" })
	scheduleSpread(t, h.nc, "win.other", 1, others)
	checkFor(t, wait, 10*time.Millisecond, func() error {
		if _, acked := ok.counts(); acked < others {
			return fmt.Errorf("%d of %d messages of the other subject ACKed (stats %+v)", acked, others, h.svc.Stats())
		}
		return nil
	})
	if st := h.svc.Stats(); st.Evicted == 0 {
		t.Fatalf("stats %+v: nothing evicted, yet the other subject got through", st)
	}
	// Every message of the NAKing subject was delivered once at most: none
	// came back before its hour.
	if d, _ := naked.counts(); d > stuck {
		t.Fatalf("%d deliveries of %d messages NAKed for an hour: some came back early", d, stuck)
	}
	if p := pendingFor(t, h.nc, "win.longnak.0"); p != stuck {
		t.Fatalf("pending on the NAKing subject = %d, want %d", p, stuck)
	}
}

// TestNoResponders_LaterMessageDoesNotHoldBack checks that a due
// message whose delivery reached nobody is probed again with the
// no-responders back-off (50 ms doubling to 5 s), also when a later message
// of its subject is pending: it must not wait until that one is due (an
// hour here).
func TestNoResponders_LaterMessageDoesNotHoldBack(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	later := schedule(t, h.nc, newMsg("bounce.later", "later", "Delay", "1h"))
	now := schedule(t, h.nc, newMsg("bounce.later", "now"))
	checkFor(t, wait, 10*time.Millisecond, func() error {
		if n := h.svc.Stats().NoResponders; n == 0 {
			return fmt.Errorf("no delivery has bounced yet")
		}
		return nil
	})
	got := subscribe(t, h.nc, "bounce.later")
	// next gives up after 10 s: more than the back-off's 5 s cap, far less
	// than the hour until the later message is due.
	r := next(t, got, "the due message once a subscriber appears")
	if string(r.Data) != "now" || r.Header.Get(wire.HeaderTag) != now.Tag {
		t.Fatalf("delivered %q with headers %v, want the due message %s", r.Data, r.Header, now.Tag)
	}
	wantAttempt(t, r.Msg, 1)
	ackSync(t, h.nc, r.Msg, "+ACK")
	waitGone(t, h.nc, now.Key)
	stored(t, h.nc, later.Key)
}

// expectNext fails tb unless the next delivery on got is the message with
// tag, and returns it. Deliveries of one subject arrive in the order they
// were published, so a redelivery that went out before it is seen here.
func expectNext(tb testing.TB, got <-chan received, tag, what string) received {
	tb.Helper()
	r := next(tb, got, what)
	if r.Header.Get(wire.HeaderTag) != tag {
		tb.Fatalf("%s: got %q attempt %s (tag %s), want tag %s", what, r.Data, r.Header.Get(wire.HeaderAttempt), r.Header.Get(wire.HeaderTag), tag)
	}
	return r
}

// TestAck_NakHugeDelay_NotRedeliveredAtOnce checks that a -NAK whose
// delay reaches past the latest time the service can represent is taken as
// "not before then", never as "now": the message is not redelivered, and
// an ACK still settles it. The check is by order: a second message is
// scheduled after the NAK is applied, and a redelivery would have been
// published before it.
func TestAck_NakHugeDelay_NotRedeliveredAtOnce(t *testing.T) {
	t.Parallel()
	for _, payload := range []string{`-NAK {"delay": 9223372036854775807}`, "-NAK 2562047h", "-NAK 2562047h47m16.854775807s", "-NAK 2100000h"} {
		t.Run(payload, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, func(c *bridge.Config) { c.Delivery.AckWait = time.Minute })
			got := subscribe(t, h.nc, "nak.huge")
			first := schedule(t, h.nc, newMsg("nak.huge", "first"))
			r1 := expectNext(t, got, first.Tag, "first delivery")
			ackSync(t, h.nc, r1.Msg, payload)
			second := schedule(t, h.nc, newMsg("nak.huge", "second"))
			r2 := expectNext(t, got, second.Tag, "the message scheduled after the NAK")
			ackSync(t, h.nc, r2.Msg, "+ACK")
			stored(t, h.nc, first.Key)
			ackSync(t, h.nc, r1.Msg, "+ACK")
			waitPending(t, h.nc, 0)
		})
	}
	// A delay that is not even a duration is refused, saying what is the
	// largest one.
	h := newHarness(t, func(c *bridge.Config) { c.Delivery.AckWait = time.Minute })
	got := subscribe(t, h.nc, "nak.toolong")
	schedule(t, h.nc, newMsg("nak.toolong", "x"))
	r := next(t, got, "delivery")
	for _, p := range []string{"-NAK 2562048h", `-NAK {"delay": 9223372036854775808}`} {
		rep, err := h.nc.Request(r.Reply, []byte(p), wait)
		if err != nil {
			t.Fatal(err)
		}
		wantError(t, p, rep, 400, "at most")
	}
	ackSync(t, h.nc, r.Msg, "+ACK")
}

// TestAck_HugeDurations_NoImmediateRedelivery checks the other sums of
// a time and a configured duration: an ack wait, a +WPI and a backoff that
// reach past the latest representable time mean "not before then", so an
// unanswered delivery is not redelivered at once.
func TestAck_HugeDurations_NoImmediateRedelivery(t *testing.T) {
	t.Parallel()
	const huge = time.Duration(1<<63 - 1)
	for _, tc := range []struct {
		name   string
		mod    func(*bridge.Config)
		answer string
		delay  string // of the second message: after the first one's ack wait
	}{
		{name: "ack wait", mod: func(c *bridge.Config) { c.Delivery.AckWait = huge }},
		{name: "progress", mod: func(c *bridge.Config) { c.Delivery.AckWait = huge }, answer: "+WPI"},
		{name: "backoff", mod: func(c *bridge.Config) {
			c.Delivery.AckWait = 50 * time.Millisecond
			c.Delivery.Backoff = []time.Duration{huge}
		}, delay: "300ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, tc.mod)
			got := subscribe(t, h.nc, "huge.wait")
			first := schedule(t, h.nc, newMsg("huge.wait", "first"))
			r1 := expectNext(t, got, first.Tag, "first delivery")
			if tc.answer != "" {
				ackSync(t, h.nc, r1.Msg, tc.answer)
			}
			m := newMsg("huge.wait", "second")
			if tc.delay != "" {
				m.Header.Set("Delay", tc.delay)
			}
			second := schedule(t, h.nc, m)
			r2 := expectNext(t, got, second.Tag, "the message scheduled after the first delivery")
			ackSync(t, h.nc, r2.Msg, "+ACK")
			ackSync(t, h.nc, r1.Msg, "+ACK")
			waitPending(t, h.nc, 0)
		})
	}
}

// TestAck_ConsumerStatus503_IsAnAnswer checks that a consumer's answer
// carrying a Status: 503 header and no body, once the delivery is known to
// have reached a subscriber, is not taken for the server's no-responders
// notice: it is not counted as one, the message is not delivered again
// beyond Delay-Max-Deliver, and, sent as a request, it gets a 400.
func TestAck_ConsumerStatus503_IsAnAnswer(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *bridge.Config) { c.Delivery.AckWait = time.Minute })
	got := subscribe(t, h.nc, "status.503")
	rep := schedule(t, h.nc, newMsg("status.503", "x", "Delay-Max-Deliver", "1"))
	r := expectNext(t, got, rep.Tag, "delivery")
	wantAttempt(t, r.Msg, 1)
	// The delivery's pass has flushed once its attempt counts.
	checkFor(t, wait, 5*time.Millisecond, func() error {
		if n := stored(t, h.nc, rep.Key).Attempt; n != 1 {
			return fmt.Errorf("attempt %d is not counted yet", n)
		}
		return nil
	})
	fake := nats.NewMsg(r.Reply)
	fake.Header.Set("Status", "503")
	if err := h.nc.PublishMsg(fake); err != nil {
		t.Fatal(err)
	}
	// Answers on one connection are handled in order: once the +WPI is
	// confirmed, the 503 before it was handled.
	ackSync(t, h.nc, r.Msg, "+WPI")
	if st := h.svc.Stats(); st.NoResponders != 0 || st.InFlight != 1 {
		t.Fatalf("after a consumer's Status: 503: stats %+v, want no no-responders and the delivery in flight", st)
	}
	fake = nats.NewMsg(r.Reply)
	fake.Header.Set("Status", "503")
	ans, err := h.nc.RequestMsg(fake, wait)
	if err != nil {
		t.Fatalf("Status: 503 sent as a request: %v", err)
	}
	wantError(t, "Status: 503 sent as a request", ans, 400, "503")
	ackSync(t, h.nc, r.Msg, "+ACK")
	waitPending(t, h.nc, 0)
	select {
	case r2 := <-got:
		t.Fatalf("delivered again: %q with headers %v", r2.Data, r2.Header)
	default:
	}
	// NB: a delivery counts once the flush after it has come back, which
	// its ACK may beat.
	checkFor(t, wait, 10*time.Millisecond, func() error {
		if st := h.svc.Stats(); st.NoResponders != 0 || st.Delivered != 1 || st.Redelivered != 0 {
			return fmt.Errorf("stats %+v, want one delivery and no no-responders", st)
		}
		return nil
	})
}

// TestStats_Delivered_CountsOnlyReached checks that the delivered and
// redelivered counters, in the metrics and in INFO alike, count only
// deliveries that reached a subscriber: deliveries that bounced (no
// responders) are counted as no-responders only.
func TestStats_Delivered_CountsOnlyReached(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	// NB: the ack wait is the time the counters are read in after the
	// first delivery, before a redelivery would change them: long enough
	// for a loaded host, short enough for the bounces later on.
	h := newHarness(t, func(c *bridge.Config) { c.Delivery.AckWait = 3 * time.Second }, bridge.WithRegisterer(reg))
	metric := func(name string) uint64 {
		n, err := testutil.GatherAndCount(reg, name)
		if err != nil || n != 1 {
			t.Fatalf("metric %s: %d series, %v", name, n, err)
		}
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fams {
			if f.GetName() == name {
				return uint64(f.GetMetric()[0].GetCounter().GetValue())
			}
		}
		t.Fatalf("metric %s missing", name)
		return 0
	}
	// want checks that the counters agree everywhere and are as given.
	want := func(delivered, redelivered uint64) error {
		st := h.svc.Stats()
		inf := info(t, h.nc).Stats
		m, mr := metric("natsdelay_messages_delivered_total"), metric("natsdelay_messages_redelivered_total")
		if st.Delivered != delivered || inf.Delivered != delivered || m != delivered ||
			st.Redelivered != redelivered || inf.Redelivered != redelivered || mr != redelivered {
			return fmt.Errorf("delivered %d/%d/%d and redelivered %d/%d/%d (stats, INFO, metric), want %d and %d",
				st.Delivered, inf.Delivered, m, st.Redelivered, inf.Redelivered, mr, delivered, redelivered)
		}
		return nil
	}

	rep := schedule(t, h.nc, newMsg("count.bounce", "x"))
	checkFor(t, wait, 10*time.Millisecond, func() error {
		if n := h.svc.Stats().NoResponders; n < 2 {
			return fmt.Errorf("%d deliveries bounced, want 2", n)
		}
		return nil
	})
	if err := want(0, 0); err != nil {
		t.Fatalf("after deliveries bounced: %v", err)
	}

	sub, err := h.nc.SubscribeSync("count.bounce")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	first, err := sub.NextMsg(wait)
	if err != nil {
		t.Fatal(err)
	}
	wantAttempt(t, first, 1)
	checkFor(t, wait, 10*time.Millisecond, func() error { return want(1, 0) })
	// The consumer goes away without answering: the redeliveries after the
	// ack wait bounce, and are not counted as redeliveries.
	if err := sub.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	before := h.svc.Stats().NoResponders
	checkFor(t, wait, 10*time.Millisecond, func() error {
		if n := h.svc.Stats().NoResponders; n < before+2 {
			return fmt.Errorf("%d redeliveries bounced, want 2", n-before)
		}
		return nil
	})
	if err := want(1, 0); err != nil {
		t.Fatalf("after redeliveries bounced: %v", err)
	}
	got := subscribe(t, h.nc, "count.bounce")
	r := expectNext(t, got, rep.Tag, "redelivery once a subscriber is back")
	wantAttempt(t, r.Msg, 2)
	ackSync(t, h.nc, r.Msg, "+ACK")
	checkFor(t, wait, 10*time.Millisecond, func() error { return want(1, 1) })
}
