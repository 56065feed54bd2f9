package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge/backup"
	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/delaystore/boltstore"
	dsengine "github.com/natsdelay/natsdelay/delaystore/engine"
	"github.com/natsdelay/natsdelay/delaystore/pebblestore"
	"github.com/natsdelay/natsdelay/keys"
)

// loadPublishers schedule messages far in the future on subject, as
// requests, until stopped, and keep the keys of those acknowledged.
type loadPublishers struct {
	wg   sync.WaitGroup
	stop chan struct{}
	mu   sync.Mutex
	// acked holds the keys acknowledged so far, in order of their replies.
	acked []keys.Key
	err   error
}

func startLoad(t *testing.T, nc *nats.Conn, subject string, n int) *loadPublishers {
	l := &loadPublishers{stop: make(chan struct{})}
	for p := range n {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for i := 0; ; i++ {
				select {
				case <-l.stop:
					return
				default:
				}
				k, err := scheduleKey(nc, newMsg(subject, fmt.Sprintf("%d-%d", p, i), wire.HeaderDelay, "1h"))
				l.mu.Lock()
				if err != nil {
					l.err = err
					l.mu.Unlock()
					return
				}
				l.acked = append(l.acked, k)
				l.mu.Unlock()
			}
		}()
	}
	t.Cleanup(l.close)
	return l
}

// scheduleKey schedules m and returns its key, or the error: it may run
// outside the test's goroutine.
func scheduleKey(nc *nats.Conn, m *nats.Msg) (keys.Key, error) {
	rep, err := nc.RequestMsg(m, wait)
	if err != nil {
		return keys.Key{}, err
	}
	if err := wire.ParseError(rep.Header, rep.Data); err != nil {
		return keys.Key{}, err
	}
	var s scheduled
	if err := json.Unmarshal(rep.Data, &s); err != nil {
		return keys.Key{}, err
	}
	return keys.ParseTag(s.Tag)
}

// ackedSoFar is a copy of the keys acknowledged until now.
func (l *loadPublishers) ackedSoFar() []keys.Key {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]keys.Key(nil), l.acked...)
}

// close stops the publishers and waits for them; a second call is harmless.
func (l *loadPublishers) close() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
}

// TestBackup_UnderLoad_RestoreDeliversEverythingAcknowledged checks a
// backup taken while publishers keep publishing: every message
// acknowledged before the backup began is in the store restored from it
// (into the other engine: one format for both), the restored store passes
// the store's consistency check, and a service started on it delivers
// what is due, none of it early. NATSDELAY_SOAK=1 (make soak) backs up
// a store of some 50,000 messages, in chunks of the default size.
func TestBackup_UnderLoad_RestoreDeliversEverythingAcknowledged(t *testing.T) {
	acked, chunk := 200, 4<<10
	if os.Getenv("NATSDELAY_SOAK") != "" {
		acked, chunk = 50_000, 0
	}
	srv := startServer(t)
	st := openPebble(t, pebblestore.Config{Dir: t.TempDir()})
	startService(t, srv, st, nil)
	nc := connect(t, srv)

	const soonN = 20
	soonAt := time.Now().Add(3 * time.Second)
	var soon []scheduled
	for i := range soonN {
		soon = append(soon, schedule(t, nc, newMsg("backup.soon", strconv.Itoa(i), wire.HeaderAt, soonAt.Format(time.RFC3339Nano))))
	}
	load := startLoad(t, connect(t, srv), "backup.later", 4)
	waitProgress(t, 10*time.Second, acked, func() int { return len(load.ackedSoFar()) }, "load acknowledged")

	before := load.ackedSoFar()
	file := filepath.Join(t.TempDir(), "natsdelay.backup")
	got, err := backup.Fetch(context.Background(), nc, file, backup.FetchConfig{
		Subject: wire.DefaultAPIPrefix + "." + wire.VerbBackup, ChunkSize: chunk, Wait: wait,
	})
	if err != nil {
		t.Fatalf("Fetch: %v", err)
	}
	during := len(load.ackedSoFar()) - len(before)
	load.close()
	if load.err != nil {
		t.Fatalf("a publisher failed: %v", load.err)
	}
	if got.Messages < 3 {
		t.Fatalf("the backup took %d messages; want several chunks", got.Messages)
	}

	dir := filepath.Join(t.TempDir(), "restored")
	n, err := backup.Restore(file, dsengine.Config{Engine: dsengine.Bolt, Dir: dir})
	if err != nil || n != got.Records {
		t.Fatalf("Restore: %d keys, %v; want the backup's %d", n, err, got.Records)
	}
	restored, err := boltstore.Open(boltstore.Config{Path: filepath.Join(dir, dsengine.BoltFile)})
	if err != nil {
		t.Fatal(err)
	}
	wantKeys(t, restored, append(before, keysOf(soon)...))
	t.Logf("backup of %d keys, %d bytes in %d messages; %d acknowledged before it, %d while it ran",
		got.Records, got.Bytes, got.Messages, len(before), during)

	// The restored store serves: what is due arrives, never early.
	srv2 := startServer(t)
	startService(t, srv2, restored, nil)
	nc2 := connect(t, srv2)
	ch := subscribe(t, nc2, "backup.soon")
	tags := map[string]bool{}
	for len(tags) < soonN {
		r := next(t, ch, "a delivery from the restored store")
		notEarly(t, r, soonAt)
		tags[r.Header.Get(wire.HeaderTag)] = true
		_ = r.Respond(nil)
	}
	if p := pending(t, nc2); p < uint64(len(before)) {
		t.Fatalf("the restored service holds %d pending, want at least the %d acknowledged before the backup", p, len(before))
	}
}

func keysOf(ss []scheduled) []keys.Key {
	out := make([]keys.Key, len(ss))
	for i, s := range ss {
		out[i] = s.Key
	}
	return out
}

// wantKeys fails tb unless st holds a message under each of ks, and
// passes the store's consistency check.
func wantKeys(tb testing.TB, st delaystore.Store, ks []keys.Key) {
	tb.Helper()
	for _, k := range ks {
		if _, err := st.Get(k[:]); err != nil {
			tb.Fatalf("acknowledged message %v not in the restored store: %v", k, err)
		}
	}
	if err := delaystore.CheckStore(st, testLogger(tb)); err != nil {
		tb.Fatalf("the restored store: %v", err)
	}
}

// TestBackup_Cluster_LeaderAnswersWithClusterState checks a backup of a
// cluster of three: only the leader holds the API's subscriptions, so the
// request is answered by it, whatever node the requester's server is
// near, and the backup holds every message the cluster acknowledged.
func TestBackup_Cluster_LeaderAnswersWithClusterState(t *testing.T) {
	srv := startServer(t)
	nodes := startInProcessCluster(t, srv, 3)
	leader := serving(t, nodes)
	nc := connect(t, srv)
	var acked []keys.Key
	for i := range 30 {
		acked = append(acked, scheduleInCluster(t, nc, newMsg("backup.cluster", strconv.Itoa(i), wire.HeaderDelay, "1h")).Key)
	}
	file := filepath.Join(t.TempDir(), "cluster.backup")
	got, err := backup.Fetch(context.Background(), nc, file, backup.FetchConfig{
		Subject: wire.DefaultAPIPrefix + "." + wire.VerbBackup, Wait: wait,
	})
	if err != nil {
		t.Fatalf("Fetch: %v", err)
	}
	dir := filepath.Join(t.TempDir(), "restored")
	if _, err := backup.Restore(file, dsengine.Config{Engine: dsengine.Pebble, Dir: dir}); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	restored := openPebble(t, pebblestore.Config{Dir: filepath.Join(dir, dsengine.PebbleDir)})
	defer restored.Close()
	wantKeys(t, restored, acked)
	if _, err := os.Stat(file); err != nil {
		t.Fatal(err)
	}
	t.Logf("backup of the cluster led by %s: %d keys, %d bytes", leader.id, got.Records, got.Bytes)
}

// TestBackup_Refusals checks the requests BACKUP refuses, with a clear
// error and no stream: a chunk size outside its bounds (400), and a
// second backup while one runs (503; one view of the store at a time).
func TestBackup_Refusals(t *testing.T) {
	h := newHarness(t, nil)
	subject := wire.DefaultAPIPrefix + "." + wire.VerbBackup
	ask := func(body string) (*nats.Subscription, *nats.Msg) {
		t.Helper()
		inbox := nats.NewInbox()
		sub, err := h.nc.SubscribeSync(inbox)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
		if err := h.nc.PublishMsg(&nats.Msg{Subject: subject, Reply: inbox, Data: []byte(body)}); err != nil {
			t.Fatal(err)
		}
		m, err := sub.NextMsg(wait)
		if err != nil {
			t.Fatalf("BACKUP %s: %v", body, err)
		}
		return sub, m
	}
	if _, m := ask(`{"chunk_size":100}`); m.Header.Get(wire.HeaderServiceErrorCode) != "400" {
		t.Fatalf("BACKUP with a chunk of 100 bytes: %v, want a 400", m.Header)
	}
	// The first stream's first chunk stays unacknowledged: it runs.
	first, chunk := ask(`{}`)
	if chunk.Header.Get(wire.HeaderBackupSeq) != "1" {
		t.Fatalf("first BACKUP: %v, want its first chunk", chunk.Header)
	}
	if _, m := ask(`{}`); m.Header.Get(wire.HeaderServiceErrorCode) != "503" {
		t.Fatalf("BACKUP while one runs: %v, want a 503", m.Header)
	}
	// Stopping the first lets the next one run.
	if err := first.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	_ = chunk.Respond(nil)
	checkFor(t, wait, 20*time.Millisecond, func() error {
		_, err := backup.Fetch(context.Background(), h.nc, filepath.Join(t.TempDir(), "b"), backup.FetchConfig{Subject: subject, Wait: wait})
		return err
	})
}
