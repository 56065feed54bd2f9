package dispatch_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/dispatch"
	"github.com/natsdelay/natsdelay/keys"
)

// setLimits stores ls and puts them in force.
func setLimits(t *testing.T, h *harness, ls ...delaystore.Limit) {
	t.Helper()
	for _, l := range ls {
		if err := h.repo.SetLimit(l); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.d.ReloadLimits(); err != nil {
		t.Fatal(err)
	}
}

// tenantAt is a message of subject due at fireAt with the header Tenant.
func tenantAt(subject, tenant string, fireAt time.Time) *delaystore.StoredMessage {
	m := msgAt(subject, fireAt)
	m.Headers = []*delaystore.Header{{Name: "Tenant", Values: []string{tenant}}}
	return m
}

// TestDispatcher_GroupWhole_EmptiedAndRefilledInOnePass checks that a
// group emptied and filled again between two passes keeps its bound: with
// w.> bounded as a whole to 2, both flights of w.a are settled in one pass
// (their deletes committed while the loop was held in a publish), whose
// scan of w.b, woken by the first, fills the group again; then w.c, due,
// waits for the group and takes none of its own. The emptied group used to
// be forgotten by name when w.b passed on its wake, taking the new one,
// full, with it: w.c then made a third, and 4 were in flight of 2.
func TestDispatcher_GroupWhole_EmptiedAndRefilledInOnePass(t *testing.T) {
	const bound = 2
	hp := &holdingPublisher{subject: "hold", entered: make(chan struct{}), release: make(chan struct{})}
	h := newWrappedHarness(t, delaystore.RepositoryConfig{}, func(fp *fakePublisher) dispatch.Publisher {
		hp.fakePublisher = fp
		return hp
	}, func(c *dispatch.Config) { c.AckWait = time.Hour })
	t.Cleanup(hp.releaseHeld) // before the harness's: Close waits for the pass
	setLimits(t, h, delaystore.Limit{Pattern: "w.>", Whole: true, MaxInFlight: bound})

	now := time.Now()
	h.schedule(msgAt("w.a", now), msgAt("w.a", now))
	var first []keys.Key
	for range bound {
		d := h.next(10 * time.Second)
		if d.subject != "w.a" {
			t.Fatalf("delivered %s, want w.a", d.subject)
		}
		first = append(first, d.key)
	}
	h.schedule(msgAt("w.b", now), msgAt("w.b", now))
	waitLimited(t, h.d, 1) // w.b waits for the group

	// Hold the loop in a publish while both of w.a's deletes commit, so
	// that one pass settles both.
	h.schedule(msgAt("hold", now))
	<-hp.entered
	for _, k := range first {
		if err := h.ack(k, dispatch.Ack{Kind: dispatch.AckDone}); err != nil {
			t.Fatal(err)
		}
	}
	// The deleter tells the dispatcher of a commit after its callbacks:
	// one more commit's callback says the last one was told.
	if err := h.ack(keys.Key{}, dispatch.Ack{Kind: dispatch.AckDone}); err == nil {
		t.Fatal("ACK of a key never stored succeeded")
	}
	hp.releaseHeld()
	got := map[string]int{}
	for range bound + 1 {
		d := h.next(10 * time.Second)
		got[d.subject]++
		if d.subject == "hold" {
			if err := h.ack(d.key, dispatch.Ack{Kind: dispatch.AckDone}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got["w.b"] != bound || got["hold"] != 1 {
		t.Fatalf("delivered %v after the release, want hold once and w.b %d times", got, bound)
	}

	h.schedule(msgAt("w.c", now), msgAt("w.c", now))
	checkFor(t, 10*time.Second, func() error {
		if st := h.d.Subject("w.c"); !st.Limited && st.InFlight == 0 {
			return fmt.Errorf("w.c not scanned yet: %+v", st)
		}
		return nil
	})
	if st := h.d.Subject("w.c"); st.InFlight != 0 {
		t.Fatalf("w.c has %d in flight while w.b holds the group's %d, want none", st.InFlight, bound)
	}
	checkFor(t, 10*time.Second, func() error {
		if n := h.d.Stats().InFlight; n != bound {
			return fmt.Errorf("%d in flight, want the group's %d", n, bound)
		}
		return nil
	})
}

// TestDispatcher_GroupKeyHeader_CoarseBucket_OwnGroup checks that with a
// coarse time bucket, where a scan reads a bucket's messages in publish
// order and delivers them in fire order, each counts in the group of its
// own Tenant: of tenant a's message published first and due last, and
// tenant b's published last and due first, b's is ACKed; a's next
// message then waits for a's flight, and b's next goes out. Sorting the
// scan's messages used to leave their groups behind, so that b's ACK
// freed a's group, and a's flight held b's.
func TestDispatcher_GroupKeyHeader_CoarseBucket_OwnGroup(t *testing.T) {
	h := newHarness(t, time.Second, func(c *dispatch.Config) { c.AckWait = time.Hour })
	setLimits(t, h, delaystore.Limit{Pattern: ">", KeyHeader: "Tenant", MaxInFlight: 1})

	base := time.Now().Truncate(time.Second).Add(-3 * time.Second)
	ks := h.schedule(tenantAt("s", "a", base.Add(300*time.Millisecond)), tenantAt("s", "b", base.Add(100*time.Millisecond)))
	a, b := ks[0], ks[1]
	for _, want := range []keys.Key{b, a} {
		if d := h.next(10 * time.Second); d.key != want {
			t.Fatalf("delivered %v, want %v (fire order)", d.key, want)
		}
	}
	if err := h.ack(b, dispatch.Ack{Kind: dispatch.AckDone}); err != nil {
		t.Fatal(err)
	}
	next := base.Add(time.Second)
	ks = h.schedule(tenantAt("s", "a", next.Add(100*time.Millisecond)), tenantAt("s", "b", next.Add(200*time.Millisecond)))
	if d := h.next(10 * time.Second); d.key != ks[1] {
		t.Fatalf("delivered %v, want tenant b's %v (tenant a's %v waits for a's flight)", d.key, ks[1], ks[0])
	}
	if n := h.d.Stats().InFlight; n != 2 {
		t.Fatalf("%d in flight, want a's first and b's second", n)
	}
}

// TestDispatcher_GroupHeld_NotReadAgainForItsOwnEntries checks that a
// subject waiting for its tenant's room costs nothing as the due index
// is read past the entries of the messages its scan found full: with
// tenant a at its bound of 1 and 20 of its messages due on each of 10
// subjects (committed while the loop was held, so each subject's one scan
// reads all of them), and a frontier that reads a few entries a pass,
// each subject is read once, and once more only for a message of another
// tenant (b) that comes due on it; that message, and one of a third
// tenant on a subject of its own, go out. Each entry used to wake its subject, read through its
// backlog again: a tenant with 100,000 due then held back another's
// first delivery for as many passes, each reading the whole backlog.
func TestDispatcher_GroupHeld_NotReadAgainForItsOwnEntries(t *testing.T) {
	const subjects, each = 10, 20
	hp := &holdingPublisher{subject: "hold", entered: make(chan struct{}), release: make(chan struct{})}
	h, st := newCountingWrappedHarness(t, func(fp *fakePublisher) dispatch.Publisher {
		hp.fakePublisher = fp
		return hp
	}, func(c *dispatch.Config) { c.PassLimit = 4 })
	t.Cleanup(hp.releaseHeld) // before the harness's: Close waits for the pass
	setLimits(t, h, delaystore.Limit{Pattern: ">", KeyHeader: "Tenant", MaxInFlight: 1})

	// Due before tenant a's, so that the due index is read past a's
	// entries after the loop is let go.
	h.schedule(msgAt("hold", time.Now().Add(-2*time.Second)))
	<-hp.entered
	past := time.Now().Add(-time.Second)
	var msgs []*delaystore.StoredMessage
	for i := range subjects * each {
		msgs = append(msgs, tenantAt(fmt.Sprintf("t.%d", i%subjects), "a", past.Add(time.Duration(i)*time.Microsecond)))
	}
	h.schedule(msgs...)
	hp.releaseHeld()
	// Tenants b's and c's, due after every entry of tenant a's: the due
	// index brings them, once it has read past all of a's.
	soon := time.Now().Add(200 * time.Millisecond)
	want := map[keys.Key]bool{}
	for _, k := range h.schedule(tenantAt("c.own", "c", soon), tenantAt("t.0", "b", soon)) {
		want[k] = true
	}
	got := map[string]int{}
	for len(want) > 0 {
		d := h.next(10 * time.Second)
		got[d.subject]++
		delete(want, d.key)
	}
	if n := got["hold"] + got["c.own"] + got["t.0"]; n < 3 || n > 4 || len(got) > 4 {
		t.Fatalf("delivered %v, want hold, c.own and t.0 once each, and one of tenant a's", got)
	}
	for i := range subjects {
		subject := fmt.Sprintf("t.%d", i)
		want := 1
		if i == 0 {
			want = 2 // for tenant b's message
		}
		if n := st.scansOf(subject); n != want {
			t.Errorf("%s read %d times, want %d", subject, n, want)
		}
	}
}

// heldForTenantA bounds each tenant to one message in flight, schedules
// backlog messages of tenant a on s, due a millisecond apart from past
// on, and waits until the first is delivered and s is held for a's room.
// It returns their keys and past.
func heldForTenantA(t *testing.T, h *harness, backlog int) ([]keys.Key, time.Time) {
	t.Helper()
	setLimits(t, h, delaystore.Limit{Pattern: ">", KeyHeader: "Tenant", MaxInFlight: 1})
	past := time.Now().Add(-time.Second)
	var msgs []*delaystore.StoredMessage
	for i := range backlog {
		msgs = append(msgs, tenantAt("s", "a", past.Add(time.Duration(i)*time.Millisecond)))
	}
	ks := h.schedule(msgs...)
	if d := h.next(10 * time.Second); d.key != ks[0] {
		t.Fatalf("delivered %v, want tenant a's first %v", d.key, ks[0])
	}
	waitLimited(t, h.d, 1)
	return ks, past
}

// TestDispatcher_GroupHeld_ArrivalReadsOnlyWhatIsNew checks that a
// subject waiting for its tenant's room, woken by messages committed
// after its scan, reads only those, not its backlog again: with tenant a
// at its bound of 1 and 50 of its messages on s, one more of a's and one
// of tenant b's read a few messages, and b's goes out; the subject's
// cursor stays at a's first message left, so a's room then brings a's
// next message in fire order.
func TestDispatcher_GroupHeld_ArrivalReadsOnlyWhatIsNew(t *testing.T) {
	const backlog = 50
	h, st := newCountingHarness(t, nil)
	ks, _ := heldForTenantA(t, h, backlog)
	reads := st.readsOf("s")

	h.schedule(tenantAt("s", "a", time.Now()))
	b := h.schedule(tenantAt("s", "b", time.Now()))[0]
	if d := h.next(10 * time.Second); d.key != b {
		t.Fatalf("delivered %v, want tenant b's %v", d.key, b)
	}
	if n := st.readsOf("s") - reads; n > 4 {
		t.Fatalf("the held subject read %d messages for 2 new ones, want its backlog of %d left alone", n, backlog-1)
	}
	if err := h.ack(ks[0], dispatch.Ack{Kind: dispatch.AckDone}); err != nil {
		t.Fatal(err)
	}
	if d := h.next(10 * time.Second); d.key != ks[1] {
		t.Fatalf("delivered %v after tenant a's room, want its next %v", d.key, ks[1])
	}
}

// TestDispatcher_GroupHeld_TwoFullTenants_ArrivalReadsBoth checks that a
// subject whose scan found two tenants full, and waits for the first,
// reads both again when a message arrives on it: the second, which has
// room again by an ACK on another subject, then goes out.
func TestDispatcher_GroupHeld_TwoFullTenants_ArrivalReadsBoth(t *testing.T) {
	h := newHarness(t, 0, func(c *dispatch.Config) { c.AckWait = time.Hour })
	setLimits(t, h, delaystore.Limit{Pattern: ">", KeyHeader: "Tenant", MaxInFlight: 1})
	now := time.Now()
	c0 := h.schedule(tenantAt("o.c", "c", now))[0]
	if d := h.next(10 * time.Second); d.key != c0 {
		t.Fatalf("delivered %v, want tenant c's %v", d.key, c0)
	}
	a0 := h.schedule(tenantAt("o.a", "a", now))[0]
	if d := h.next(10 * time.Second); d.key != a0 {
		t.Fatalf("delivered %v, want tenant a's %v", d.key, a0)
	}
	ks := h.schedule(tenantAt("s", "a", now), tenantAt("s", "c", now))
	waitLimited(t, h.d, 1) // s waits for tenant a, the first it found full
	if err := h.ack(c0, dispatch.Ack{Kind: dispatch.AckDone}); err != nil {
		t.Fatal(err)
	}
	h.schedule(tenantAt("s", "a", now))
	if d := h.next(10 * time.Second); d.key != ks[1] {
		t.Fatalf("delivered %v, want tenant c's %v on s", d.key, ks[1])
	}
}

// TestDispatcher_GroupHeld_CommittedInsideWhatItRead_NotYetTold_NotOvertaken
// checks per-subject order within a tenant for a subject held for
// another tenant's room: with tenant a at its bound of 1 and its backlog
// on s read and left behind the cursor, a message of tenant b's is
// committed among a's backlog and not yet told of when a newer message of
// b's wakes s. The scan that follows starts at the older one, not where
// the scan before read to, so b's older message goes first.
func TestDispatcher_GroupHeld_CommittedInsideWhatItRead_NotYetTold_NotOvertaken(t *testing.T) {
	const backlog = 20
	h := newHarness(t, 0, nil)
	ks, past := heldForTenantA(t, h, backlog)

	in := []delaystore.Once{{Msg: tenantAt("s", "b", past.Add(backlog/2*time.Millisecond+time.Millisecond/2))}}
	epoch, storing, done := h.d.IngestingKeys(in[0].Msg.FireAtNs)
	res, err := h.repo.ScheduleOnceNoted(in, 0, time.Now().UnixNano(), delaystore.Sync, storing)
	if err != nil {
		t.Fatal(err)
	}
	older := res[0].Key
	if bytes.Compare(older[:], ks[1][:]) <= 0 || bytes.Compare(older[:], ks[backlog-1][:]) >= 0 {
		t.Fatalf("b's older key %v, want it among a's backlog left (%v to %v)", older, ks[1], ks[backlog-1])
	}
	newer := h.schedule(tenantAt("s", "b", time.Now()))[0]
	d := h.next(10 * time.Second)
	h.d.NotifyMessage(res[0].Scheduled, res[0].FireAtNs, in[0].Msg, epoch)
	done()
	if d.key != older {
		t.Fatalf("delivered %v first, want tenant b's older %v before its newer %v", d.key, older, newer)
	}
}
