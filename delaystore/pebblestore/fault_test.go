package pebblestore_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"natsdelay/delaystore"
	"natsdelay/delaystore/pebblestore"
	"natsdelay/delaystore/storetest"
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

// A commit whose WAL write or fsync fails fails the Store instead of the
// process: that commit and every later call return ErrFailed, Close lets
// go of the directory, and a reopen in the same process finds the data
// committed before the fault intact and the failed batch whole or not at
// all (see storetest.RunFaults).
func TestStore_Faults(t *testing.T) {
	for _, kind := range []string{"write", "sync"} {
		t.Run(kind, func(t *testing.T) {
			storetest.RunFaults(t, func(t *testing.T, dir string) (delaystore.Store, func()) {
				faults := walFaults(walFaultKinds[kind]...)
				s := open(t, pebblestore.Config{Dir: dir, FS: errorfs.Wrap(vfs.Default, faults)})
				return s, faults.On
			})
		})
	}
}
