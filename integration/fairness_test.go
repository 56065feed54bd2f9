package integration_test

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"natsdelay/bridge"
	"natsdelay/bridge/wire"
	"natsdelay/dispatch"
)

// fairnessSize is the in-flight window and the unanswered messages of the
// silent subject in the fairness test: the default window with more than
// it unanswered under NATSDELAY_SOAK=1 (make soak), and a small window,
// still overrun by the silent subject, in make test.
func fairnessSize() (window, silent int) {
	if os.Getenv("NATSDELAY_SOAK") != "" {
		return dispatch.DefaultConfig().MaxInFlight, 70_000
	}
	return 2048, 3000
}

// TestWindow_SilentSubject_DoesNotStarveOthers checks fairness by default:
// one subject whose consumer never answers, with more messages due than
// the whole in-flight window holds, cannot delay another subject. Its
// deliveries stay within its own in-flight limit (an eighth of the
// window by default) and are redelivered every ack wait on their own,
// while each of the healthy subject's 100 messages, due once the silent
// one has filled its share, is delivered within a second of its fire time.
func TestWindow_SilentSubject_DoesNotStarveOthers(t *testing.T) {
	t.Parallel()
	window, silent := fairnessSize()
	limit := window / 8 // the default per-subject limit
	h := newHarness(t, func(c *bridge.Config) { c.Delivery.MaxInFlight = window; c.Delivery.AckWait = 5 * time.Second })

	var unanswered atomic.Int64
	sub, err := h.nc.Subscribe("fair.silent", func(*nats.Msg) { unanswered.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	_ = sub.SetPendingLimits(-1, -1)
	healthy := subscribe(t, h.nc, "fair.healthy")

	for sent := 0; sent < silent; sent += 10_000 {
		msgs := make([]*nats.Msg, min(10_000, silent-sent))
		for i := range msgs {
			msgs[i] = newMsg("fair.silent", strconv.Itoa(sent+i))
		}
		scheduleMany(t, h.nc, msgs)
	}
	checkFor(t, wait, 10*time.Millisecond, func() error {
		if n := unanswered.Load(); n < int64(limit) {
			return fmt.Errorf("%d deliveries to the silent subject, want its limit %d first", n, limit)
		}
		return nil
	})

	const n = 100
	due := time.Now().Add(500 * time.Millisecond)
	msgs := make([]*nats.Msg, n)
	for i := range msgs {
		msgs[i] = newMsg("fair.healthy", strconv.Itoa(i), wire.HeaderAt, due.UTC().Format(time.RFC3339Nano))
	}
	scheduleMany(t, h.nc, msgs)
	for i := range n {
		r := next(t, healthy, fmt.Sprintf("healthy delivery %d of %d (stats %+v)", i+1, n, h.svc.Stats()))
		fireAt := parseTime(t, r.Header.Get(wire.HeaderFireAt))
		if late := r.at.Sub(fireAt); late > time.Second {
			t.Fatalf("healthy delivery %d arrived %v after its fire time, want within 1s (stats %+v)", i+1, late, h.svc.Stats())
		}
		if string(r.Data) != strconv.Itoa(i) {
			t.Fatalf("healthy delivery %d is %q, want %q: out of fire order", i+1, r.Data, strconv.Itoa(i))
		}
		if err := r.Respond([]byte(wire.AnswerAck)); err != nil {
			t.Fatal(err)
		}
	}
	// Once the healthy ACKs are applied, only the silent subject's share
	// is in flight, and it is shown as limited, by name.
	checkFor(t, wait, 10*time.Millisecond, func() error {
		if st := h.svc.Stats(); st.InFlight != uint64(limit) || st.Limited != 1 {
			return fmt.Errorf("%d in flight and %d subjects limited, want the silent subject's %d and 1", st.InFlight, st.Limited, limit)
		}
		return nil
	})
	var subjects wire.SubjectsReply
	apiCall(t, h.nc, wire.VerbSubjects, wire.SubjectsRequest{Filter: "fair.>"}, &subjects)
	want := []wire.SubjectInfo{{Subject: "fair.silent", Pending: uint64(silent), DueNow: uint64(silent), InFlight: limit, Limited: true}}
	if !slices.Equal(subjects.Subjects, want) {
		t.Fatalf("SUBJECTS fair.> = %+v, want %+v", subjects.Subjects, want)
	}
	if in := info(t, h.nc); !slices.Equal(in.LimitedSubjects, []string{"fair.silent"}) || in.Stats.Limited != 1 {
		t.Fatalf("INFO limited_subjects %v, subjects_limited %d: want fair.silent, 1", in.LimitedSubjects, in.Stats.Limited)
	}
}
