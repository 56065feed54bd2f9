package integration_test

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge"
	"github.com/natsdelay/natsdelay/bridge/wire"
)

// TestBurst_ExactlyOnce checks delivery under load: 5,000 messages over 10
// subjects, all due within one second, are each delivered exactly once to
// consumers that ACK, none before its fire time, and nothing is left
// pending.
func TestBurst_ExactlyOnce(t *testing.T) {
	t.Parallel()
	const (
		n        = 5000
		subjects = 10
		window   = time.Second
		// lead leaves time to publish everything before the window opens,
		// so the deliveries come as a burst rather than as they arrive.
		lead = 1500 * time.Millisecond
	)
	h := newHarness(t, nil)
	cons := connect(t, h.srv)
	base := time.Now().Add(lead).Truncate(time.Millisecond)
	fireAt := make([]time.Time, n)
	msgs := make([]*nats.Msg, n)
	for i := range msgs {
		fireAt[i] = base.Add(time.Duration(rand.IntN(int(window/time.Millisecond))) * time.Millisecond)
		at := fmt.Sprintf("%d.%03d", fireAt[i].Unix(), fireAt[i].Nanosecond()/1e6)
		msgs[i] = newMsg(fmt.Sprintf("burst.%d", i%subjects), strconv.Itoa(i), "Delay-At", at)
	}

	var (
		mu       sync.Mutex
		count    = make([]int, n) // deliveries per message
		early    []string
		attempts []string
	)
	for s := range subjects {
		sub, err := cons.Subscribe(fmt.Sprintf("burst.%d", s), func(m *nats.Msg) {
			at := time.Now()
			i, err := strconv.Atoi(string(m.Data))
			if err != nil || i < 0 || i >= n {
				t.Errorf("payload %q", m.Data)
				return
			}
			mu.Lock()
			count[i]++
			if at.Before(fireAt[i]) {
				early = append(early, fmt.Sprintf("message %d at %s, due %s", i, at.Format("15:04:05.000000"), fireAt[i].Format("15:04:05.000")))
			}
			if a := m.Header.Get(wire.HeaderAttempt); a != "1" {
				attempts = append(attempts, fmt.Sprintf("message %d attempt %s", i, a))
			}
			mu.Unlock()
			if err := m.Respond(nil); err != nil {
				t.Errorf("ack: %v", err)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := sub.SetPendingLimits(-1, -1); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	if err := cons.Flush(); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	scheduleMany(t, h.nc, msgs)
	t.Logf("scheduled %d messages in %v", n, time.Since(start))
	// Every ACK applied means every message was delivered and counted.
	checkFor(t, time.Until(base.Add(window+wait)), 20*time.Millisecond, func() error {
		if p := pending(t, h.nc); p != 0 {
			return fmt.Errorf("%d of %d messages still pending", p, n)
		}
		return nil
	})

	mu.Lock()
	defer mu.Unlock()
	var wrong []string
	for i, c := range count {
		if c != 1 {
			wrong = append(wrong, fmt.Sprintf("message %d delivered %d times", i, c))
		}
	}
	if len(wrong)+len(early)+len(attempts) > 0 {
		t.Fatalf("%d not delivered exactly once %v\n%d early %v\n%d redelivered %v",
			len(wrong), head(wrong), len(early), head(early), len(attempts), head(attempts))
	}
	// A delivery counts once the flush after it comes back, which may be
	// after its ACK.
	checkFor(t, wait, 10*time.Millisecond, func() error {
		if st := h.svc.Stats(); st.Delivered != n || st.Acked != n || st.Redelivered != 0 {
			return fmt.Errorf("stats %+v, want %d delivered and acked, none redelivered", st, n)
		}
		return nil
	})
}

// head keeps failure messages short.
func head(s []string) []string { return s[:min(len(s), 10)] }

// TestDelivery_WhileIngesting_NoneLost checks that nothing is lost when
// messages keep arriving while the dispatcher delivers: a stream of
// messages with delays of a few milliseconds, so that each one is often
// committed while a scan of its subject is under way and sorts before
// messages that scan has already passed. Every message must be delivered
// and ACKed well within the ack wait (which is long, so a redelivery cannot
// hide a lost message).
func TestDelivery_WhileIngesting_NoneLost(t *testing.T) {
	t.Parallel()
	const (
		n      = 4000
		rounds = 20
	)
	h := newHarness(t, func(c *bridge.Config) { c.Delivery.AckWait = time.Minute })
	cons := connect(t, h.srv)
	var (
		mu    sync.Mutex
		count = make(map[string]int)
	)
	sub, err := cons.Subscribe("stream.s", func(m *nats.Msg) {
		mu.Lock()
		count[string(m.Data)]++
		mu.Unlock()
		_ = m.Respond(nil)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		t.Fatal(err)
	}
	if err := cons.Flush(); err != nil {
		t.Fatal(err)
	}
	// Rounds of pipelined requests keep ingest and delivery overlapping.
	for r := range rounds {
		msgs := make([]*nats.Msg, n/rounds)
		for i := range msgs {
			msgs[i] = newMsg("stream.s", fmt.Sprintf("%d.%d", r, i), "Delay", strconv.Itoa(rand.IntN(20)))
		}
		scheduleMany(t, h.nc, msgs)
	}
	checkFor(t, wait, 20*time.Millisecond, func() error {
		if p := pending(t, h.nc); p != 0 {
			mu.Lock()
			defer mu.Unlock()
			return fmt.Errorf("%d of %d messages still pending, %d delivered", p, n, len(count))
		}
		return nil
	})
}
