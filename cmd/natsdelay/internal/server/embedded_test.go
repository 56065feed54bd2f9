package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
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

// levelCounter is a slog handler that counts the records at each level
// whose message contains sub, and passes them all on to next.
type levelCounter struct {
	sub  string
	next slog.Handler
	mu   *sync.Mutex
	n    map[slog.Level]int
}

func (h levelCounter) Enabled(context.Context, slog.Level) bool { return true }

func (h levelCounter) Handle(ctx context.Context, r slog.Record) error {
	if strings.Contains(r.Message, h.sub) {
		h.mu.Lock()
		h.n[r.Level]++
		h.mu.Unlock()
	}
	return h.next.Handle(ctx, r)
}

func (h levelCounter) WithAttrs(as []slog.Attr) slog.Handler {
	h.next = h.next.WithAttrs(as)
	return h
}

func (h levelCounter) WithGroup(name string) slog.Handler {
	h.next = h.next.WithGroup(name)
	return h
}

func (h levelCounter) count(l slog.Level) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n[l]
}

// TestStartEmbedded_DeadRoutePeer_WarnedBounded routes two embedded
// servers to each other, stops one, and watches the other's logs for a
// few of its route retries (one a second): the dead peer is a warning,
// once for each of the two routes the server knows it by (the one
// configured and the one it learned), not an ERROR per retry; and so is
// a peer not started yet.
func TestStartEmbedded_DeadRoutePeer_WarnedBounded(t *testing.T) {
	addrs := make([]string, 2)
	for i := range addrs {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addrs[i] = ln.Addr().String()
		ln.Close()
	}
	routes := []string{"nats://" + addrs[0], "nats://" + addrs[1]}
	counter := levelCounter{sub: "route", next: slog.NewTextHandler(t.Output(), nil), mu: &sync.Mutex{}, n: map[slog.Level]int{}}
	var srvs []*server.Server
	for i, addr := range addrs {
		log := slog.New(slog.NewTextHandler(io.Discard, nil))
		if i == 0 {
			log = slog.New(counter)
		}
		srv, err := startEmbedded("127.0.0.1:0", log, EmbeddedCluster{Name: "c", Listen: addr, Routes: routes, ServerName: fmt.Sprint("s", i)}, "")
		if err != nil {
			t.Fatal(err)
		}
		defer shutdownEmbedded(srv, log)
		srvs = append(srvs, srv)
	}
	deadline := time.Now().Add(10 * time.Second)
	for srvs[0].NumRoutes() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the servers did not route to each other within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if e := counter.count(slog.LevelError); e > 0 {
		t.Fatalf("a route peer not started yet logged %d ERROR lines; want warnings", e)
	}
	warned := counter.count(slog.LevelWarn)
	srvs[1].Shutdown()
	// The observation window: about three retries of the route.
	time.Sleep(3500 * time.Millisecond)
	if e, w := counter.count(slog.LevelError), counter.count(slog.LevelWarn)-warned; e > 0 || w > 2 {
		t.Fatalf("a dead route peer logged %d ERROR and %d WARN lines about its route in 3.5s; want no ERROR and at most two WARN", e, w)
	}
}
