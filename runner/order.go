package runner

// The cells of a round run one after another, and a cell's place in its
// round weighs on its figure: what the cell before it left behind (a
// JVM's collections, dirty pages), a machine getting faster or slower
// over the round. Reversing every other round balances two cells, not
// three: with three, the middle one stays in the middle, and an
// identical strategy file under a second label was called a regression
// (−10%, p = 0.032) for its place alone (issue 42). So the rounds follow
// a Williams design: over a cycle of rounds every cell runs in every
// place equally often (a Latin square) and after every other cell equally
// often (first-order carryover balanced). The cycle is n rounds for n
// cells, 2n when n is odd (the square, then its rows reversed); round 1
// runs the cells in their given order.

// orderCycle is how many rounds balance n cells.
func orderCycle(n int) int {
	if n%2 == 1 && n > 1 {
		return 2 * n
	}
	return max(n, 1)
}

// balancedOrder is the order of n cells (indexes into their given order)
// in round r (1-based; any round number, the cycle repeats).
func balancedOrder(n, r int) []int {
	out := make([]int, n)
	if n == 0 {
		return out
	}
	first := williamsRow(n)
	label := make([]int, n) // relabels so that round 1 is the given order
	for j, s := range first {
		label[s] = j
	}
	row := ((r-1)%orderCycle(n) + orderCycle(n)) % orderCycle(n)
	for j := range out {
		out[j] = label[(first[j]+row)%n]
	}
	if row >= n { // the odd cycle's second half: the rows reversed
		for i, j := 0, n-1; i < j; i, j = i+1, j-1 {
			out[i], out[j] = out[j], out[i]
		}
	}
	return out
}

// williamsRow is the first row of a Williams square of n: 0, 1, n−1, 2,
// n−2 …; row i adds i to each entry (mod n).
func williamsRow(n int) []int {
	row := make([]int, n)
	lo, hi := 1, n-1
	for j := 1; j < n; j++ {
		if j%2 == 1 {
			row[j], lo = lo, lo+1
		} else {
			row[j], hi = hi, hi-1
		}
	}
	return row
}

// roundOrder is the order of the cells in round r (a warm-up round of
// the cells still warming up runs them in this order too).
func roundOrder(cells []cellKey, r int) []cellKey {
	out := make([]cellKey, len(cells))
	for j, i := range balancedOrder(len(cells), r) {
		out[j] = cells[i]
	}
	return out
}
