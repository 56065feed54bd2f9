package fleet

import (
	"fmt"
	"testing"
)

// applyPlan returns who owns each partition after plan, checking that
// each move takes partitions its source owns.
func applyPlan(t *testing.T, cells []Status, plan []PlannedMove, n int) map[string]int {
	t.Helper()
	owner := make([]string, n)
	for _, st := range cells {
		for p, in := range set(st.Owned, n) {
			if in {
				owner[p] = st.Cell
			}
		}
	}
	for _, mv := range plan {
		for p, in := range set(mv.Partitions, n) {
			if in && owner[p] != mv.From {
				t.Fatalf("move %v: partition %d is %q's, not %q's", mv, p, owner[p], mv.From)
			}
			if in {
				owner[p] = mv.To
			}
		}
	}
	counts := map[string]int{}
	for _, c := range owner {
		counts[c]++
	}
	return counts
}

// TestRebalance_EvensOutMovingOnlyWhatMust checks plans for a fourth,
// empty cell, for an even fleet (no move), for uneven shares with the
// extra partitions kept where they are, and that the plan is the same
// for the cells in another order.
func TestRebalance_EvensOutMovingOnlyWhatMust(t *testing.T) {
	const n = 256
	split := Split([]string{"a", "b", "c"}, n)
	three := []Status{{Record: Record{Cell: "a", Owned: split["a"]}}, {Record: Record{Cell: "b", Owned: split["b"]}}, {Record: Record{Cell: "c", Owned: split["c"]}}}
	four := append(append([]Status{}, three...), Status{Record: Record{Cell: "d"}})
	plan := Rebalance(four, n)
	if got := fmt.Sprint(applyPlan(t, four, plan, n)); got != "map[a:64 b:64 c:64 d:64]" {
		t.Fatalf("after the plan %v: %s, want 64 each", plan, got)
	}
	if len(plan) != 3 || fmt.Sprint(plan[0]) != "{a d [64-85]}" {
		t.Fatalf("plan %v, want one move from each of a, b, c to d, a's first of 64-85", plan)
	}
	reversed := []Status{four[3], four[2], four[1], four[0]}
	if fmt.Sprint(Rebalance(reversed, n)) != fmt.Sprint(plan) {
		t.Fatalf("plan for the cells in another order: %v, want %v", Rebalance(reversed, n), plan)
	}
	if plan := Rebalance(three, n); len(plan) != 0 {
		t.Fatalf("plan for an even fleet: %v, want none", plan)
	}
	uneven := []Status{{Record: Record{Cell: "a", Owned: []Range{{0, 9}}}}, {Record: Record{Cell: "b", Owned: []Range{{10, 10}}}}}
	plan = Rebalance(uneven, n)
	if got := fmt.Sprint(applyPlan(t, uneven, plan, n)); got != "map[:245 a:6 b:5]" || len(plan) != 1 {
		t.Fatalf("uneven: %v gives %s, want one move leaving a 6 and b 5", plan, got)
	}
	if Rebalance(nil, n) != nil {
		t.Fatal("a plan for no cells")
	}
}

// TestParseRanges_ReadsWhatFormatRangesWrites checks ParseRanges and the
// set operations of moves.
func TestParseRanges_ReadsWhatFormatRangesWrites(t *testing.T) {
	rs, err := ParseRanges("7, 0-3,2-5", 16)
	if err != nil || FormatRanges(rs) != "0-5,7" {
		t.Fatalf("ParseRanges = %v, %v; want 0-5,7", rs, err)
	}
	for _, bad := range []string{"", "x", "3-1", "16", "-1", "2-"} {
		if _, err := ParseRanges(bad, 16); err == nil {
			t.Errorf("ParseRanges(%q): no error", bad)
		}
	}
	if got := FormatRanges(Subtract(rs, []Range{{1, 2}}, 16)); got != "0,3-5,7" {
		t.Fatalf("Subtract = %s", got)
	}
	if got := FormatRanges(Union(rs, []Range{{6, 6}, {15, 15}}, 16)); got != "0-7,15" {
		t.Fatalf("Union = %s", got)
	}
}
