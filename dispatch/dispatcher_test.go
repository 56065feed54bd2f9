package dispatch_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/delaystore/pebblestore"
	"github.com/natsdelay/natsdelay/dispatch"
	"github.com/natsdelay/natsdelay/keys"
)

// delivery is one call of the fake publisher.
type delivery struct {
	key     keys.Key
	subject string
	attempt uint32
	fireAt  int64
	at      time.Time
	reason  string // dead letters only
}

// fakePublisher records deliveries. Subjects in absent have no subscriber:
// Flush reports each delivery to them as a no-responders notice before it
// returns, which is exactly what the Publisher contract promises.
type fakePublisher struct {
	d *dispatch.Dispatcher

	mu         sync.Mutex
	absent     map[string]bool
	unflushed  []keys.Key
	deliveries chan delivery
	dead       chan delivery
	bounced    int
	passes     []int // bounces per Flush, in order
	flushes    int   // Flush calls
}

func newFakePublisher() *fakePublisher {
	return &fakePublisher{absent: map[string]bool{}, deliveries: make(chan delivery, 100000), dead: make(chan delivery, 1000)}
}

func (p *fakePublisher) Deliver(k keys.Key, m *delaystore.StoredMessage, attempt uint32) error {
	p.mu.Lock()
	absent := p.absent[m.Subject]
	if absent {
		p.unflushed = append(p.unflushed, k)
		p.bounced++
	}
	p.mu.Unlock()
	if !absent {
		p.deliveries <- delivery{key: k, subject: m.Subject, attempt: attempt, fireAt: m.FireAtNs, at: time.Now()}
	}
	return nil
}

func (p *fakePublisher) DeadLetter(subject string, k keys.Key, m *delaystore.StoredMessage, attempt uint32, reason string) error {
	p.dead <- delivery{key: k, subject: m.Subject, attempt: attempt, reason: reason}
	return nil
}

func (p *fakePublisher) Flush(context.Context) error {
	p.mu.Lock()
	p.flushes++
	bounced := p.unflushed
	p.unflushed = nil
	if len(bounced) > 0 {
		p.passes = append(p.passes, len(bounced))
	}
	p.mu.Unlock()
	for _, k := range bounced {
		p.d.NoResponders(k)
	}
	return nil
}

// flushCount is how many times Flush was called.
func (p *fakePublisher) flushCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.flushes
}

func (p *fakePublisher) setAbsent(subject string, absent bool) {
	p.mu.Lock()
	p.absent[subject] = absent
	p.mu.Unlock()
}

func (p *fakePublisher) bounces() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.bounced
}

type harness struct {
	t    *testing.T
	repo *delaystore.Repository
	d    *dispatch.Dispatcher
	pub  *fakePublisher
}

func newHarness(t *testing.T, bucket time.Duration, mod func(*dispatch.Config)) *harness {
	t.Helper()
	return newHarnessWith(t, delaystore.RepositoryConfig{TimeBucket: bucket}, mod)
}

// newHarnessWith is newHarness with the repository's whole configuration.
func newHarnessWith(t *testing.T, rc delaystore.RepositoryConfig, mod func(*dispatch.Config)) *harness {
	t.Helper()
	return newWrappedHarness(t, rc, nil, mod)
}

// newWrappedHarness is newHarnessWith whose dispatcher publishes through
// wrap(the fake publisher), unless wrap is nil.
func newWrappedHarness(t *testing.T, rc delaystore.RepositoryConfig, wrap func(*fakePublisher) dispatch.Publisher, mod func(*dispatch.Config)) *harness {
	t.Helper()
	st, err := pebblestore.Open(pebblestore.Config{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	repo, err := delaystore.OpenRepository(st, rc)
	if err != nil {
		t.Fatal(err)
	}
	pub := newFakePublisher()
	cfg := dispatch.Config{AckWait: 10 * time.Second, Logger: slog.New(slog.NewTextHandler(t.Output(), nil))}
	if mod != nil {
		mod(&cfg)
	}
	var p dispatch.Publisher = pub
	if wrap != nil {
		p = wrap(pub)
	}
	d, err := dispatch.New(repo, p, cfg)
	if err != nil {
		t.Fatal(err)
	}
	pub.d = d
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = d.Close()
		_ = repo.Close()
		_ = st.Close()
	})
	return &harness{t: t, repo: repo, d: d, pub: pub}
}

// schedule stores msgs in one commit and tells the dispatcher, as ingest does.
func (h *harness) schedule(msgs ...*delaystore.StoredMessage) []keys.Key {
	h.t.Helper()
	res, err := h.repo.Schedule(msgs, delaystore.Sync)
	if err != nil {
		h.t.Fatal(err)
	}
	out := make([]keys.Key, len(res))
	for i, s := range res {
		h.d.Notify(s, msgs[i].FireAtNs)
		out[i] = s.Key
	}
	return out
}

func (h *harness) next(timeout time.Duration) delivery {
	h.t.Helper()
	select {
	case d := <-h.pub.deliveries:
		return d
	case <-time.After(timeout):
		h.t.Fatal("no delivery")
		return delivery{}
	}
}

func (h *harness) ack(k keys.Key, a dispatch.Ack) error {
	ch := make(chan error, 1)
	h.d.Ack(k, a, func(err error) { ch <- err })
	select {
	case err := <-ch:
		return err
	case <-time.After(10 * time.Second):
		h.t.Fatal("ack not applied")
		return nil
	}
}

func msgAt(subject string, fireAt time.Time) *delaystore.StoredMessage {
	return &delaystore.StoredMessage{Subject: subject, Payload: []byte("x"), EnqueuedAtNs: time.Now().UnixNano(), FireAtNs: fireAt.UnixNano()}
}

// TestDispatcher_Deliver_NeverEarlyInOrder_CoarseBucket checks never early
// and order per subject with a 1 s time bucket, where keys within a bucket
// are in publish order, not fire-time order: messages published in reverse
// fire order must still go out in (fire time, publish order) and none before
// its fire time.
func TestDispatcher_Deliver_NeverEarlyInOrder_CoarseBucket(t *testing.T) {
	h := newHarness(t, time.Second, nil)
	base := time.Now().Add(100 * time.Millisecond)
	const n = 20
	var msgs []*delaystore.StoredMessage
	for i := n - 1; i >= 0; i-- {
		msgs = append(msgs, msgAt("a.b", base.Add(time.Duration(i)*15*time.Millisecond)))
	}
	h.schedule(msgs...)
	prev := int64(0)
	for range n {
		d := h.next(10 * time.Second)
		if d.at.UnixNano() < d.fireAt {
			t.Fatalf("delivered %v early", time.Duration(d.fireAt-d.at.UnixNano()))
		}
		if d.fireAt < prev {
			t.Fatalf("out of order: fire %d after %d", d.fireAt, prev)
		}
		prev = d.fireAt
		if err := h.ack(d.key, dispatch.Ack{Kind: dispatch.AckDone}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDispatcher_Deliver_SamePublishOrder checks order per subject for
// messages with the same fire time: publish order.
func TestDispatcher_Deliver_SamePublishOrder(t *testing.T) {
	h := newHarness(t, 0, nil)
	at := time.Now().Add(20 * time.Millisecond)
	var ks []keys.Key
	for range 50 {
		ks = append(ks, h.schedule(msgAt("same", at))...)
	}
	for i := range ks {
		if d := h.next(10 * time.Second); d.key != ks[i] {
			t.Fatalf("delivery %d is %v, want %v", i, d.key, ks[i])
		}
	}
}

// TestDispatcher_Redeliver_AckTimeout checks at least once: without an
// answer a message is redelivered after the ack wait with the attempt
// counting up, and dead-lettered at max deliver.
func TestDispatcher_Redeliver_AckTimeout(t *testing.T) {
	h := newHarness(t, 0, func(c *dispatch.Config) {
		c.AckWait = 50 * time.Millisecond
		c.MaxDeliver = 3
		c.DeadLetterSubject = "dead"
	})
	k := h.schedule(msgAt("r", time.Now()))[0]
	for want := uint32(1); want <= 3; want++ {
		if d := h.next(10 * time.Second); d.key != k || d.attempt != want {
			t.Fatalf("delivery = %v attempt %d, want %v attempt %d", d.key, d.attempt, k, want)
		}
	}
	select {
	case dl := <-h.pub.dead:
		if dl.key != k || dl.reason != "max-deliver" || dl.attempt != 3 {
			t.Fatalf("dead letter %+v", dl)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no dead letter")
	}
	checkFor(t, 10*time.Second, func() error {
		if _, err := h.repo.Get(k); err == nil {
			return fmt.Errorf("still stored")
		}
		return nil
	})
}

// TestDispatcher_Nak_Delay checks that -NAK with a delay is not redelivered
// before the delay, and counts as an attempt.
func TestDispatcher_Nak_Delay(t *testing.T) {
	h := newHarness(t, 0, nil)
	k := h.schedule(msgAt("n", time.Now()))[0]
	h.next(10 * time.Second)
	nakAt := time.Now()
	if err := h.ack(k, dispatch.Ack{Kind: dispatch.AckNak, Delay: 200 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	d := h.next(10 * time.Second)
	if d.attempt != 2 || d.at.Sub(nakAt) < 200*time.Millisecond {
		t.Fatalf("redelivered attempt %d after %v, want attempt 2 after >= 200ms", d.attempt, d.at.Sub(nakAt))
	}
}

// TestDispatcher_NoResponders_ProbesWithOneMessage checks that deliveries
// that reach nobody are not attempts and do not spin: after the first bounce
// the topic is retried with a single probe per back-off, and once someone
// listens every message arrives as attempt 1, in order.
func TestDispatcher_NoResponders_ProbesWithOneMessage(t *testing.T) {
	h := newHarness(t, 0, func(c *dispatch.Config) {
		c.NoRespondersBackoff = 10 * time.Millisecond
		c.NoRespondersMaxBackoff = 40 * time.Millisecond
	})
	h.pub.setAbsent("nobody", true)
	var ks []keys.Key
	for range 100 {
		ks = append(ks, h.schedule(msgAt("nobody", time.Now()))...)
	}
	checkFor(t, 10*time.Second, func() error {
		if b := h.pub.bounces(); b < 103 {
			return fmt.Errorf("%d bounces so far", b)
		}
		return nil
	})
	// The passes before the first flush returns may send all 100: nobody is
	// known to be absent yet, and passes do not wait for their flush. The
	// second flush covers those passes; from the third on, every flush
	// carries one probe, so bounces grow by one per back-off.
	b1 := h.pub.bounces()
	checkFor(t, 10*time.Second, func() error {
		if b := h.pub.bounces(); b < b1+3 {
			return fmt.Errorf("%d bounces so far", b)
		}
		return nil
	})
	h.pub.mu.Lock()
	passes := append([]int(nil), h.pub.passes...)
	h.pub.mu.Unlock()
	for i, n := range passes[2:] {
		if n != 1 {
			t.Fatalf("flush %d after the first bounce was known carried %d messages to a topic nobody listens on, want 1 probe (bounces per flush %v)", i+2, n, passes)
		}
	}
	if s := h.d.Stats(); s.Delivered > uint64(h.pub.bounces()) {
		t.Fatalf("stats %+v", s)
	}
	h.pub.setAbsent("nobody", false)
	for i := range ks {
		d := h.next(10 * time.Second)
		if d.key != ks[i] || d.attempt != 1 {
			t.Fatalf("delivery %d = %v attempt %d, want %v attempt 1", i, d.key, d.attempt, ks[i])
		}
	}
}

// TestDispatcher_Cancel_InFlight checks that a canceled message is never
// published again, also when it was in flight.
func TestDispatcher_Cancel_InFlight(t *testing.T) {
	h := newHarness(t, 0, func(c *dispatch.Config) { c.AckWait = 30 * time.Millisecond })
	k := h.schedule(msgAt("c", time.Now()))[0]
	h.next(10 * time.Second)
	ok, err := h.d.Cancel(context.Background(), k)
	if err != nil || !ok {
		t.Fatalf("Cancel = %v, %v", ok, err)
	}
	// A second message on the same topic, due after the first's ack wait,
	// proves the dispatcher moved on without redelivering the canceled one.
	k2 := h.schedule(msgAt("c", time.Now().Add(100*time.Millisecond)))[0]
	if d := h.next(10 * time.Second); d.key != k2 {
		t.Fatalf("delivered %v after cancel, want only %v", d.key, k2)
	}
	if ok, _ := h.d.Cancel(context.Background(), k); ok {
		t.Fatal("second cancel deleted something")
	}
}

// TestDispatcher_Ack_UnknownTag checks that an ACK for a tag nobody issued
// is a harmless no-op reported as ErrUnknownTag.
func TestDispatcher_Ack_UnknownTag(t *testing.T) {
	h := newHarness(t, 0, nil)
	if err := h.ack(keys.New(1, 2, 3), dispatch.Ack{Kind: dispatch.AckDone}); err != dispatch.ErrUnknownTag {
		t.Fatalf("ack unknown = %v", err)
	}
	if err := h.ack(keys.New(1, 2, 3), dispatch.Ack{Kind: dispatch.AckNak}); err != dispatch.ErrNotInFlight {
		t.Fatalf("nak unknown = %v", err)
	}
}

func checkFor(t *testing.T, timeout time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestDispatcher_AttemptWrite_WaitsUntilClose checks that a delivery's
// attempt count is not written while AttemptWriteDelay has not passed (the
// delay here outlasts the test), that GET's source, Attempt, reports it
// live meanwhile, and that Close writes it, so a clean restart keeps it.
func TestDispatcher_AttemptWrite_WaitsUntilClose(t *testing.T) {
	h := newHarness(t, 0, func(c *dispatch.Config) { c.AttemptWriteDelay = time.Hour })
	k := h.schedule(msgAt("w", time.Now()))[0]
	if d := h.next(10 * time.Second); d.key != k || d.attempt != 1 {
		t.Fatalf("delivery = %v attempt %d, want %v attempt 1", d.key, d.attempt, k)
	}
	checkFor(t, 10*time.Second, func() error {
		if a := h.d.Attempt(k); a != 1 {
			return fmt.Errorf("live attempt %d, want 1", a)
		}
		return nil
	})
	if m, err := h.repo.Get(k); err != nil || m.Attempt != 0 {
		t.Fatalf("stored before the delay passed: %v, %v; want attempt 0", m, err)
	}
	if err := h.d.Close(); err != nil {
		t.Fatal(err)
	}
	if m, err := h.repo.Get(k); err != nil || m.Attempt != 1 {
		t.Fatalf("stored after Close: %v, %v; want attempt 1", m, err)
	}
}

// TestDispatcher_AttemptWrite_AfterDelay checks that an unanswered
// delivery's attempt count reaches the store once AttemptWriteDelay has
// passed, without a Close, and that an ACK meanwhile still deletes it.
func TestDispatcher_AttemptWrite_AfterDelay(t *testing.T) {
	h := newHarness(t, 0, func(c *dispatch.Config) { c.AttemptWriteDelay = 20 * time.Millisecond })
	k := h.schedule(msgAt("w", time.Now()))[0]
	h.next(10 * time.Second)
	checkFor(t, 10*time.Second, func() error {
		m, err := h.repo.Get(k)
		if err != nil {
			return err
		}
		if m.Attempt != 1 {
			return fmt.Errorf("stored attempt %d, want 1", m.Attempt)
		}
		return nil
	})
	if err := h.ack(k, dispatch.Ack{Kind: dispatch.AckDone}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.repo.Get(k); err == nil {
		t.Fatal("still stored after the ACK was applied")
	}
}

// TestDispatcher_Topics_ForgottenWhenDrained checks that the dispatcher's
// memory follows the subjects with work, not every subject seen: after
// waves of messages on fresh subjects are delivered and ACKed, it keeps
// state for no subject (Stats.Topics is 0); and a subject whose state was
// dropped is delivered again, in order, when new messages arrive for it.
func TestDispatcher_Topics_ForgottenWhenDrained(t *testing.T) {
	h := newHarness(t, 0, nil)
	const perWave = 500
	for wave := range 3 {
		now := time.Now()
		msgs := make([]*delaystore.StoredMessage, perWave)
		for i := range msgs {
			msgs[i] = msgAt(fmt.Sprintf("wave%d.s%d", wave, i), now)
		}
		h.schedule(msgs...)
		for range perWave {
			if err := h.ack(h.next(10*time.Second).key, dispatch.Ack{Kind: dispatch.AckDone}); err != nil {
				t.Fatal(err)
			}
		}
		checkFor(t, 10*time.Second, func() error {
			if st := h.d.Stats(); st.Topics != 0 || st.InFlight != 0 {
				return fmt.Errorf("after wave %d: state kept for %d subjects, %d in flight; want none", wave, st.Topics, st.InFlight)
			}
			return nil
		})
	}
	// A subject seen before gets a fresh state: its new messages go out,
	// in order, and only those.
	now := time.Now()
	ks := h.schedule(msgAt("wave0.s7", now), msgAt("wave0.s7", now.Add(time.Millisecond)))
	for i, k := range ks {
		if d := h.next(10 * time.Second); d.key != k {
			t.Fatalf("delivery %d of the revisited subject: %v, want %v", i, d.key, k)
		}
	}
}

// TestDispatcher_Failed_WaitsBackoff checks that an attempt the consumer
// reports as failed (a JetStream stream's error answer) is not
// redelivered before the back-off of that attempt, nor, without a
// back-off, before the ack wait: a full stream is not hammered. It counts
// as an attempt, and as Failed.
func TestDispatcher_Failed_WaitsBackoff(t *testing.T) {
	for _, tc := range []struct {
		name    string
		backoff []time.Duration
		want    time.Duration
	}{
		{"backoff", []time.Duration{300 * time.Millisecond}, 300 * time.Millisecond},
		{"ack wait", nil, 400 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, 0, func(c *dispatch.Config) {
				c.AckWait = 400 * time.Millisecond
				c.Backoff = tc.backoff
			})
			k := h.schedule(msgAt("f", time.Now()))[0]
			h.next(10 * time.Second)
			failedAt := time.Now()
			if err := h.ack(k, dispatch.Ack{Kind: dispatch.AckFailed, Reason: "maximum messages exceeded"}); err != nil {
				t.Fatal(err)
			}
			d := h.next(10 * time.Second)
			if d.attempt != 2 || d.at.Sub(failedAt) < tc.want {
				t.Fatalf("redelivered attempt %d after %v, want attempt 2 after >= %v", d.attempt, d.at.Sub(failedAt), tc.want)
			}
			if s := h.d.Stats(); s.Failed != 1 || s.Nacked != 0 {
				t.Fatalf("stats failed %d nacked %d, want 1 and 0", s.Failed, s.Nacked)
			}
		})
	}
}

// TestDispatcher_Close_ReportsWritesNotCommitted checks that a Close whose
// last commit of queued writes fails says so: the attempt count it could
// not write is lost (the message is delivered again as attempt 1), and the
// caller that closes the store must know.
func TestDispatcher_Close_ReportsWritesNotCommitted(t *testing.T) {
	h := newHarness(t, 0, func(c *dispatch.Config) { c.AttemptWriteDelay = time.Hour })
	k := h.schedule(msgAt("w", time.Now()))[0]
	h.next(10 * time.Second)
	checkFor(t, 10*time.Second, func() error {
		if !h.d.QueuedWriteForTest(k) {
			return fmt.Errorf("no write of %v queued", k)
		}
		return nil
	})
	// A closed repository refuses every commit, as a failed store does.
	if err := h.repo.Close(); err != nil {
		t.Fatal(err)
	}
	if err := h.d.Close(); err == nil {
		t.Fatal("Close = nil, want the error of the attempt count it could not write")
	}
}
