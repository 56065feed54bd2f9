package fleet

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/nats-io/nats.go"
)

// recordFile is the name of a cell's record in its data dir.
const recordFile = "fleet.json"

// Record is what a cell keeps of the fleet: its name, the fleet's number of
// partitions, and the partitions it owns since Epoch. It is the cell's
// authority on its own partitions; the fleet's map is the union of every
// cell's record.
type Record struct {
	Cell       string  `json:"cell"`
	Partitions int     `json:"partitions"`
	Epoch      uint64  `json:"epoch"`
	Owned      []Range `json:"owned"`
	// Out is a move of partitions from this cell to another under way:
	// they are frozen here until the move ends (see Move).
	Out *Move `json:"out,omitempty"`
	// In is a move of partitions to this cell under way: what it has
	// received of them is not its own until the move commits.
	In *Move `json:"in,omitempty"`
}

// Move is a move of partitions between two cells, as each end keeps it.
type Move struct {
	Partitions []Range `json:"partitions"`
	// Peer is the cell at the other end.
	Peer string `json:"peer"`
	// Epoch is the epoch at which the target owns the partitions.
	Epoch uint64 `json:"epoch"`
	// Committing, at the source, says the target was asked to commit:
	// it may own them now, so the move can no longer be called off.
	Committing bool `json:"committing,omitempty"`
	// Committed, at the source, says the target owns them: the source
	// drops its copies, then forgets the move.
	Committed bool `json:"committed,omitempty"`
}

// same reports whether m and o move the same partitions at the same epoch.
func (m *Move) same(o *Move) bool {
	return m != nil && o != nil && m.Epoch == o.Epoch && FormatRanges(m.Partitions) == FormatRanges(o.Partitions)
}

// Status is what a serving cell tells the fleet: its record, the node
// that serves it, and, in answers to CELLS, its counts.
type Status struct {
	Record
	// Node names the node that serves the cell: its --node-id in a
	// cluster, else the cell's name.
	Node string `json:"node"`
	// Clustered says the cell is a Raft cluster, whose record its
	// nodes replicate.
	Clustered bool `json:"clustered,omitempty"`
	// Pending and Subjects are the cell's counts, in answers to CELLS.
	Pending  uint64 `json:"pending"`
	Subjects int    `json:"subjects"`
}

// Prepare returns this cell's record: the one its data dir holds, or a
// new one, written there before it is returned. A new cell named in
// cfg.Founders owns its share of Split(cfg.Founders); another asks the
// fleet on nc, for cfg.JoinWait, and joins it owning nothing, or creates
// the fleet owning every partition when no cell answers.
func Prepare(nc *nats.Conn, cfg Config) (Record, error) {
	if err := cfg.Validate(); err != nil {
		return Record{}, err
	}
	cfg = cfg.withDefaults()
	if rec, ok, err := loadRecord(cfg.DataDir); err != nil || ok {
		if err == nil {
			err = cfg.matches(rec)
		}
		return rec, err
	}
	rec, err := newRecord(nc, cfg)
	if err != nil {
		return Record{}, err
	}
	return rec, saveRecord(cfg.DataDir, rec)
}

// matches reports an error when rec, read from the data dir, is not the
// cell cfg describes.
func (c Config) matches(rec Record) error {
	if rec.Cell != c.Cell {
		return fmt.Errorf("%w: the data dir holds cell %q of its fleet, not %q", ErrInvalidConfig, rec.Cell, c.Cell)
	}
	if c.Partitions != 0 && c.Partitions != rec.Partitions {
		return fmt.Errorf("%w: --partitions %d: the fleet was created with %d, which never changes", ErrInvalidConfig, c.Partitions, rec.Partitions)
	}
	return nil
}

func newRecord(nc *nats.Conn, cfg Config) (Record, error) {
	p := cfg.Partitions
	if p == 0 {
		p = DefaultPartitions
	}
	rec := Record{Cell: cfg.Cell, Partitions: p, Epoch: 1}
	if len(cfg.Founders) > 0 {
		rec.Owned = Split(cfg.Founders, p)[cfg.Cell]
		return rec, nil
	}
	found := GatherCells(nc, cfg.JoinWait)
	if len(found) == 0 {
		cfg.Logger.Info("no fleet answered: creating it, this cell owning every partition", "cell", cfg.Cell, "partitions", p)
		rec.Owned = []Range{{From: 0, To: p - 1}}
		return rec, nil
	}
	for _, st := range found {
		if cfg.Partitions != 0 && st.Partitions != cfg.Partitions {
			return Record{}, fmt.Errorf("%w: --partitions %d: the fleet (cell %q) has %d, which never changes", ErrInvalidConfig, cfg.Partitions, st.Cell, st.Partitions)
		}
		if st.Cell == cfg.Cell {
			return Record{}, fmt.Errorf("%w: cell %q already serves in the fleet from another data dir", ErrInvalidConfig, cfg.Cell)
		}
		rec.Partitions = st.Partitions
		rec.Epoch = max(rec.Epoch, st.Epoch)
	}
	cfg.Logger.Info("joining the fleet, owning no partition until some are moved here", "cell", cfg.Cell, "partitions", rec.Partitions, "cells", len(found))
	return rec, nil
}

func loadRecord(dir string) (Record, bool, error) {
	if dir == "" {
		return Record{}, false, nil
	}
	b, err := os.ReadFile(filepath.Join(dir, recordFile))
	if errors.Is(err, fs.ErrNotExist) {
		return Record{}, false, nil
	}
	if err != nil {
		return Record{}, false, fmt.Errorf("fleet: read the cell's record: %w", err)
	}
	var rec Record
	if err := json.Unmarshal(b, &rec); err != nil {
		return Record{}, false, fmt.Errorf("fleet: the cell's record %s: %w", filepath.Join(dir, recordFile), err)
	}
	if rec.Partitions < 1 || rec.Partitions > MaxPartitions || rec.Epoch == 0 {
		return Record{}, false, fmt.Errorf("fleet: the cell's record %s: %d partitions at epoch %d", filepath.Join(dir, recordFile), rec.Partitions, rec.Epoch)
	}
	return rec, true, nil
}

// saveRecord writes rec to dir durably: a file written and synced beside
// the old, renamed over it, and the dir synced, so a crash leaves the
// old record or the new one.
func saveRecord(dir string, rec Record) error {
	if dir == "" {
		return nil
	}
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, recordFile+".tmp")
	if err := writeSynced(tmp, append(b, '\n')); err != nil {
		return fmt.Errorf("fleet: write the cell's record: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, recordFile)); err != nil {
		return fmt.Errorf("fleet: write the cell's record: %w", err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}

func writeSynced(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	return errors.Join(err, f.Sync(), f.Close())
}
