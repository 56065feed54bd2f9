package snapshot_test

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/delaystore/pebblestore"
	"github.com/natsdelay/natsdelay/delaystore/snapshot"
)

// stream writes a store holding n keys as a snapshot stream with applied
// in its header.
func stream(t *testing.T, n int, applied uint64) []byte {
	t.Helper()
	st, err := pebblestore.Open(pebblestore.Config{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	b := st.NewBatch()
	for i := range n {
		if err := b.Set(fmt.Appendf(nil, "key-%04d", i), bytes.Repeat([]byte{byte(i)}, i%300)); err != nil {
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
	if got, err := snapshot.Write(&buf, it, applied); err != nil || got != uint64(n) {
		t.Fatalf("Write: %d records, %v; want %d", got, err, n)
	}
	return buf.Bytes()
}

// readAll reads a stream to its end and returns its keys.
func readAll(data []byte) (keys []string, applied uint64, err error) {
	r, err := snapshot.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, 0, err
	}
	for {
		k, _, ok, err := r.Next()
		if err != nil || !ok {
			return keys, r.Applied(), err
		}
		keys = append(keys, string(k))
	}
}

// TestReader_RoundTrip checks that a stream reads back whole, in key
// order, with the index its header holds.
func TestReader_RoundTrip(t *testing.T) {
	keys, applied, err := readAll(stream(t, 500, 42))
	if err != nil || len(keys) != 500 || applied != 42 || keys[0] != "key-0000" || keys[499] != "key-0499" {
		t.Fatalf("read %d keys (%v...), applied %d, %v; want 500 in order and 42", len(keys), keys[:min(2, len(keys))], applied, err)
	}
}

// TestReader_Damaged_ErrCorrupt checks that every cut of a stream, every
// changed byte and anything after its end is ErrCorrupt: a reader never
// takes a damaged stream for a whole one.
func TestReader_Damaged_ErrCorrupt(t *testing.T) {
	data := stream(t, 20, 7)
	for cut := range len(data) {
		if _, _, err := readAll(data[:cut]); !errors.Is(err, snapshot.ErrCorrupt) {
			t.Fatalf("stream cut at %d of %d: %v, want ErrCorrupt", cut, len(data), err)
		}
	}
	for i := range data {
		bad := bytes.Clone(data)
		bad[i] ^= 0x10
		if _, _, err := readAll(bad); !errors.Is(err, snapshot.ErrCorrupt) {
			t.Fatalf("byte %d of %d changed: %v, want ErrCorrupt", i, len(data), err)
		}
	}
	if _, _, err := readAll(append(bytes.Clone(data), 0)); !errors.Is(err, snapshot.ErrCorrupt) {
		t.Fatalf("a byte after the end: %v, want ErrCorrupt", err)
	}
}
