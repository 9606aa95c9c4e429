package results

import "slices"

// ChangePoint is a place in a series of runs where a figure moved for
// good: the runs from Index on differ from those before it.
type ChangePoint struct {
	// Index is the first run after the change.
	Index  int    `json:"index"`
	Change Change `json:"change"`
	// Suspect: the change rests on the newest run alone; a later run
	// confirms or clears it.
	Suspect bool `json:"suspect,omitempty"`
}

// ChangePoints finds where a series of runs (oldest first, each the
// figure's values over its rounds) changed, by binary segmentation: the
// split of a stretch whose two sides the U test tells apart most
// clearly is a change point when that difference is a regression or an
// improvement by rule — at Alpha divided by the number of splits tried
// (so that trying every split of a flat series does not find one by
// chance) — and each side is then searched the same way. A run with no
// values (the figure was not measured) is left out of both sides.
func ChangePoints(series [][]float64, rule ChangeRule) []ChangePoint {
	s := &segmenter{series: series, rule: rule}
	s.segment(0, len(series))
	slices.SortFunc(s.out, func(a, b ChangePoint) int { return a.Index - b.Index })
	return s.out
}

// segmenter is ChangePoints' search: the series, the rule it judges by
// and the change points found so far.
type segmenter struct {
	series [][]float64
	rule   ChangeRule
	out    []ChangePoint
}

// segment searches series[from:to] for its best split, and each side of
// it in turn.
func (s *segmenter) segment(from, to int) {
	series, rule := s.series, s.rule
	var best *ChangePoint
	tried := 0
	for i := from + 1; i < to; i++ {
		before, after := pooled(series[from:i]), pooled(series[i:to])
		if len(before) == 0 || len(after) == 0 || len(series[i]) == 0 {
			continue
		}
		tried++
		c := CompareRounds(before, after, rule)
		if c.Finding != Regression && c.Finding != Improvement {
			continue
		}
		if best == nil || c.P < best.Change.P || (c.P == best.Change.P && abs(c.Rel()) > abs(best.Change.Rel())) {
			best = &ChangePoint{Index: i, Change: c}
		}
	}
	if best == nil {
		return
	}
	switch {
	case newestAlone(series, best.Index, to) && to == len(series):
		// One run on the far side: it may be a bad run rather than a
		// new level, and nothing after it can tell yet.
		if best.Change.P >= Alpha {
			return
		}
		best.Suspect = true
	case best.Change.Single || best.Change.P*float64(tried) >= Alpha:
		return
	}
	s.out = append(s.out, *best)
	s.segment(from, best.Index)
	s.segment(best.Index, to)
}

// newestAlone reports whether the runs from i to to hold one measured run.
func newestAlone(series [][]float64, i, to int) bool {
	n := 0
	for _, s := range series[i:to] {
		if len(s) > 0 {
			n++
		}
	}
	return n == 1
}

func pooled(runs [][]float64) []float64 {
	var out []float64
	for _, r := range runs {
		out = append(out, r...)
	}
	return out
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}
