package results

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Aggregate is one cell measured in several rounds: the rounds kept
// whole in Rounds, the cell's own figures their medians, Stats the
// medians' intervals. Counters, anomalies and failures are the rounds'
// sums, the verdict the worst of theirs. The per-second series, window,
// contention detail and latency spectrum are the median round's (the
// round whose events/s is the median), so the charts show a round that
// happened rather than a blend. One round is returned as it is.
func Aggregate(rounds []Cell) Cell {
	if len(rounds) == 1 {
		return rounds[0]
	}
	mid := medianRound(rounds)
	c := rounds[mid]
	c.Round, c.Order, c.Schema, c.Error = 0, 0, "", ""
	c.Rounds = rounds
	c.Stats = roundStats(rounds)
	c.Throughput.EventsPerS = c.Stats.EventsPerS.Median
	c.Throughput.VsBaseline = 0
	if c.Stats.VsBaseline != nil {
		c.Throughput.VsBaseline = c.Stats.VsBaseline.Median
	}
	c.Throughput.PublishedPerS = medianOf(values(rounds, func(r *Cell) float64 { return r.Throughput.PublishedPerS }))
	c.Throughput.HostCPUBusy = medianOf(values(rounds, func(r *Cell) float64 { return r.Throughput.HostCPUBusy }))
	c.Throughput.Bound = commonBound(rounds)
	c.Latency = medianLatencies(rounds, c.Latency.Spectrum)
	c.Contention.LockWaitShare = c.Stats.LockWaitShare.Median
	c.DurationS, c.Counters, c.Failures, c.Notes = 0, Counters{}, nil, nil
	c.External, c.Service = nil, nil // the sums below, not the median round's
	var errs []string
	for i := range rounds {
		r := &rounds[i]
		c.DurationS += r.DurationS
		c.Counters = AddCounters(c.Counters, r.Counters)
		c.External = addUp(c.External, r.External, addExternal)
		c.Service = addUp(c.Service, r.Service, addService)
		c.Failures = append(c.Failures, r.Failures...)
		if r.Error != "" {
			errs = append(errs, fmt.Sprintf("round %d: %s", r.Round, r.Error))
		}
	}
	c.Error = strings.Join(errs, "; ")
	c.Invariants = mergeInvariants(rounds)
	c.Notes = append(mergeNotes(rounds), planNotes(rounds)...)
	return c
}

// addUp sums the rounds' r into sum with add: nil rounds add nothing,
// and the first that is not nil starts the sum with a copy of itself.
func addUp[T any](sum, r *T, add func(s, r *T)) *T {
	switch {
	case r == nil:
		return sum
	case sum == nil:
		c := *r
		return &c
	}
	s := *sum
	add(&s, r)
	return &s
}

// addExternal sums the rounds' external calls (the settings are the
// same in every round).
func addExternal(s, r *External) {
	s.Calls, s.Effects, s.Replays, s.Conflicts = s.Calls+r.Calls, s.Effects+r.Effects, s.Replays+r.Replays, s.Conflicts+r.Conflicts
	s.Refused, s.TimedOut, s.Queries = s.Refused+r.Refused, s.TimedOut+r.TimedOut, s.Queries+r.Queries
}

// addService sums the rounds' kills and exits of a service under test.
func addService(s, r *ServiceRun) { s.Kills, s.Exits = s.Kills+r.Kills, s.Exits+r.Exits }

// medianRound is the index of the round whose events/s is the median (the
// lower middle of an even count).
func medianRound(rounds []Cell) int {
	idx := make([]int, len(rounds))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool {
		return rounds[idx[a]].Throughput.EventsPerS < rounds[idx[b]].Throughput.EventsPerS
	})
	return idx[(len(idx)-1)/2]
}

func values(rounds []Cell, get func(*Cell) float64) []float64 {
	out := make([]float64, 0, len(rounds))
	for i := range rounds {
		out = append(out, get(&rounds[i]))
	}
	return out
}

// measured are the values of the rounds that measured the figure at all
// (a latency of 0 is no measurement: nothing was recorded).
func measured(rounds []Cell, get func(*Cell) float64) []float64 {
	var out []float64
	for _, v := range values(rounds, get) {
		if v > 0 {
			out = append(out, v)
		}
	}
	return out
}

func roundStats(rounds []Cell) *CellStats {
	us := func(get func(*Latencies) int64) Estimate {
		return EstimateOf(measured(rounds, func(r *Cell) float64 { return float64(get(&r.Latency)) }))
	}
	st := &CellStats{
		EventsPerS:    EstimateOf(values(rounds, func(r *Cell) float64 { return r.Throughput.EventsPerS })),
		E2EP50:        us(func(l *Latencies) int64 { return l.E2E.P50 }),
		E2EP99:        us(func(l *Latencies) int64 { return l.E2E.P99 }),
		PublishP99:    us(func(l *Latencies) int64 { return l.Publish.P99 }),
		PublishLagP99: us(func(l *Latencies) int64 { return l.PublishLag.P99 }),
		DedupP99:      us(func(l *Latencies) int64 { return l.Dedup.P99 }),
		LockWaitShare: EstimateOf(values(rounds, func(r *Cell) float64 { return r.Contention.LockWaitShare })),
	}
	if v := measured(rounds, func(r *Cell) float64 { return r.Throughput.VsBaseline }); len(v) > 0 {
		e := EstimateOf(v)
		st.VsBaseline = &e
	}
	for _, r := range rounds {
		if r.Window != nil && !r.Window.Steady {
			st.NotSteady++
		}
	}
	st.Trend = roundsTrend(rounds)
	st.Rise = RiseOf(measuredRates(rounds))
	st.Disagree = disagree(st.EventsPerS)
	return st
}

// measuredRates are the events/s of the measured rounds in the order they
// ran, leaving out a failed warm-up round kept as round 0.
func measuredRates(rounds []Cell) []float64 {
	var out []float64
	for i := range rounds {
		if rounds[i].Round > 0 {
			out = append(out, rounds[i].Throughput.EventsPerS)
		}
	}
	return out
}

// medianLatencies takes each percentile's median over the rounds.
func medianLatencies(rounds []Cell, spectrum map[string][]Point) Latencies {
	sum := func(get func(*Latencies) Summary) Summary {
		pick := func(f func(Summary) int64) int64 {
			return int64(medianOf(measured(rounds, func(r *Cell) float64 { return float64(f(get(&r.Latency))) })))
		}
		var n int64
		for i := range rounds {
			n += get(&rounds[i].Latency).Count
		}
		return Summary{Count: n, P50: pick(func(s Summary) int64 { return s.P50 }), P90: pick(func(s Summary) int64 { return s.P90 }),
			P99: pick(func(s Summary) int64 { return s.P99 }), P999: pick(func(s Summary) int64 { return s.P999 }),
			Max: pick(func(s Summary) int64 { return s.Max })}
	}
	l := Latencies{E2E: sum(func(l *Latencies) Summary { return l.E2E }), Publish: sum(func(l *Latencies) Summary { return l.Publish }),
		PublishLag: sum(func(l *Latencies) Summary { return l.PublishLag }), Sched: sum(func(l *Latencies) Summary { return l.Sched }), Apply: sum(func(l *Latencies) Summary { return l.Apply }),
		Dedup: sum(func(l *Latencies) Summary { return l.Dedup }), Spectrum: spectrum,
		ExternalCall: sum(func(l *Latencies) Summary { return l.ExternalCall }), ExternalE2E: sum(func(l *Latencies) Summary { return l.ExternalE2E })}
	kinds := map[string]bool{}
	for _, r := range rounds {
		for k := range r.Latency.ApplyByResult {
			kinds[k] = true
		}
	}
	if len(kinds) > 0 {
		l.ApplyByResult = map[string]Summary{}
		for k := range kinds {
			l.ApplyByResult[k] = sum(func(l *Latencies) Summary { return l.ApplyByResult[k] })
		}
	}
	return l
}

// commonBound is the bound most rounds had (the first round's on a tie).
func commonBound(rounds []Cell) Bound {
	n := map[Bound]int{}
	best := rounds[0].Throughput.Bound
	for _, r := range rounds {
		n[r.Throughput.Bound]++
		if n[r.Throughput.Bound] > n[best] {
			best = r.Throughput.Bound
		}
	}
	return best
}

// mergeInvariants sums the rounds' anomalies; the verdict is the worst.
func mergeInvariants(rounds []Cell) Invariants {
	inv := Invariants{Anomalies: map[string]int64{}, Examples: map[string][]string{}}
	rank := map[Verdict]int{VerdictPass: 1, VerdictNA: 2, "": 3, VerdictFail: 4, VerdictError: 5}
	for i, r := range rounds {
		if i == 0 || rank[r.Invariants.Verdict] > rank[inv.Verdict] {
			inv.Verdict = r.Invariants.Verdict
		}
		for name, k := range r.Invariants.Anomalies {
			inv.Anomalies[name] += k
		}
		for name, ex := range r.Invariants.Examples {
			for _, e := range ex {
				if len(inv.Examples[name]) < 5 {
					inv.Examples[name] = append(inv.Examples[name], fmt.Sprintf("round %d: %s", r.Round, e))
				}
			}
		}
	}
	return inv
}

// mergeNotes keeps each note once: as it is when every round has it,
// prefixed with its rounds otherwise.
func mergeNotes(rounds []Cell) []string {
	var order []string
	in := map[string][]int{}
	for _, r := range rounds {
		for _, n := range r.Notes {
			if _, ok := in[n]; !ok {
				order = append(order, n)
			}
			if !slices.Contains(in[n], r.Round) {
				in[n] = append(in[n], r.Round)
			}
		}
	}
	out := make([]string, 0, len(order))
	for _, n := range order {
		if len(in[n]) == len(rounds) {
			out = append(out, n)
			continue
		}
		rs := make([]string, len(in[n]))
		for i, r := range in[n] {
			rs[i] = fmt.Sprint(r)
		}
		out = append(out, fmt.Sprintf("round %s: %s", strings.Join(rs, ", "), n))
	}
	return out
}

// AddCounters sums two sets of counters.
func AddCounters(a, b Counters) Counters {
	return Counters{
		Published: a.Published + b.Published, Deliveries: a.Deliveries + b.Deliveries, Executions: a.Executions + b.Executions,
		Effects: a.Effects + b.Effects, Duplicates: a.Duplicates + b.Duplicates, Redeliveries: a.Redeliveries + b.Redeliveries,
		Gaps: a.Gaps + b.Gaps, Parked: a.Parked + b.Parked, Stale: a.Stale + b.Stale, Conflicts: a.Conflicts + b.Conflicts,
		Retries: a.Retries + b.Retries, Errors: a.Errors + b.Errors, Crashes: a.Crashes + b.Crashes, Rejected: a.Rejected + b.Rejected,
		Failed: a.Failed + b.Failed, PublishRetries: a.PublishRetries + b.PublishRetries,
	}
}

// RoundValues are a cell's values of one figure over its rounds (one
// value for a cell measured once): what comparisons test.
func (c *Cell) RoundValues(get func(*Cell) float64) []float64 {
	if len(c.Rounds) == 0 {
		return []float64{get(c)}
	}
	return values(c.Rounds, get)
}
