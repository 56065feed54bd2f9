package integration_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge/wire"
)

// TestRecurring_Burst_StagedEachOnceInOrderNeverEarly runs 300 schedules
// every second, all on the same whole seconds, so that each second is a
// burst the dispatcher stages (its passes read before the second, and
// published at it). Guarantees checked through a real server and the
// service: every occurrence delivered, each once, in order per subject,
// none before its planned time; and the bursts were staged (INFO's
// staged_passes), so those guarantees are the staged passes'.
func TestRecurring_Burst_StagedEachOnceInOrderNeverEarly(t *testing.T) {
	t.Parallel()
	const schedules, occurrences = 300, 5
	h := newHarness(t, nil)
	got := subscribe(t, h.nc, "burst.>")
	first := time.Now().Truncate(time.Second).Add(2 * time.Second)
	msgs := make([]*nats.Msg, schedules)
	for i := range msgs {
		msgs[i] = newMsg(fmt.Sprintf("burst.%d", i), "tick", "Delay-At", first.Format(time.RFC3339Nano), "Delay-Every", "1s",
			"Delay-Limit", fmt.Sprint(occurrences), "Delay-Id", "b",
			// NB: all, so that a loaded machine delivering late cannot
			// skip a planned time and the times can be checked exactly.
			"Delay-Catch-Up", "all")
	}
	scheduleMany(t, h.nc, msgs)

	seen := map[string]int{} // subject -> occurrences seen
	tags := map[string]bool{}
	for range schedules * occurrences {
		r := next(t, got, "an occurrence of the bursts")
		subj := r.Subject
		i := seen[subj]
		occ := occurrenceOf(t, r)
		if want := first.Add(time.Duration(i) * time.Second); !occ.Equal(want) {
			t.Fatalf("%s: occurrence %d planned at %v, want %v: out of order, missed or twice", subj, i+1, occ, want)
		}
		notEarly(t, r, occ)
		tag := r.Header.Get(wire.HeaderTag)
		if tags[tag] {
			t.Fatalf("%s: tag %s delivered twice", subj, tag)
		}
		tags[tag] = true
		seen[subj] = i + 1
		if err := r.Respond(nil); err != nil {
			t.Fatalf("ack: %v", err)
		}
	}
	for i := range schedules {
		subj := fmt.Sprintf("burst.%d", i)
		if seen[subj] != occurrences {
			t.Fatalf("%s: %d occurrences, want %d", subj, seen[subj], occurrences)
		}
	}
	if n := info(t, h.nc).Stats.StagedPasses; n == 0 {
		t.Fatalf("INFO: staged_passes 0 after %d bursts of %d occurrences: none was staged", occurrences, schedules)
	}
}
