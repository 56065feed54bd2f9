package fleet

import (
	"cmp"
	"slices"
)

// PlannedMove is one move of a rebalance: partitions of From to To.
type PlannedMove struct {
	From       string  `json:"from"`
	To         string  `json:"to"`
	Partitions []Range `json:"partitions"`
}

// Rebalance plans the moves that even out the partitions the cells own,
// over those cells, in a fleet of n partitions: afterwards each owns the
// same number, or one more. The cells that own the most keep the extra
// ones, so no partition moves that need not, and a cell gives away its
// highest partitions first, so what each keeps stays in few ranges. The
// plan is the same for the same cells, in any order. Partitions no cell
// given owns are not in it.
func Rebalance(cells []Status, n int) []PlannedMove {
	type cell struct {
		name  string
		owned []bool
		count int
		want  int
	}
	cs := make([]*cell, len(cells))
	total := 0
	for i, st := range cells {
		c := &cell{name: st.Cell, owned: set(st.Owned, n)}
		for _, in := range c.owned {
			if in {
				c.count++
			}
		}
		cs[i], total = c, total+c.count
	}
	if len(cs) == 0 {
		return nil
	}
	// The extra partitions stay with the cells that own the most.
	slices.SortFunc(cs, func(a, b *cell) int { return cmp.Or(b.count-a.count, cmp.Compare(a.name, b.name)) })
	for i, c := range cs {
		c.want = total / len(cs)
		if i < total%len(cs) {
			c.want++
		}
	}
	slices.SortFunc(cs, func(a, b *cell) int { return cmp.Compare(a.name, b.name) })
	var plan []PlannedMove
	to := 0
	for _, from := range cs {
		for p := n - 1; p >= 0 && from.count > from.want; p-- {
			if !from.owned[p] {
				continue
			}
			for cs[to].count >= cs[to].want {
				to++
			}
			plan = addMove(plan, from.name, cs[to].name, p)
			from.owned[p], from.count = false, from.count-1
			cs[to].count++
		}
	}
	return plan
}

// addMove adds partition p, of from to to, to plan: to the last move if
// it goes between the same cells.
func addMove(plan []PlannedMove, from, to string, p int) []PlannedMove {
	if l := len(plan); l > 0 && plan[l-1].From == from && plan[l-1].To == to {
		rs := plan[l-1].Partitions
		if r := &rs[len(rs)-1]; r.From == p+1 {
			r.From = p
		} else {
			plan[l-1].Partitions = append(rs, Range{From: p, To: p})
		}
		return plan
	}
	return append(plan, PlannedMove{From: from, To: to, Partitions: []Range{{From: p, To: p}}})
}
