package pebblestore_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"natsdelay/delaystore"
	"natsdelay/delaystore/pebblestore"
)

// walFaults returns an injector, off until turned on, that fails the WAL
// operations in kinds. NB: it leaves the MANIFEST and sstables alone, so
// only the commit path meets the fault.
func walFaults(kinds ...errorfs.OpKind) *errorfs.Toggle {
	return &errorfs.Toggle{Injector: errorfs.InjectorFunc(func(op errorfs.Op) error {
		if strings.HasSuffix(op.Path, ".log") && slices.Contains(kinds, op.Kind) {
			return errorfs.ErrInjected
		}
		return nil
	})}
}

var walFaultKinds = map[string][]errorfs.OpKind{
	"write": {errorfs.OpFileWrite, errorfs.OpFileWriteAt},
	"sync":  {errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo},
}

// Set in the subprocess that TestStore_Commit_WALFault_StopsProcess starts.
const (
	faultDirEnv  = "PEBBLESTORE_TEST_FAULT_DIR"
	faultKindEnv = "PEBBLESTORE_TEST_FAULT_KIND"
)

// A Sync commit whose WAL write or fsync fails never returns: Pebble has
// already applied the batch to its memtable, so it stops the process
// through Fatalf rather than serve a batch it could not log. After a
// restart the data committed before the fault is intact and the failed
// batch is there whole or not at all; not at all when its write failed.
//
// The commit runs in a subprocess, which the fault kills.
func TestStore_Commit_WALFault_StopsProcess(t *testing.T) {
	if dir := os.Getenv(faultDirEnv); dir != "" {
		commitUnderFault(t, dir, os.Getenv(faultKindEnv))
		return
	}
	base := map[string]string{"a": "1", "b": "1", "c": "1"}
	after := map[string]string{"a": "2", "c": "1", "d": "2"}
	for _, kind := range []string{"write", "sync"} {
		t.Run(kind, func(t *testing.T) {
			dir := t.TempDir()
			cmd := exec.Command(os.Args[0], "-test.run=^TestStore_Commit_WALFault_StopsProcess$", "-test.count=1")
			cmd.Env = append(os.Environ(), faultDirEnv+"="+dir, faultKindEnv+"="+kind)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) {
				t.Fatalf("subprocess: %v, want it to exit with an error\n%s", err, out)
			}
			if !bytes.Contains(out, []byte("pebble: fatal commit error")) || bytes.Contains(out, []byte("commit returned")) {
				t.Fatalf("subprocess did not stop in Pebble's fatal commit error:\n%s", out)
			}

			s := open(t, pebblestore.Config{Dir: dir})
			got := contents(t, s)
			switch {
			case equalMaps(got, base):
			case kind == "sync" && equalMaps(got, after):
				t.Logf("the batch whose fsync failed survived the restart, whole")
			default:
				t.Fatalf("after restart the store holds %v, want %v (or, after a failed fsync, %v)", got, base, after)
			}
		})
	}
}

// commitUnderFault is the subprocess: it commits the base state, turns the
// fault on, and commits a batch that should never return.
func commitUnderFault(t *testing.T, dir, kind string) {
	faults := walFaults(walFaultKinds[kind]...)
	s, err := pebblestore.Open(pebblestore.Config{Dir: dir, FS: errorfs.Wrap(vfs.Default, faults)})
	if err != nil {
		t.Fatal(err)
	}
	commit(t, s, delaystore.Sync, "a", "1", "b", "1", "c", "1")
	faults.On()
	b := s.NewBatch()
	_ = b.Set([]byte("a"), []byte("2"))
	_ = b.Delete([]byte("b"))
	_ = b.Set([]byte("d"), []byte("2"))
	err = b.Commit(delaystore.Sync)
	fmt.Printf("commit returned %v\n", err)
}

func contents(t *testing.T, s delaystore.Store) map[string]string {
	t.Helper()
	got := map[string]string{}
	err := s.Scan(delaystore.IterOptions{}, func(k, v []byte) bool {
		got[string(k)] = string(v)
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// commit sets each key and value pair of kvs in one batch.
func commit(t *testing.T, s delaystore.Store, mode delaystore.SyncMode, kvs ...string) {
	t.Helper()
	b := s.NewBatch()
	defer b.Close()
	for i := 0; i+1 < len(kvs); i += 2 {
		if err := b.Set([]byte(kvs[i]), []byte(kvs[i+1])); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Commit(mode); err != nil {
		t.Fatal(err)
	}
}
