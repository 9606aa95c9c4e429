package render

import (
	"encoding/csv"
	"fmt"
	"io"
	"strconv"

	"github.com/inboxbench/inboxbench/results"
)

// CSV exports are for spreadsheets: plain numbers (microseconds, events
// per second, shares as 0..1), no units in the cells, units in the
// column names.

// CellsCSV writes cells.csv: one row per broker × strategy with every
// summary figure of the run.
func CellsCSV(w io.Writer, r *results.Report) error {
	cw := csv.NewWriter(w)
	header := []string{"run_id", "broker", "strategy", "broken", "expected", "verdict", "error", "duration_s", "events_per_s"}
	for _, k := range latencyKinds {
		for _, f := range []string{"count", "p50_us", "p90_us", "p99_us", "p999_us", "max_us"} {
			header = append(header, k.Name+"_"+f)
		}
	}
	for _, c := range counterColumns {
		header = append(header, c.Name)
	}
	header = append(header, "lock_wait_share", "lock_wait_samples", "contention_samples", "blocked_max", "deadlocks", "rollbacks", "commits", "anomalies")
	if err := cw.Write(header); err != nil {
		return err
	}
	if r.Run != nil {
		for i := range r.Run.Cells {
			c := &r.Run.Cells[i]
			row := []string{r.Run.RunID, c.Broker, c.Strategy, strconv.FormatBool(c.Broken), string(c.Expected()), string(c.Invariants.Verdict), c.Error,
				ff(c.DurationS), ff(c.Throughput.EventsPerS)}
			for _, k := range latencyKinds {
				s := k.Get(&c.Latency)
				row = append(row, fi(s.Count), fi(s.P50), fi(s.P90), fi(s.P99), fi(s.P999), fi(s.Max))
			}
			for _, col := range counterColumns {
				row = append(row, fi(col.Get(&c.Counters)))
			}
			ct := &c.Contention
			var waits int64
			for _, v := range ct.LockWaitSamples {
				waits += v
			}
			row = append(row, ff(ct.LockWaitShare), fi(waits), strconv.Itoa(ct.Samples), strconv.Itoa(ct.BlockedMax),
				fi(ct.Deadlocks), fi(ct.Rollbacks), fi(ct.Commits), fi(anomalyTotal(c.Invariants.Anomalies)))
			if err := cw.Write(row); err != nil {
				return err
			}
		}
	}
	cw.Flush()
	return cw.Error()
}

// SeriesCSV writes series.csv in long ("tidy") form: run_id, broker,
// strategy, series, t_s, value. Throughput and the contention sampler tick
// on different clocks, so they are separate series rather than columns of
// one row that would pretend their seconds line up; a pivot table turns
// this into any wide layout.
//
// Series: "events_per_s" (t_s = end of the second it counts),
// "lock_waiting:<wait event>" (sampled backends waiting that second) and
// "blocked" (backends blocked at once).
func SeriesCSV(w io.Writer, r *results.Report) error {
	cw := csv.NewWriter(w)
	if err := cw.Write([]string{"run_id", "broker", "strategy", "series", "t_s", "value"}); err != nil {
		return err
	}
	if r.Run != nil {
		id := r.Run.RunID
		for i := range r.Run.Cells {
			c := &r.Run.Cells[i]
			for t, v := range c.Throughput.Series {
				if err := cw.Write([]string{id, c.Broker, c.Strategy, "events_per_s", strconv.Itoa(t + 1), ff(v)}); err != nil {
					return err
				}
			}
			events := map[string]bool{}
			for _, p := range c.Contention.Series {
				for k := range p.Waiting {
					events[k] = true
				}
			}
			names := sortedKeys(events)
			for _, p := range c.Contention.Series {
				at := ff(p.AtS)
				for _, k := range names {
					// Absent means none waited on that event in that
					// second: write the zero so each series is dense.
					if err := cw.Write([]string{id, c.Broker, c.Strategy, "lock_waiting:" + k, at, fi(p.Waiting[k])}); err != nil {
						return err
					}
				}
				if err := cw.Write([]string{id, c.Broker, c.Strategy, "blocked", at, strconv.Itoa(p.Blocked)}); err != nil {
					return err
				}
			}
		}
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("series.csv: %w", err)
	}
	return nil
}

func ff(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
func fi(v int64) string   { return strconv.FormatInt(v, 10) }

// anomalyTotal sums a cell's anomaly counts.
func anomalyTotal(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}
