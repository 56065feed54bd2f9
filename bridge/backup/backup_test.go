package backup_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/test"
	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge/backup"
	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/delaystore/engine"
	"github.com/natsdelay/natsdelay/delaystore/pebblestore"
	"github.com/natsdelay/natsdelay/delaystore/snapshot"
)

// backupFile writes a backup of a small store holding keys to a file and
// returns its path and bytes.
func backupFile(t *testing.T, keys ...string) (string, []byte) {
	t.Helper()
	st, err := pebblestore.Open(pebblestore.Config{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	b := st.NewBatch()
	for _, k := range keys {
		if err := b.Set([]byte(k), []byte("value of "+k)); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Commit(delaystore.Sync); err != nil {
		t.Fatal(err)
	}
	it, err := st.NewIter(delaystore.IterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	var buf bytes.Buffer
	if _, err := snapshot.Write(&buf, it, 0); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "store.backup")
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, buf.Bytes()
}

func entries(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

// TestRestore_NotEmptyDir_ChangesNothing checks that restore refuses a
// data directory that holds anything, with an error that names it, and
// leaves it as it was.
func TestRestore_NotEmptyDir_ChangesNothing(t *testing.T) {
	path, _ := backupFile(t, "metadata/a-key-longer-than-24-bytes")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "natsdelay.db"), []byte("a store"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := backup.Restore(path, engine.Config{Engine: engine.Bolt, Dir: dir})
	if !errors.Is(err, backup.ErrNotEmpty) {
		t.Fatalf("Restore into a directory with a file: %v, want ErrNotEmpty", err)
	}
	if got := entries(t, dir); !slices.Equal(got, []string{"natsdelay.db"}) {
		t.Fatalf("the directory holds %v after a refused restore", got)
	}
	if data, _ := os.ReadFile(filepath.Join(dir, "natsdelay.db")); string(data) != "a store" {
		t.Fatalf("the file there changed: %q", data)
	}
}

// TestRestore_DamagedFile_WritesNothing checks that a backup cut short or
// with a byte changed is refused before anything is written: an absent
// directory stays absent, an empty one empty.
func TestRestore_DamagedFile_WritesNothing(t *testing.T) {
	path, data := backupFile(t, "metadata/one-key-longer-than-24-bytes", "metadata/two-key-longer-than-24-bytes")
	for name, bad := range map[string][]byte{
		"cut":     data[:len(data)-5],
		"flipped": append(append([]byte(nil), data[:20]...), append([]byte{data[20] ^ 1}, data[21:]...)...),
	} {
		t.Run(name, func(t *testing.T) {
			if err := os.WriteFile(path, bad, 0o600); err != nil {
				t.Fatal(err)
			}
			absent := filepath.Join(t.TempDir(), "new")
			if _, err := backup.Restore(path, engine.Config{Engine: engine.Pebble, Dir: absent}); !errors.Is(err, snapshot.ErrCorrupt) {
				t.Fatalf("Restore of a %s backup: %v, want snapshot.ErrCorrupt", name, err)
			}
			if _, err := os.Stat(absent); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("the data directory exists after a refused restore: %v", err)
			}
			empty := t.TempDir()
			if _, err := backup.Restore(path, engine.Config{Engine: engine.Bolt, Dir: empty}); err == nil {
				t.Fatal("Restore of a damaged backup succeeded")
			}
			if got := entries(t, empty); len(got) != 0 {
				t.Fatalf("the empty data directory holds %v after a refused restore", got)
			}
		})
	}
}

// fakeService answers the backup request on nc by sending chunks of data,
// each as a request, and then calling after with the inbox.
func fakeService(t *testing.T, nc *nats.Conn, chunks [][]byte, after func(inbox string)) {
	t.Helper()
	sub, err := nc.Subscribe(wire.DefaultAPIPrefix+"."+wire.VerbBackup, func(m *nats.Msg) {
		for i, c := range chunks {
			msg := nats.NewMsg(m.Reply)
			msg.Header.Set(wire.HeaderBackupSeq, strconv.Itoa(i+1))
			msg.Data = c
			if _, err := nc.RequestMsg(msg, 5*time.Second); err != nil {
				return
			}
		}
		after(m.Reply)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
}

// TestFetch_BrokenStream_LeavesNoFile checks that a stream that stops
// half way, or ends with an error, leaves no file at the path or beside
// it, and a file that was there unchanged.
func TestFetch_BrokenStream_LeavesNoFile(t *testing.T) {
	opts := natsserver.DefaultTestOptions
	opts.Port = -1
	srv := natsserver.RunServer(&opts)
	t.Cleanup(srv.Shutdown)
	_, data := backupFile(t, "metadata/one-key-longer-than-24-bytes", "metadata/two-key-longer-than-24-bytes")
	half := [][]byte{data[:10], data[10:20]}
	for name, after := range map[string]func(nc *nats.Conn) func(string){
		"silent": func(*nats.Conn) func(string) { return func(string) {} },
		"error": func(nc *nats.Conn) func(string) {
			return func(inbox string) {
				m := nats.NewMsg(inbox)
				m.Header.Set(wire.HeaderServiceError, "storage failing")
				m.Header.Set(wire.HeaderServiceErrorCode, "503")
				_ = nc.PublishMsg(m)
			}
		},
		"short end": func(nc *nats.Conn) func(string) {
			return func(inbox string) {
				m := nats.NewMsg(inbox)
				m.Header.Set(wire.HeaderBackupSeq, "3")
				m.Header.Set(wire.HeaderBackupEnd, strconv.Itoa(len(data)))
				m.Header.Set(wire.HeaderBackupRecords, "2")
				_, _ = nc.RequestMsg(m, time.Second)
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			nc, err := nats.Connect(srv.ClientURL())
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			fakeService(t, nc, half, after(nc))
			dir := t.TempDir()
			path := filepath.Join(dir, "kept.backup")
			if err := os.WriteFile(path, []byte("an older backup"), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err = backup.Fetch(context.Background(), nc, path, backup.FetchConfig{
				Subject: wire.DefaultAPIPrefix + "." + wire.VerbBackup, Wait: 300 * time.Millisecond,
			})
			if err == nil {
				t.Fatal("Fetch of a broken stream succeeded")
			}
			if got := entries(t, dir); !slices.Equal(got, []string{"kept.backup"}) {
				t.Fatalf("the directory holds %v after a failed backup (%v)", got, err)
			}
			if kept, _ := os.ReadFile(path); string(kept) != "an older backup" {
				t.Fatalf("the file there changed: %q", kept)
			}
			t.Logf("%s: %v", name, err)
		})
	}
}
