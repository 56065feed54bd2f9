package dispatch_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/dispatch"
	"github.com/natsdelay/natsdelay/keys"
)

// TestDispatcher_NotifyMessage_Stress_EveryMessageSettledInOrder checks
// at-least-once and per-subject order with the hand-off under way: a
// writer commits batches of messages due now over 64 subjects and tells
// the dispatcher with NotifyMessage, as the group commit does, while a
// consumer ACKs every delivery, some at once, some after a pause. Every
// message is delivered, the first deliveries of each subject in key
// order, and nothing is left pending. When the hand-off moved the due
// frontier past the entry of a message it handed off, most runs left
// messages undelivered or sent one ahead of an older one of its subject.
func TestDispatcher_NotifyMessage_Stress_EveryMessageSettledInOrder(t *testing.T) {
	const total, subjects = 20000, 64
	h := newHarness(t, 0, func(c *dispatch.Config) { c.AckWait = 30 * time.Second })
	keysOf := make(chan []keys.Key, total)
	go func() {
		// Owned by the test: it ends after total messages.
		rng := rand.New(rand.NewPCG(1, 2))
		for sent := 0; sent < total; {
			n := min(1+rng.IntN(64), total-sent)
			in := make([]delaystore.Once, n)
			for i := range in {
				in[i] = delaystore.Once{Msg: msgAt(fmt.Sprintf("s%d", rng.IntN(subjects)), time.Now())}
			}
			epoch, told := h.d.Ingesting(in[0].Msg.FireAtNs)
			res, err := h.repo.ScheduleOnce(in, 0, time.Now().UnixNano(), delaystore.Sync)
			if err != nil {
				told()
				t.Error(err)
				close(keysOf)
				return
			}
			ks := make([]keys.Key, n)
			for i, s := range res {
				h.d.NotifyMessage(s.Scheduled, s.FireAtNs, in[i].Msg, epoch)
				ks[i] = s.Key
			}
			told()
			keysOf <- ks
			sent += n
		}
		close(keysOf)
	}()
	rng := rand.New(rand.NewPCG(3, 4))
	first := map[keys.Key]bool{}
	last := map[string]keys.Key{}
	for len(first) < total {
		var d delivery
		select {
		case d = <-h.pub.deliveries:
		case <-time.After(30 * time.Second):
			t.Fatalf("%d of %d delivered, then none for 30 s; pending %d, stats %+v", len(first), total, h.repo.Pending(), h.d.Stats())
		}
		if !first[d.key] {
			first[d.key] = true
			if prev, ok := last[d.subject]; ok && bytes.Compare(d.key[:], prev[:]) < 0 {
				t.Fatalf("%s: %v delivered first after %v", d.subject, d.key, prev)
			}
			last[d.subject] = d.key
		}
		if rng.IntN(50) == 0 {
			time.Sleep(time.Millisecond)
		}
		h.d.Ack(d.key, dispatch.Ack{Kind: dispatch.AckDone}, func(error) {})
	}
	for range keysOf {
	}
	checkFor(t, 30*time.Second, func() error {
		if n := h.repo.Pending(); n != 0 {
			return fmt.Errorf("%d pending, stats %+v", n, h.d.Stats())
		}
		return nil
	})
	t.Logf("stats %+v", h.d.Stats())
}

// TestDispatcher_NotifyMessage_Stress_DelayedAmongDue_EveryMessageSettled
// is the stress above with what ingest of delayed messages adds: one
// subject, each message due between now and 20 ms from now, so that the
// hand-off of one due at its commit meets scans, reads of the due index
// and messages committed before it that fall due after it. Each batch is
// told in key order, as the group commit tells it.
func TestDispatcher_NotifyMessage_Stress_DelayedAmongDue_EveryMessageSettled(t *testing.T) {
	const total = 4000
	h := newHarness(t, 0, func(c *dispatch.Config) { c.AckWait = 30 * time.Second })
	done := make(chan struct{})
	go func() {
		// Owned by the test: it ends after total messages.
		defer close(done)
		rng := rand.New(rand.NewPCG(1, 2))
		for sent := 0; sent < total; {
			n := min(1+rng.IntN(64), total-sent)
			in := make([]delaystore.Once, n)
			earliest := time.Now()
			for i := range in {
				in[i] = delaystore.Once{Msg: msgAt("s", earliest.Add(time.Duration(rng.IntN(20))*time.Millisecond))}
			}
			epoch, told := h.d.Ingesting(earliest.UnixNano())
			res, err := h.repo.ScheduleOnce(in, 0, time.Now().UnixNano(), delaystore.Sync)
			if err != nil {
				told()
				t.Error(err)
				return
			}
			order := make([]int, n)
			for i := range order {
				order[i] = i
			}
			slices.SortFunc(order, func(a, b int) int { return bytes.Compare(res[a].Key[:], res[b].Key[:]) })
			for _, i := range order {
				h.d.NotifyMessage(res[i].Scheduled, res[i].FireAtNs, in[i].Msg, epoch)
			}
			told()
			sent += n
		}
	}()
	defer func() { <-done }() // before the harness closes, if the test fails
	first := map[keys.Key]bool{}
	for len(first) < total {
		var d delivery
		select {
		case d = <-h.pub.deliveries:
		case <-time.After(30 * time.Second):
			t.Fatalf("%d of %d delivered, then none for 30 s; pending %d, stats %+v", len(first), total, h.repo.Pending(), h.d.Stats())
		}
		first[d.key] = true
		h.d.Ack(d.key, dispatch.Ack{Kind: dispatch.AckDone}, func(error) {})
	}
	checkFor(t, 30*time.Second, func() error {
		if n := h.repo.Pending(); n != 0 {
			return fmt.Errorf("%d pending, stats %+v", n, h.d.Stats())
		}
		return nil
	})
	t.Logf("stats %+v", h.d.Stats())
}
