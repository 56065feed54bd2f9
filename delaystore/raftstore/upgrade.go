package raftstore

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/natsdelay/natsdelay/delaystore/raftstore/internal/raftlog"
)

// upgradeCopyBatch and upgradeCopyBytes bound what the upgrade copies in
// one StoreLogs: entries are up to MaxEntryBytes each.
const (
	upgradeCopyBatch = 256
	upgradeCopyBytes = 16 << 20
)

// writeNodeFile writes nodeFile in dir with rec, in the format that
// versions before logDir refuse.
func writeNodeFile(dir string, rec nodeRecord) error {
	b, err := json.Marshal(nodeFileContent{Note: nodeFileNote, Node: &rec})
	if err != nil {
		return err
	}
	if err := writeFileSync(filepath.Join(dir, nodeFile), b); err != nil {
		return fmt.Errorf("raftstore: record the cluster: %w", err)
	}
	return nil
}

// upgradeLog moves the Raft log of a version before logDir, kept in
// raft.db beside the stable store, to logDir, once. The steps, each
// crash-safe:
//
//  1. copy the entries into logDir's name with ".tmp" (removed first: a
//     copy a crash cut short);
//  2. rewrite nodeFile in the format earlier versions refuse, so that none
//     runs on raft.db's entries, which are from now on out of date;
//  3. rename the copy to logDir and sync Dir: from here on the log is
//     logDir; until here it was raft.db, and a restart copies again;
//  4. delete the entries from raft.db.
//
// A node whose logDir exists runs only step 4, if entries are left.
func upgradeLog(dir string, bolt *raftboltdb.BoltStore, nodeID string, log *slog.Logger) error {
	path := filepath.Join(dir, logDir)
	_, err := os.Stat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if err := copyLog(path, bolt, log); err != nil {
			return err
		}
		st, err := readDirState(dir)
		if err != nil {
			return err
		}
		if st.node == nil {
			return nil // a fresh node; nothing to copy
		}
		if err := writeNodeFile(dir, *st.node); err != nil {
			return err
		}
		if err := os.Rename(path+".tmp", path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("raftstore: upgrade the raft log: %w", err)
		}
		if err := syncDir(dir); err != nil {
			return fmt.Errorf("raftstore: upgrade the raft log: %w", err)
		}
	case err != nil:
		return fmt.Errorf("raftstore: %w", err)
	}
	first, err := bolt.FirstIndex()
	if err != nil {
		return fmt.Errorf("raftstore: read raft.db: %w", err)
	}
	last, err := bolt.LastIndex()
	if err != nil || last == 0 {
		return err
	}
	if err := bolt.DeleteRange(first, last); err != nil {
		return fmt.Errorf("raftstore: delete the raft log copied out of raft.db: %w", err)
	}
	return nil
}

// copyLog copies raft.db's entries to path with ".tmp" and returns once
// the copy is durable; with none, it copies nothing. raft-boltdb's log
// may hold entries below a gap (it is not a MonotonicLogStore, and Raft
// keeps such entries after installing a snapshot); they precede the
// latest snapshot, and only the consecutive entries up to the last are
// copied.
func copyLog(path string, bolt *raftboltdb.BoltStore, log *slog.Logger) error {
	tmp := path + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return fmt.Errorf("raftstore: upgrade the raft log: %w", err)
	}
	first, err := bolt.FirstIndex()
	if err != nil {
		return fmt.Errorf("raftstore: read raft.db: %w", err)
	}
	last, err := bolt.LastIndex()
	if err != nil || last == 0 {
		return err
	}
	var e raft.Log
	from := last
	for from > first {
		if err := bolt.GetLog(from-1, &e); errors.Is(err, raft.ErrLogNotFound) {
			break
		} else if err != nil {
			return fmt.Errorf("raftstore: read raft.db: %w", err)
		}
		from--
	}
	l, err := raftlog.Open(tmp, raftlog.Options{Logger: log})
	if err != nil {
		return fmt.Errorf("raftstore: upgrade the raft log: %w", err)
	}
	for i := from; i <= last; {
		var batch []*raft.Log
		size := 0
		for ; i <= last && len(batch) < upgradeCopyBatch && size < upgradeCopyBytes; i++ {
			e := new(raft.Log)
			if err := bolt.GetLog(i, e); err != nil {
				return errors.Join(fmt.Errorf("raftstore: read entry %d of raft.db: %w", i, err), l.Close())
			}
			batch = append(batch, e)
			size += len(e.Data)
		}
		if err := l.StoreLogs(batch); err != nil {
			return errors.Join(fmt.Errorf("raftstore: upgrade the raft log: %w", err), l.Close())
		}
	}
	if err := l.Close(); err != nil {
		return fmt.Errorf("raftstore: upgrade the raft log: %w", err)
	}
	log.Info("copied the Raft log out of raft.db", "first", from, "last", last)
	return nil
}
