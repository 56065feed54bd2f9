package integration_test

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge"
	"github.com/natsdelay/natsdelay/bridge/wire"
)

// TestAck_BeforeDelivery_NeverAfterOK checks that a message acknowledged
// by tag before it is delivered (an ACK on $DELAY.ACK with Delay-Tag, as
// anyone holding the tag may send) is never delivered once the +OK has
// been sent: the +OK means the delete is committed. The ACKs are timed to
// land while the dispatcher scans the due messages, which is when a scan
// that read a message before its delete could still publish it.
//
// Deliveries and +OK answers both come from the service's connection and
// reach one client connection, in the order the service sent them; one
// channel for both keeps that order.
func TestAck_BeforeDelivery_NeverAfterOK(t *testing.T) {
	t.Parallel()
	const n = 3000
	h := newHarness(t, func(c *bridge.Config) { c.Delivery.AckWait = time.Minute })
	events := make(chan *nats.Msg, 2*n+16)
	dsub, err := h.nc.ChanSubscribe("race.s", events)
	if err != nil {
		t.Fatal(err)
	}
	defer dsub.Unsubscribe()
	inbox := nats.NewInbox()
	asub, err := h.nc.ChanSubscribe(inbox+".*", events)
	if err != nil {
		t.Fatal(err)
	}
	defer asub.Unsubscribe()

	at := time.Now().Add(time.Second).Truncate(time.Millisecond)
	msgs := make([]*nats.Msg, n)
	for i := range msgs {
		msgs[i] = newMsg("race.s", strconv.Itoa(i), "Delay-At", fmt.Sprintf("%d.%03d", at.Unix(), at.Nanosecond()/1e6))
	}
	reps := scheduleMany(t, h.nc, msgs)
	tags := make(map[string]int, n)
	for i, r := range reps {
		tags[r.Tag] = i
	}

	// Start acknowledging just before the fire time, last message first,
	// so the ACKs overlap the scan that delivers the first ones.
	time.Sleep(time.Until(at.Add(-5 * time.Millisecond))) // scenario timing, not synchronisation
	for i := n - 1; i >= 0; i-- {
		m := nats.NewMsg(wire.DefaultAckPrefix)
		m.Header.Set(wire.HeaderTag, reps[i].Tag)
		m.Reply = inbox + "." + strconv.Itoa(i)
		if err := h.nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.nc.Flush(); err != nil {
		t.Fatal(err)
	}

	okd := make(map[int]bool, n)
	var after []string
	delivered := 0
	timeout := time.After(wait)
	for len(okd) < n {
		var m *nats.Msg
		select {
		case m = <-events:
		case <-timeout:
			t.Fatalf("%d of %d ACKs confirmed", len(okd), n)
		}
		if m.Subject == "race.s" {
			delivered++
			i := tags[m.Header.Get(wire.HeaderTag)]
			if okd[i] {
				after = append(after, fmt.Sprintf("message %d attempt %s", i, m.Header.Get(wire.HeaderAttempt)))
			}
			continue
		}
		if string(m.Data) != "+OK" {
			t.Fatalf("ACK answer %q with headers %v", m.Data, m.Header)
		}
		i, _ := strconv.Atoi(m.Subject[len(inbox)+1:])
		okd[i] = true
	}
	waitPending(t, h.nc, 0)
	// Deliveries still on their way were published after every +OK.
	select {
	case m := <-events:
		t.Fatalf("after all ACKs were confirmed: got %s %q with headers %v", m.Subject, m.Data, m.Header)
	case <-time.After(300 * time.Millisecond):
	}
	t.Logf("%d delivered before their ACK", delivered)
	if len(after) > 0 {
		t.Fatalf("%d messages delivered after their ACK was confirmed: %v", len(after), head(after))
	}
}

// TestDelayID_Replace_NeverAfterReply checks that once the reply to a
// replacing schedule (same subject and Delay-Id) has been sent, the
// replaced message is never delivered. The replacements are timed to land
// while the dispatcher scans the messages they replace.
func TestDelayID_Replace_NeverAfterReply(t *testing.T) {
	t.Parallel()
	const n = 3000
	h := newHarness(t, func(c *bridge.Config) { c.Delivery.AckWait = time.Minute })
	events := make(chan *nats.Msg, 2*n+16)
	dsub, err := h.nc.ChanSubscribe("race.r", events)
	if err != nil {
		t.Fatal(err)
	}
	defer dsub.Unsubscribe()
	inbox := nats.NewInbox()
	rsub, err := h.nc.ChanSubscribe(inbox+".*", events)
	if err != nil {
		t.Fatal(err)
	}
	defer rsub.Unsubscribe()

	at := time.Now().Add(time.Second).Truncate(time.Millisecond)
	msgs := make([]*nats.Msg, n)
	for i := range msgs {
		msgs[i] = newMsg("race.r", "old", "Delay-Id", strconv.Itoa(i), "Delay-At", fmt.Sprintf("%d.%03d", at.Unix(), at.Nanosecond()/1e6))
	}
	reps := scheduleMany(t, h.nc, msgs)
	old := make(map[string]int, n)
	for i, r := range reps {
		old[r.Tag] = i
	}

	// Start replacing a little before the fire time, last message first:
	// the replacements are group-committed with fsync, so they trail the
	// scans, and this makes some of them land during one.
	time.Sleep(time.Until(at.Add(-30 * time.Millisecond))) // scenario timing, not synchronisation
	for i := n - 1; i >= 0; i-- {
		m := newMsg("race.r", "new", "Delay-Id", strconv.Itoa(i), "Delay", "1h")
		m.Reply = inbox + "." + strconv.Itoa(i)
		if err := h.nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.nc.Flush(); err != nil {
		t.Fatal(err)
	}

	replaced := make(map[int]bool, n)
	var after []string
	delivered := 0
	timeout := time.After(wait)
	for len(replaced) < n {
		var m *nats.Msg
		select {
		case m = <-events:
		case <-timeout:
			t.Fatalf("%d of %d replacements answered", len(replaced), n)
		}
		if m.Subject == "race.r" {
			i, ok := old[m.Header.Get(wire.HeaderTag)]
			if !ok {
				t.Fatalf("delivered a replacement, due in an hour: %v", m.Header)
			}
			delivered++
			if replaced[i] {
				after = append(after, fmt.Sprintf("message %d", i))
			}
			continue
		}
		if code := m.Header.Get(wire.HeaderServiceErrorCode); code != "" {
			t.Fatalf("replacement refused: %s %s", code, m.Header.Get(wire.HeaderServiceError))
		}
		i, _ := strconv.Atoi(m.Subject[len(inbox)+1:])
		replaced[i] = true
	}
	select {
	case m := <-events:
		t.Fatalf("after all replacements were answered: got %s %q with headers %v", m.Subject, m.Data, m.Header)
	case <-time.After(300 * time.Millisecond):
	}
	t.Logf("%d delivered before their replacement", delivered)
	if len(after) > 0 {
		t.Fatalf("%d replaced messages delivered after the replacement was answered: %v", len(after), head(after))
	}
}
