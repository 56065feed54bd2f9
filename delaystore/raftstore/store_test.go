package raftstore

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/delaystore/storetest"
)

// The replicated Store keeps the delaystore.Store contract, on a
// one-node cluster.
func TestStore_Contract(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) delaystore.Store {
		cfg := testConfig()
		// One node elects itself after one heartbeat timeout.
		cfg.HeartbeatTimeout = 10 * time.Millisecond
		cfg.ElectionTimeout = 10 * time.Millisecond
		cfg.LeaderLeaseTimeout = 10 * time.Millisecond
		c := startCluster(t, 1, engineCrashable, cfg)
		s := c.waitLeader().node.Store()
		t.Cleanup(func() { s.Close() })
		return s
	})
}

// Closing one Store handle leaves the node and other handles working, as
// the service needs when it stops and starts serving.
func TestStore_Close_OnlyThatHandle(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 1, enginePebble, testConfig())
	n := c.waitLeader().node
	first := n.Store()
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	if err := commitPairs(first, "k", "v"); !errors.Is(err, delaystore.ErrClosed) {
		t.Fatalf("commit on a closed handle: %v, want ErrClosed", err)
	}
	if err := commitPairs(n.Store(), "k", "v"); err != nil {
		t.Fatalf("commit on a new handle: %v", err)
	}
}

// An entry decodes to the operations encoded, in order; a damaged entry
// is refused, never applied in part.
func TestCommand_RoundTripAndCorrupt(t *testing.T) {
	t.Parallel()
	cmd := newCommand()
	for _, op := range []struct {
		set        bool
		key, value string
	}{{true, "a", "1"}, {false, "b", ""}, {true, "c", ""}, {true, "a", "2"}} {
		var err error
		if op.set {
			err = cmd.set([]byte(op.key), []byte(op.value))
		} else {
			err = cmd.delete([]byte(op.key))
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := cmd.set(nil, []byte("x")); err == nil {
		t.Fatal("empty key accepted")
	}
	if err := cmd.set(make([]byte, MaxKeySize+1), nil); err == nil {
		t.Fatal("key above MaxKeySize accepted")
	}
	entry := cmd.bytes()
	var got recorder
	if err := applyCommand(entry, &got); err != nil {
		t.Fatal(err)
	}
	if want := "set a=1;del b;set c=;set a=2;"; got.String() != want {
		t.Fatalf("decoded %q, want %q", got.String(), want)
	}
	for cut := range len(entry) {
		var r recorder
		if err := applyCommand(entry[:cut], &r); !errors.Is(err, errCorruptEntry) {
			t.Fatalf("entry cut at %d: %v, want errCorruptEntry", cut, err)
		}
	}
	bad := bytes.Clone(entry)
	bad[0] = 9
	if err := applyCommand(bad, &recorder{}); !errors.Is(err, errCorruptEntry) {
		t.Fatalf("unknown version: %v", err)
	}
	long := append(bytes.Clone(entry), 0)
	if err := applyCommand(long, &recorder{}); !errors.Is(err, errCorruptEntry) {
		t.Fatalf("trailing byte: %v", err)
	}
}

// recorder is a delaystore.Batch that records what it is given.
type recorder struct{ bytes.Buffer }

func (r *recorder) Set(k, v []byte) error {
	r.WriteString("set " + string(k) + "=" + string(v) + ";")
	return nil
}
func (r *recorder) Delete(k []byte) error            { r.WriteString("del " + string(k) + ";"); return nil }
func (r *recorder) SingleDelete(k []byte) error      { r.WriteString("sdel " + string(k) + ";"); return nil }
func (r *recorder) Len() int                         { return 0 }
func (r *recorder) Commit(delaystore.SyncMode) error { return nil }
func (r *recorder) Close() error                     { return nil }

// A single delete is replicated as a plain delete: a restart replays
// entries over a local store that may hold them, which can set a key twice
// on a node (see batch.SingleDelete).
func TestBatch_SingleDelete_ReplicatedAsDelete(t *testing.T) {
	t.Parallel()
	b := &batch{cmd: newCommand()}
	if err := b.Set([]byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := b.SingleDelete([]byte("k")); err != nil {
		t.Fatal(err)
	}
	var got recorder
	if err := applyCommand(b.cmd.bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if want := "set k=v;del k;"; got.String() != want {
		t.Fatalf("decoded %q, want %q", got.String(), want)
	}
}
