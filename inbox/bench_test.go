package inbox

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inboxbench/inboxbench/envelope"
)

const (
	benchWorkers       = 8
	benchAggsPerWorker = 1000
	benchChunk         = 100 // events per ApplyBatch call
)

// benchGen makes fresh events (no duplicates, in version order per
// aggregate) for one worker. Each worker owns its aggregates, so
// per-aggregate order holds without coordination; a chunk touches
// benchChunk distinct aggregates.
type benchGen struct {
	w, next int
	vers    []int64
}

func newBenchGens() []*benchGen {
	gens := make([]*benchGen, benchWorkers)
	for w := range gens {
		gens[w] = &benchGen{w: w, vers: make([]int64, benchAggsPerWorker)}
	}
	return gens
}

func (g *benchGen) events(n int) []*envelope.Event {
	evs := make([]*envelope.Event, n)
	for i := range evs {
		a := g.next % benchAggsPerWorker
		g.next++
		g.vers[a]++
		agg := fmt.Sprintf("w%d-a%d", g.w, a)
		evs[i] = ev(fmt.Sprintf("%s-v%d", agg, g.vers[a]), agg, g.vers[a], 1)
	}
	return evs
}

// runWorkers applies total events with all workers in parallel and returns
// the wall time.
func runWorkers(ctx context.Context, b *testing.B, bs *benchSetup, total int64) time.Duration {
	in, s := bs.in, bs.s
	var remaining atomic.Int64
	remaining.Store(total)
	var wg sync.WaitGroup
	start := time.Now()
	for _, g := range bs.gens {
		wg.Go(func() {
			for {
				n := min(remaining.Add(-benchChunk)+benchChunk, benchChunk)
				if n <= 0 {
					return
				}
				outs, err := s.ApplyBatch(ctx, in, "bench", g.events(int(n)))
				if err != nil {
					b.Error(err)
					return
				}
				for _, o := range outs {
					if o.Result != Applied {
						b.Errorf("%s: fresh event %s: %s", s.Name(), o.ID, o.Result)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	return time.Since(start)
}

type benchSetup struct {
	s    Strategy
	in   *Inbox
	gens []*benchGen
}

func setupBench(b *testing.B, name string) *benchSetup {
	return setupBenchLayout(b, name, Layout{})
}

func setupBenchLayout(b *testing.B, name string, layout Layout) *benchSetup {
	bs := &benchSetup{s: mustStrategy(b, name), in: newInboxLayout(b, layout, nil), gens: newBenchGens()}
	// Warm up: connections, prepared statements, every account row.
	runWorkers(ctxT(b), b, bs, benchWorkers*benchAggsPerWorker)
	return bs
}

// BenchmarkApply measures each correct strategy on its own: fresh events
// over 8,000 aggregates, 8 concurrent workers, 100 events per call.
//
//	go test -run xxx -bench Apply -benchtime 3s ./inbox
func BenchmarkApply(b *testing.B) {
	for _, name := range correct {
		b.Run(name, func(b *testing.B) {
			bs := setupBench(b, name)
			b.ResetTimer()
			elapsed := runWorkers(ctxT(b), b, bs, int64(b.N))
			b.StopTimer()
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "events/s")
		})
	}
}

// BenchmarkCompare interleaves the strategies in rounds (each applies
// 8 workers × 100 events per round) so they share the same machine
// conditions, and reports each one's events/s and the ratios to tx. On a
// shared or noisy machine, read these ratios rather than BenchmarkApply's
// absolute figures.
//
//	go test -run xxx -bench Compare -benchtime 20x ./inbox
func BenchmarkCompare(b *testing.B) {
	setups := make([]*benchSetup, len(correct))
	for i, name := range correct {
		setups[i] = setupBench(b, name)
	}
	ctx := ctxT(b)
	elapsed := make([]time.Duration, len(setups))
	perRound := int64(benchWorkers * benchChunk)
	b.ResetTimer()
	for round := range b.N {
		for k := range setups {
			i := (k + round) % len(setups) // rotate who goes first
			elapsed[i] += runWorkers(ctx, b, setups[i], perRound)
		}
	}
	b.StopTimer()
	rate := map[string]float64{}
	for i, bs := range setups {
		rate[bs.s.Name()] = float64(perRound*int64(b.N)) / elapsed[i].Seconds()
		b.ReportMetric(rate[bs.s.Name()], bs.s.Name()+"-events/s")
	}
	for _, name := range correct[1:] {
		b.ReportMetric(rate[name]/rate["tx"], name+"/tx")
	}
}

// BenchmarkLayouts interleaves each correct strategy on the plain and the
// partitioned (daily) inbox in rounds, and reports partitioned/plain
// ratios of events/s. The events all fall into one partition, as a day's
// traffic does.
//
//	go test -run xxx -bench Layouts -benchtime 20x ./inbox
func BenchmarkLayouts(b *testing.B) {
	type pair struct{ plain, part *benchSetup }
	pairs := make([]pair, len(correct))
	for i, name := range correct {
		pairs[i] = pair{setupBench(b, name), setupBenchLayout(b, name, Layout{Partitioned: true})}
	}
	ctx := ctxT(b)
	perRound := int64(benchWorkers * benchChunk)
	plain, part := make([]time.Duration, len(pairs)), make([]time.Duration, len(pairs))
	b.ResetTimer()
	for round := range b.N {
		for i, p := range pairs {
			if round%2 == 0 {
				plain[i] += runWorkers(ctx, b, p.plain, perRound)
				part[i] += runWorkers(ctx, b, p.part, perRound)
			} else {
				part[i] += runWorkers(ctx, b, p.part, perRound)
				plain[i] += runWorkers(ctx, b, p.plain, perRound)
			}
		}
	}
	b.StopTimer()
	for i, name := range correct {
		b.ReportMetric(plain[i].Seconds()/part[i].Seconds(), name+"-partitioned/plain")
	}
}
