package bench

import (
	"encoding/json"
	"net"
	"slices"
	"strconv"
	"testing"

	"github.com/natsdelay/natsdelay/bridge/fleet"
	"github.com/natsdelay/natsdelay/bridge/wire"
)

// TestPendingOf_OnlyAWholeCount checks that the cells phase takes an
// INFO's pending count only where it counts every message: a fleet's
// INFO sums the cells that answered, so a cell between leaders adds
// nothing to it, and a node whose store is down answers zero counts. A
// run once read such an INFO of a fleet of one as 0 pending and waited
// in vain for its end-to-end run to bring the count back to 0.
func TestPendingOf_OnlyAWholeCount(t *testing.T) {
	counted := func(n uint64) *wire.Counts { return &wire.Counts{Pending: n} }
	info := func(storage string, cells ...fleet.CellInfo) []byte {
		var i fleet.Info
		i.Storage = storage
		for _, c := range cells {
			if c.Counts != nil {
				i.Counts.Pending += c.Counts.Pending
			}
		}
		i.Fleet.Cells = cells
		b, err := json.Marshal(i)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	cell := func(name string, counts *wire.Counts, why string) fleet.CellInfo {
		c := fleet.CellInfo{Counts: counts, Error: why}
		c.Cell = name
		return c
	}
	for _, tc := range []struct {
		name string
		data []byte
		want uint64
		ok   bool
	}{
		{"a plain node", info("ok"), 0, true},
		{"every cell answered", info("ok", cell("c1", counted(5), ""), cell("c2", counted(7), "")), 12, true},
		{"a cell between leaders", info("ok", cell("c1", nil, "nothing answers on $DELAY.CELL.c1.API.INFO: nats: no responders available for request")), 0, false},
		{"a cell not heard from", info("ok", cell("c1", counted(5), ""), cell("c2", nil, "unavailable: not heard from for 1.2s")), 0, false},
		{"a store that is down", info("failing: suspended"), 0, false},
		{"not JSON", []byte("{"), 0, false},
	} {
		got, err := pendingOf(tc.data)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("%s: pendingOf = %d, %v; want %d, ok %v", tc.name, got, err, tc.want, tc.ok)
		}
	}
	// A plain node's pending count is taken as it is.
	var plain wire.InfoReply
	plain.Storage, plain.Counts.Pending = "ok", 38524
	b, _ := json.Marshal(plain)
	if got, err := pendingOf(b); err != nil || got != 38524 {
		t.Errorf("a plain node's INFO: pendingOf = %d, %v; want 38524", got, err)
	}
}

// TestFreeAddrs_Distinct checks that the Raft addresses picked for a set
// of nodes are distinct and free when picked: a run once started a 3-node
// cell whose peer list named one port twice, as picking a port and
// closing its listener before picking the next allows, and the cell's
// nodes refused to start.
func TestFreeAddrs_Distinct(t *testing.T) {
	for range 20 {
		addrs, err := freeAddrs(50)
		if err != nil {
			t.Fatal(err)
		}
		if len(addrs) != 50 {
			t.Fatalf("%d addresses, want 50", len(addrs))
		}
		seen := make(map[string]bool, len(addrs))
		for _, a := range addrs {
			if seen[a] {
				t.Fatalf("%s picked twice in %v", a, addrs)
			}
			seen[a] = true
			ln, err := net.Listen("tcp", a)
			if err != nil {
				t.Fatalf("%s is not free once picked: %v", a, err)
			}
			_ = ln.Close()
		}
	}
}

// TestIdealNodes_SameNodeAsTheFleetsOwner checks that the ideal sends
// each subject to the node that stands for the cell owning it in the
// fleet, so that both systems carry the same load on each node: the
// ratio of their rates is then the fleet's routing, not the difference
// between two random spreads of the subjects.
func TestIdealNodes_SameNodeAsTheFleetsOwner(t *testing.T) {
	const cells, parts = 3, 12
	node := idealNodes(cells, parts)
	owned := fleet.Split(cellNames(cells), parts)
	for i := range 1024 {
		s := "bench.x.plain.cells.s" + strconv.Itoa(i)
		p := partitionOf(s, parts)
		if p != fleet.Partition(s, parts) {
			t.Fatalf("subject %q: the bench's partition %d, the fleet's %d", s, p, fleet.Partition(s, parts))
		}
		owner := cellNames(cells)[node[p]]
		if !fleet.Contains(owned[owner], p) {
			t.Fatalf("subject %q of partition %d goes to the ideal's node for %s, which does not own it (%v)", s, p, owner, owned)
		}
	}
	if got := idealNodes(3, 12); !slices.Equal(got, []int{0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2}) {
		t.Fatalf("idealNodes(3, 12) = %v", got)
	}
}
