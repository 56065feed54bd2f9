package fleet

import (
	"slices"
	"sync"
	"time"
)

// table is a node's map of the fleet: the owner of each partition, with the
// epoch of the record that said so, and when each cell was last heard.
type table struct {
	n int // partitions

	mu     sync.RWMutex
	owners []int32 // index into cells, -1 for none known
	epoch  []uint64
	cells  []heard
	byName map[string]int32
}

// heard is what a node last heard from one cell.
type heard struct {
	status Status
	at     time.Time
}

func newTable(n int) *table {
	t := &table{n: n, owners: make([]int32, n), epoch: make([]uint64, n), byName: map[string]int32{}}
	for i := range t.owners {
		t.owners[i] = -1
	}
	return t
}

// learn takes a cell's status heard at now. A record of the partitions
// it owns wins over what the map holds at a lower epoch; a record of
// another fleet's size is not this fleet's and is ignored (false).
func (t *table) learn(st Status, now time.Time) bool {
	if st.Partitions != t.n {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	i, ok := t.byName[st.Cell]
	if !ok {
		i = int32(len(t.cells))
		t.byName[st.Cell] = i
		t.cells = append(t.cells, heard{})
	}
	t.cells[i] = heard{status: st, at: now}
	for _, r := range st.Owned {
		for p := max(r.From, 0); p <= min(r.To, t.n-1); p++ {
			if st.Epoch >= t.epoch[p] {
				t.owners[p], t.epoch[p] = i, st.Epoch
			}
		}
	}
	return true
}

// owner returns the cell that owns partition p, and when it was last
// heard; ok is false when no cell heard of claims p.
func (t *table) owner(p int) (cell string, at time.Time, ok bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	i := t.owners[p]
	if i < 0 {
		return "", time.Time{}, false
	}
	h := &t.cells[i]
	return h.status.Cell, h.at, true
}

// heardCells returns what was last heard from each cell, by name.
func (t *table) heardCells() []heard {
	t.mu.RLock()
	out := slices.Clone(t.cells)
	t.mu.RUnlock()
	slices.SortFunc(out, func(a, b heard) int {
		switch {
		case a.status.Cell < b.status.Cell:
			return -1
		case a.status.Cell > b.status.Cell:
			return 1
		}
		return 0
	})
	return out
}

// heardOf returns what was last heard from cell.
func (t *table) heardOf(cell string) (heard, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	i, ok := t.byName[cell]
	if !ok {
		return heard{}, false
	}
	return t.cells[i], true
}

// maxEpoch is the highest epoch of a record heard.
func (t *table) maxEpoch() uint64 {
	t.mu.RLock()
	defer t.mu.RUnlock()
	var e uint64
	for _, h := range t.cells {
		e = max(e, h.status.Epoch)
	}
	return e
}
