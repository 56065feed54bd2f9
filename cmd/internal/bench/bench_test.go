package bench

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRun_Quick runs every phase at tiny sizes end to end. It checks that
// the run completes and that every scheduled message was delivered, never
// how fast: timings on a shared machine prove nothing. The fire runs hold
// recurring schedules too, whose deliveries must not count as the run's.
func TestRun_Quick(t *testing.T) {
	cfg := Quick()
	cfg.FireRecurring = 3
	cfg.Dir = t.TempDir()
	cfg.Logger = slog.New(slog.NewTextHandler(t.Output(), nil))
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Ingest) != 6 {
		t.Errorf("ingest results: got %d, want 6", len(res.Ingest))
	}
	for _, r := range res.Ingest {
		if r.Failed != 0 || r.Msgs != cfg.IngestMsgs {
			t.Errorf("ingest %s %s: %d msgs, %d failed; want %d, 0", r.System, r.Mode, r.Msgs, r.Failed, cfg.IngestMsgs)
		}
	}
	if len(res.Fire) != 2*len(cfg.FireRates) {
		t.Errorf("fire results: got %d, want %d", len(res.Fire), 2*len(cfg.FireRates))
	}
	for _, r := range res.Fire {
		if r.Delivered != r.Scheduled || r.Scheduled != cfg.FireMsgs {
			t.Errorf("fire %s at %v/s: delivered %d of %d, want %d", r.System, r.OfferedRate, r.Delivered, r.Scheduled, cfg.FireMsgs)
		}
	}
	for _, r := range res.EndToEnd {
		if r.Delivered != r.Msgs {
			t.Errorf("end to end %s: delivered %d of %d", r.System, r.Delivered, r.Msgs)
		}
	}
	if s := res.Scale; s == nil {
		t.Error("no scale result")
	} else {
		for name, f := range map[string]FireResult{"none pending": s.DueEmpty, "pending": s.DuePending} {
			if f.Delivered != cfg.ScaleDue {
				t.Errorf("scale due set with %s: delivered %d of %d", name, f.Delivered, cfg.ScaleDue)
			}
		}
		if s.DiskBytes <= 0 {
			t.Errorf("scale disk bytes %d, want > 0", s.DiskBytes)
		}
	}
	if x := res.Expiry; x == nil {
		t.Error("no expiry result")
	} else if x.Pending != cfg.ScalePending {
		t.Errorf("expiry: %d pending beside the expired, want %d", x.Pending, cfg.ScalePending)
	}
	if w := res.Waves; w == nil || len(w.Waves) != cfg.Waves {
		t.Errorf("waves: got %+v, want %d waves", w, cfg.Waves)
	}
	// NB: lateness, and so missed occurrences, depend on the machine; what
	// cannot happen on any is an early or doubled occurrence of natsdelay.
	if rr := res.Recurring; rr == nil || len(rr.Systems) != 2 || rr.Idle == nil {
		t.Errorf("recurring: got %+v, want both systems and the idle run", rr)
	} else {
		for _, r := range rr.Systems {
			if r.Planned != cfg.RecurSchedules*int(cfg.RecurDuration/cfg.RecurEvery) || r.Delivered == 0 {
				t.Errorf("recurring %s: %d planned, %d delivered", r.System, r.Planned, r.Delivered)
			}
		}
		if d := rr.Systems[0]; d.System != SystemDelay || d.Early != 0 || d.Doubled != 0 || d.OffPlan != 0 {
			t.Errorf("recurring natsdelay: %+v, want no early, doubled or off-plan occurrence", d)
		}
		if rr.Idle.PendingAfterRestart != uint64(cfg.RecurIdle) {
			t.Errorf("recurring idle: %d pending after the restart, want %d", rr.Idle.PendingAfterRestart, cfg.RecurIdle)
		}
	}
	// The table states JetStream's durability from what the embedded
	// server reports, which the run left at its default.
	if s := res.JetStreamSync; s == nil || s.Always || s.Interval == "" {
		t.Errorf("JetStream sync: got %+v, want the default interval", s)
	}

	var table strings.Builder
	if err := WriteTable(&table, res); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"ingest", "fire", "end to end", "scale", "expiry", "waves", "recurring:", "recurring idle"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table has no %q section:\n%s", want, table.String())
		}
	}
	t.Log("\n" + table.String())
	out := t.TempDir()
	jsonOut, pngOut := filepath.Join(out, "bench.json"), filepath.Join(out, "bench.png")
	if err := WriteJSON(jsonOut, res); err != nil {
		t.Fatal(err)
	}
	if err := WritePNG(pngOut, res); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(jsonOut)
	if err != nil {
		t.Fatal(err)
	}
	var back Results
	if err := json.Unmarshal(b, &back); err != nil || len(back.Fire) != len(res.Fire) {
		t.Errorf("JSON does not read back: %v, %d fire results", err, len(back.Fire))
	}
	if png, err := os.ReadFile(pngOut); err != nil || !strings.HasPrefix(string(png), "\x89PNG") {
		t.Errorf("PNG not written: %v", err)
	}
}
