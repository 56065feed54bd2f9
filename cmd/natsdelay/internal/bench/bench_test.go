package bench

import (
	"context"
	"log/slog"
	"testing"
)

// TestRun_Quick runs every phase at tiny sizes end to end. It checks that
// the run completes and that every scheduled message was delivered, never
// how fast: timings on a shared machine prove nothing.
func TestRun_Quick(t *testing.T) {
	cfg := Quick()
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
}
