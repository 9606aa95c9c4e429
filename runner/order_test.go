package runner

import (
	"slices"
	"testing"
)

// TestOrderBalanced: over a full cycle of rounds every cell of 2 to 6
// runs in every place equally often, and right after every other cell
// equally often; every round is an order of all the cells, round 1 the
// given one, and the cycle repeats.
func TestOrderBalanced(t *testing.T) {
	for n := 1; n <= 6; n++ {
		cycle := orderCycle(n)
		place := make([][]int, n) // place[cell][position]
		for i := range place {
			place[i] = make([]int, n)
		}
		after := map[[2]int]int{}
		for r := 1; r <= cycle; r++ {
			o := balancedOrder(n, r)
			if s := slices.Sorted(slices.Values(o)); !slices.Equal(s, identity(n)) {
				t.Fatalf("n=%d round %d: %v is not an order of the cells", n, r, o)
			}
			if r == 1 && !slices.Equal(o, identity(n)) {
				t.Errorf("n=%d: round 1 runs %v, want the given order", n, o)
			}
			if !slices.Equal(o, balancedOrder(n, r+cycle)) {
				t.Errorf("n=%d: round %d and %d differ: the cycle does not repeat", n, r, r+cycle)
			}
			for pos, c := range o {
				place[c][pos]++
				if pos > 0 {
					after[[2]int{o[pos-1], c}]++
				}
			}
		}
		each := cycle / n
		for c := range n {
			for pos := range n {
				if place[c][pos] != each {
					t.Errorf("n=%d: cell %d ran in place %d %d times of %d rounds, want %d", n, c, pos+1, place[c][pos], cycle, each)
				}
			}
			for d := range n {
				if want := cycle / n; c != d && after[[2]int{c, d}] != want {
					t.Errorf("n=%d: cell %d ran right after cell %d %d times, want %d", n, d, c, after[[2]int{c, d}], want)
				}
			}
		}
	}
}

// TestOrderOddHalfCycle: with an odd count the first n rounds already
// put every cell in every place once (a run of 5 rounds of 3 cells is
// then balanced but for its last two rounds).
func TestOrderOddHalfCycle(t *testing.T) {
	for _, n := range []int{3, 5} {
		place := map[[2]int]int{}
		for r := 1; r <= n; r++ {
			for pos, c := range balancedOrder(n, r) {
				place[[2]int{c, pos}]++
			}
		}
		if len(place) != n*n {
			t.Errorf("n=%d: %d of the %d cell × place pairs in the first %d rounds", n, len(place), n*n, n)
		}
	}
}

// TestRoundOrderOfCells: round 2 of four cells runs each of them once,
// none in its round-1 place.
func TestRoundOrderOfCells(t *testing.T) {
	cells := []cellKey{{"none", "a"}, {"rabbitmq", "a"}, {"kafka", "a"}, {"rocketmq", "a"}}
	if got := roundOrder(cells, 1); !slices.Equal(got, cells) {
		t.Errorf("round 1: %v, want the given order", got)
	}
	got := roundOrder(cells, 2)
	for i, k := range got {
		if k == cells[i] || !slices.Contains(cells, k) {
			t.Errorf("round 2: %v: %v in its round-1 place %d, or not a cell", got, k, i+1)
		}
	}
}

func identity(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}
