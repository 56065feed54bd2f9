package bench

import (
	"context"
	"log/slog"
	"strings"
	"testing"
)

// TestRun_Events_Quick runs the events phase at tiny sizes: every message
// is delivered in each run, with events off and on, and with them on the
// service tells three events per message (scheduled, delivered, acked),
// each published to the tail or counted as dropped. It never checks how
// fast: timings on a shared machine prove nothing.
func TestRun_Events_Quick(t *testing.T) {
	cfg := Quick()
	cfg.EventsRounds = 2
	cfg.Phases = []string{PhaseEvents}
	cfg.Dir = t.TempDir()
	cfg.Logger = slog.New(slog.NewTextHandler(t.Output(), nil))
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	er := res.Events
	if er == nil || len(er.Off) != 2 || len(er.On) != 2 {
		t.Fatalf("events result %+v: want 2 runs off and 2 on", er)
	}
	for _, r := range append(er.Off, er.On...) {
		if r.Delivered != r.Msgs || r.Msgs != cfg.EndToEndMsgs {
			t.Errorf("%s: delivered %d of %d", r.System, r.Delivered, r.Msgs)
		}
	}
	for i := range er.On {
		if got := er.Published[i] + er.Dropped[i]; got != int64(3*cfg.EndToEndMsgs) || er.Received[i] != er.Published[i] {
			t.Errorf("run %d: published %d, dropped %d, received %d; want 3 per msg of %d told, each published one received",
				i, er.Published[i], er.Dropped[i], er.Received[i], cfg.EndToEndMsgs)
		}
	}
	var b strings.Builder
	if err := WriteTable(&b, res); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "events per msg: published") {
		t.Errorf("the table has no events rows:\n%s", b.String())
	}
}

// TestEventStats reads the events counters of serve's /metrics, the
// dropped ones summed over their reasons.
func TestEventStats(t *testing.T) {
	exp := strings.Join([]string{
		"# TYPE natsdelay_events_published_total counter",
		"natsdelay_events_published_total 2997",
		`natsdelay_events_dropped_total{reason="failed"} 1`,
		`natsdelay_events_dropped_total{reason="fenced"} 0`,
		`natsdelay_events_dropped_total{reason="full"} 2`,
	}, "\n")
	if p, d := eventStats([]byte(exp)); p != 2997 || d != 3 {
		t.Errorf("eventStats = %d, %d; want 2997, 3", p, d)
	}
	if p, d := eventStats([]byte("natsdelay_messages_pending 3\n")); p != -1 || d != -1 {
		t.Errorf("eventStats without them = %d, %d; want -1, -1", p, d)
	}
}
