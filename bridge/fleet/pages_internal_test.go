package fleet

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// simCell is a cell's store of keys as DEAD.LIST reads it: after a
// position, at most limit matching keys, reading at most scan keys; next
// is the last key read when any are left.
type simCell struct{ keys []string }

func (c simCell) page(after string, limit, scan int, match func(string) bool) cellPage {
	var p cellPage
	i, _ := slices.BinarySearch(c.keys, after)
	if i < len(c.keys) && c.keys[i] == after {
		i++
	}
	read := 0
	for ; i < len(c.keys) && read < scan && len(p.items) < limit; i++ {
		read++
		if match(c.keys[i]) {
			p.items = append(p.items, pageItem{key: c.keys[i], raw: []byte(`{}`)})
		}
	}
	if i < len(c.keys) {
		p.next = c.keys[i-1]
	}
	return p
}

// TestMergePages_CellsStoppingShort_EachKeyOnceInOrder pages through
// three cells whose keys interleave, each page of a cell stopping after
// reading a few keys, as DEAD.LIST's do after 10,000: the fleet's pages,
// each cell from its own position, give every matching key once, in key
// order across the cells.
func TestMergePages_CellsStoppingShort_EachKeyOnceInOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	cells := map[string]simCell{}
	var want []string
	match := func(k string) bool { return !strings.HasSuffix(k, "7") }
	for range 600 {
		k := fmt.Sprintf("%08x", rng.Uint32())
		name := []string{"a", "b", "c"}[rng.IntN(3)]
		c := cells[name]
		c.keys = append(c.keys, k)
		cells[name] = c
		if match(k) {
			want = append(want, k)
		}
	}
	for name, c := range cells {
		slices.Sort(c.keys)
		cells[name] = c
	}
	slices.Sort(want)
	for _, tc := range []struct{ limit, scan int }{{5, 3}, {7, 50}, {100, 10}, {1, 1}} {
		cur, _ := parseCursor("")
		var got []string
		for pages := 0; ; pages++ {
			if pages > 10000 {
				t.Fatalf("limit %d scan %d: no end", tc.limit, tc.scan)
			}
			var answers []cellAnswer
			var ps []cellPage
			for _, name := range []string{"a", "b", "c"} {
				if cur.Cells[name].Done {
					continue
				}
				p := cells[name].page(cur.Cells[name].At, tc.limit, tc.scan, match)
				for i := range p.items {
					p.items[i].cell = len(ps)
				}
				answers = append(answers, cellAnswer{cell: name})
				ps = append(ps, p)
			}
			kept, _ := mergePages(ps, tc.limit, 1<<20)
			if len(kept) > tc.limit {
				t.Fatalf("a page of %d, limit %d", len(kept), tc.limit)
			}
			for _, it := range kept {
				got = append(got, it.key)
			}
			next, err := parseCursor(advance(cur, answers, ps, kept).String())
			if err != nil {
				t.Fatal(err)
			}
			if !next.more() {
				break
			}
			cur = next
		}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("limit %d scan %d: %d keys, want the %d matching, once each, in order", tc.limit, tc.scan, len(got), len(want))
		}
	}
}
