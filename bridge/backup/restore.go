package backup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/delaystore/engine"
)

// Bounds of each batch Restore commits, so that a large backup does not
// build one batch of its whole size.
const (
	restoreBatchOps   = 4096
	restoreBatchBytes = 4 << 20
)

// Restore writes the backup in path into a new store of cfg.Engine (a
// disk engine) in cfg.Dir, which must be absent or empty, and returns the
// number of keys written. It reads the file whole, checksum included,
// before it writes anything; it then writes every key, makes them
// durable, and checks the store with delaystore.CheckStore (its indexes
// agree with its messages). On any error the directory is left as
// it was found: absent or empty. A directory that holds anything gets an
// error wrapping ErrNotEmpty and is not touched.
func Restore(path string, cfg engine.Config) (uint64, error) {
	if cfg.Engine == engine.Memory || cfg.Dir == "" {
		return 0, fmt.Errorf("%w: restore needs a disk engine (%s or %s) and a data directory; got engine %q, directory %q",
			ErrInvalidConfig, engine.Pebble, engine.Bolt, cfg.Engine, cfg.Dir)
	}
	created, err := checkEmpty(cfg.Dir)
	if err != nil {
		return 0, err
	}
	if _, err := readFile(path, nil); err != nil {
		return 0, err
	}
	n, err := restoreInto(path, cfg)
	if err != nil {
		return 0, errors.Join(err, emptyAgain(cfg.Dir, created))
	}
	return n, nil
}

// checkEmpty reports whether dir is absent (Restore creates it), or an
// error unless it is an empty directory.
func checkEmpty(dir string) (absent bool, err error) {
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("backup: data directory: %w", err)
	case len(entries) > 0:
		names := make([]string, 0, 3)
		for _, e := range entries[:min(3, len(entries))] {
			names = append(names, e.Name())
		}
		return false, fmt.Errorf("%w: %s holds %s: restore writes only into an empty or new directory, so that it never mixes a backup with a store", ErrNotEmpty, dir, strings.Join(names, ", "))
	}
	return false, nil
}

// emptyAgain removes what a failed restore wrote: dir itself if it
// created it, else everything in it.
func emptyAgain(dir string, created bool) error {
	if created {
		return os.RemoveAll(dir)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		errs = append(errs, os.RemoveAll(filepath.Join(dir, e.Name())))
	}
	return errors.Join(errs...)
}

// restoreInto opens the store, writes the backup's keys into it, checks
// it and closes it.
func restoreInto(path string, cfg engine.Config) (n uint64, err error) {
	st, err := engine.Open(cfg)
	if err != nil {
		return 0, fmt.Errorf("backup: open the %s store in %s: %w", cfg.Engine, cfg.Dir, err)
	}
	defer func() { err = errors.Join(err, st.Close()) }()
	w := batchWriter{s: st}
	n, err = readFile(path, w.set)
	if err == nil {
		err = w.commit()
	}
	if err == nil {
		err = st.Flush()
	}
	if err != nil {
		w.close()
		return n, fmt.Errorf("backup: write the store: %w", err)
	}
	if err := delaystore.CheckStore(st, cfg.Logger); err != nil {
		return n, fmt.Errorf("backup: the restored store: %w", err)
	}
	return n, nil
}

// batchWriter writes to a store in batches of bounded size.
type batchWriter struct {
	s     delaystore.Store
	b     delaystore.Batch
	bytes int
}

func (w *batchWriter) set(key, value []byte) error {
	if w.b == nil {
		w.b, w.bytes = w.s.NewBatch(), 0
	}
	if err := w.b.Set(key, value); err != nil {
		return err
	}
	w.bytes += len(key) + len(value)
	if w.b.Len() < restoreBatchOps && w.bytes < restoreBatchBytes {
		return nil
	}
	return w.commit()
}

func (w *batchWriter) commit() error {
	if w.b == nil {
		return nil
	}
	err := w.b.Commit(delaystore.NoSync)
	w.close()
	return err
}

func (w *batchWriter) close() {
	if w.b != nil {
		w.b.Close()
		w.b = nil
	}
}
