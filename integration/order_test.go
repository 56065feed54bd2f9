package integration_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// TestOrder_PerSubject checks the order guarantee: per target subject,
// first deliveries go out in (fire time, publish order) order. 200
// messages get random fire times in a 500 ms window, many of them in the
// same millisecond, so both halves of the order are exercised. None may
// arrive before its fire time.
func TestOrder_PerSubject(t *testing.T) {
	t.Parallel()
	const (
		n      = 200
		window = 500 * time.Millisecond
		// margin leaves time to publish everything before the first fire
		// time; a fire time already past at ingest would become "now".
		margin = time.Second
	)
	h := newHarness(t, nil)
	got := subscribe(t, h.nc, "ordered.s")
	base := time.Now().Add(margin).Truncate(time.Millisecond)
	fireAt := make([]time.Time, n)
	msgs := make([]*nats.Msg, n)
	for i := range msgs {
		// Steps of 5 ms put about two messages in each millisecond used.
		fireAt[i] = base.Add(time.Duration(rand.IntN(int(window/(5*time.Millisecond)))) * 5 * time.Millisecond)
		at := fmt.Sprintf("%d.%03d", fireAt[i].Unix(), fireAt[i].Nanosecond()/1e6)
		msgs[i] = newMsg("ordered.s", strconv.Itoa(i), "Delay-At", at)
	}
	reps := scheduleMany(t, h.nc, msgs)
	for i, r := range reps {
		if !r.FireAt.Equal(fireAt[i]) {
			t.Fatalf("message %d: fire_at %s, want %s; publishing took longer than %v", i, r.FireAtRaw, fireAt[i].UTC().Format(time.RFC3339Nano), margin)
		}
	}
	want := make([]int, n)
	for i := range want {
		want[i] = i
	}
	// A stable sort keeps publish order among equal fire times.
	slices.SortStableFunc(want, func(a, b int) int { return fireAt[a].Compare(fireAt[b]) })

	order := make([]int, 0, n)
	for len(order) < n {
		r := next(t, got, fmt.Sprintf("delivery %d of %d", len(order)+1, n))
		i, err := strconv.Atoi(string(r.Data))
		if err != nil {
			t.Fatalf("payload %q", r.Data)
		}
		notEarly(t, r, fireAt[i])
		wantAttempt(t, r.Msg, 1)
		order = append(order, i)
		if err := r.Respond(nil); err != nil {
			t.Fatal(err)
		}
	}
	for k := range want {
		if order[k] != want[k] {
			t.Fatalf("delivery %d is message %d (fire %s), want message %d (fire %s)\ngot  %v\nwant %v",
				k, order[k], fireAt[order[k]].Format("05.000"), want[k], fireAt[want[k]].Format("05.000"), order, want)
		}
	}
	waitPending(t, h.nc, 0)
}
