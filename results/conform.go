package results

import (
	"maps"
	"slices"
	"time"
)

// ConformFile is the file name `bench conform` writes into a run directory.
const ConformFile = "conform.json"

// Conformance is one conform.json: every scenario × broker × strategy that
// `bench conform` ran, each with what was expected and what the checker
// found. Broken strategies (negative controls) are expected to FAIL; a
// conformance run proves the checker catches them (the mutation score) as
// much as it proves the correct strategies pass.
type Conformance struct {
	SchemaVersion int            `json:"schema_version"`
	RunID         string         `json:"run_id"`
	StartedAt     time.Time      `json:"started_at"`
	FinishedAt    time.Time      `json:"finished_at"`
	Env           Env            `json:"env"`
	Rows          []ConformRow   `json:"rows"`
	Summary       ConformSummary `json:"summary"`
}

// ConformRow is one scenario run on one broker with one strategy.
type ConformRow struct {
	Scenario string `json:"scenario"`
	Broker   string `json:"broker"`
	Strategy string `json:"strategy"`
	// Broken marks a negative-control strategy.
	Broken bool `json:"broken"`
	// Expected is PASS for correct strategies. For a negative control it
	// is FAIL when the scenario is designed to catch that bug, PASS when
	// it does not target it (a split-commit bug needs a crash to show).
	Expected Verdict `json:"expected"`
	// Verdict is what the checker said: PASS, FAIL, or ERROR when the
	// scenario could not run (Error says why).
	Verdict   Verdict             `json:"verdict"`
	Anomalies map[string]int64    `json:"anomalies"`
	Examples  map[string][]string `json:"examples,omitempty"`
	DurationS float64             `json:"duration_s"`
	Error     string              `json:"error,omitempty"`
	// Line is the scenario's one-line account (the article's experiments
	// print their exact expected lines).
	Line string `json:"line,omitempty"`
	// Notes are what happened during the run (faults injected, workers
	// killed and replaced, reconnects): the evidence behind the verdict.
	Notes []string `json:"notes,omitempty"`
	// Reason says why a row is N/A.
	Reason string `json:"reason,omitempty"`
	// MustShow is the anomaly a control run under a weak setting must
	// show (Control names the setting): it is as expected only when it
	// FAILs naming it.
	MustShow string `json:"must_show,omitempty"`
	Control  string `json:"control,omitempty"`
	// Faults are the faults the scenario injected, each with its outage
	// (the failover scenarios), and Timeline the per-second series of its
	// stream they were measured on.
	Faults   []Fault   `json:"faults,omitempty"`
	Timeline *Timeline `json:"timeline,omitempty"`
}

// AsExpected reports whether the row's verdict matches its expectation.
// A negative control caught by a scenario that does not target it is
// still as expected: catching more is never a conformance failure.
func (r ConformRow) AsExpected() bool {
	if r.Error != "" {
		return false
	}
	if r.MustShow != "" {
		return r.Verdict == VerdictFail && r.Anomalies[r.MustShow] > 0
	}
	return r.Verdict == r.Expected || (r.Broken && r.Verdict == VerdictFail)
}

// ConformSummary sums a conformance run up.
type ConformSummary struct {
	Rows       int `json:"rows"`
	AsExpected int `json:"as_expected"`
	// NotApplicable counts N/A rows (they are as expected).
	NotApplicable int `json:"not_applicable,omitempty"`
	// BrokenTotal counts distinct broken strategies that ran; BrokenCaught
	// those that FAILed in at least one row (a mutant is killed as soon as
	// one scenario on one broker catches it).
	BrokenTotal   int      `json:"broken_total"`
	BrokenCaught  int      `json:"broken_caught"`
	MutationScore float64  `json:"mutation_score"` // BrokenCaught / BrokenTotal, 0 when none ran
	Survivors     []string `json:"survivors,omitempty"`
	// Verdict is PASS when every row went as expected.
	Verdict Verdict `json:"verdict"`
}

// Summarize computes the summary from rows; `bench conform` stores it and
// the report recomputes it so a hand-edited file cannot disagree with itself.
func Summarize(rows []ConformRow) ConformSummary {
	s := ConformSummary{Rows: len(rows), Verdict: VerdictPass}
	caught := map[string]bool{}
	for _, r := range rows {
		if r.Verdict == VerdictNA {
			s.NotApplicable++
		}
		if r.AsExpected() {
			s.AsExpected++
		} else {
			s.Verdict = VerdictFail
		}
		if r.Broken && r.Verdict != VerdictNA {
			// A control that applies nowhere here (it needs a broker
			// capability) was not tested: neither caught nor a survivor.
			caught[r.Strategy] = caught[r.Strategy] || r.Verdict == VerdictFail
		}
	}
	s.BrokenTotal = len(caught)
	for _, name := range slices.Sorted(maps.Keys(caught)) {
		if caught[name] {
			s.BrokenCaught++
		} else {
			s.Survivors = append(s.Survivors, name)
		}
	}
	if s.BrokenTotal > 0 {
		s.MutationScore = float64(s.BrokenCaught) / float64(s.BrokenTotal)
	}
	return s
}

// Write stores c as dir/conform.json, with its summary recomputed.
func (c *Conformance) Write(dir string) (string, error) {
	if c.SchemaVersion == 0 {
		c.SchemaVersion = SchemaVersion
	}
	c.Summary = Summarize(c.Rows)
	return writeRunFile(dir, ConformFile, c)
}

// ReadConform loads a run directory's conform.json (or the file itself).
func ReadConform(path string) (*Conformance, error) {
	var c Conformance
	if err := readRunFile(path, ConformFile, &c, &c.SchemaVersion, SchemaVersion); err != nil {
		return nil, err
	}
	c.Summary = Summarize(c.Rows)
	return &c, nil
}

// StrategyTally is one strategy's rows of a conformance run.
type StrategyTally struct {
	Strategy                string
	Ran, NotApplicable, Bad int // bad: not as expected
}

// TallyStrategies counts, per strategy in order of appearance, the
// scenarios run, not applicable, and not as expected.
func TallyStrategies(rows []ConformRow) []StrategyTally {
	var out []StrategyTally
	at := map[string]int{}
	for _, r := range rows {
		i, ok := at[r.Strategy]
		if !ok {
			i = len(out)
			at[r.Strategy] = i
			out = append(out, StrategyTally{Strategy: r.Strategy})
		}
		switch {
		case r.Verdict == VerdictNA:
			out[i].NotApplicable++
		case !r.AsExpected():
			out[i].Ran++
			out[i].Bad++
		default:
			out[i].Ran++
		}
	}
	return out
}
