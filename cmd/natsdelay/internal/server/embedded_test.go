package server

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
)

// TestStartEmbedded_JetStream checks that --nats-jetstream gives the
// embedded nats-server JetStream, its streams kept in the directory given,
// so that a delayed message can be delivered into a stream with nothing
// but natsdelay running; and that without it the server has none.
func TestStartEmbedded_JetStream(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, dir := range []string{"", filepath.Join(t.TempDir(), "jetstream")} {
		srv, err := startEmbedded("127.0.0.1:0", log, EmbeddedCluster{}, dir)
		if err != nil {
			t.Fatal(err)
		}
		enabled := srv.JetStreamEnabled()
		shutdownEmbedded(srv, log)
		if enabled != (dir != "") {
			t.Fatalf("JetStream dir %q: enabled %v", dir, enabled)
		}
		if dir == "" {
			continue
		}
		if _, err := os.Stat(dir); err != nil {
			t.Fatalf("JetStream keeps nothing in %s: %v", dir, err)
		}
	}
}
