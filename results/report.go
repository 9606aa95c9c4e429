package results

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Report is what `bench report` renders: a run directory's result.json,
// its conform.json, or both. Measuring and rendering stay apart (vegeta's
// attack/report split): the writers only read these files.
type Report struct {
	Dir     string
	Run     *Run         // nil when the directory holds only conform.json
	Conform *Conformance // nil when there is no conform.json
	// Calibration is calibrate.json (`bench calibrate`), nil when absent.
	Calibration *Calibration
	// RateCalibration is the newest calibration at rates (`bench
	// calibrate --rate`) in the directory that holds the run directory,
	// found in RateCalibrationDir: the reports show it beside the
	// latencies of the run's fixed-rate cells. Nil when there is none.
	RateCalibration    *Calibration
	RateCalibrationDir string
}

// Load reads a run directory. It needs at least one of result.json and
// conform.json.
func Load(dir string) (*Report, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("run directory %s: %w", dir, err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("%s is not a directory: pass the run directory that holds result.json (e.g. results/<run-id>)", dir)
	}
	rep := &Report{Dir: dir}
	if rep.Run, err = Read(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if rep.Conform, err = ReadConform(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if rep.Calibration, err = ReadCalibration(filepath.Join(dir, CalibrationFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if rep.Run != nil {
		rep.RateCalibration, rep.RateCalibrationDir = LatestRateCalibration(filepath.Dir(filepath.Clean(dir)))
	}
	if rep.Run == nil && rep.Conform == nil && rep.Calibration == nil {
		return nil, fmt.Errorf("%s holds neither result.json nor %s nor %s: run 'bench run --out %s', 'bench conform' or 'bench calibrate' first", dir, ConformFile, CalibrationFile, filepath.Dir(dir))
	}
	return rep, nil
}

// Name is the cell's "broker/strategy" label.
func (c *Cell) Name() string { return c.Broker + "/" + c.Strategy }

// StrategyLabel is the strategy as a reader should see it: negative
// controls say so, because for them FAIL is the expected outcome.
func (c *Cell) StrategyLabel() string {
	if c.Broken {
		return c.Strategy + " (negative control)"
	}
	return c.Strategy
}

// Expected is the verdict the cell should get.
func (c *Cell) Expected() Verdict {
	if c.Broken {
		return VerdictFail
	}
	return VerdictPass
}

// Outcome classifies a cell for display and for the overall verdict.
type Outcome int

// Outcomes, from good to bad.
const (
	OutcomePass      Outcome = iota // correct strategy, PASS
	OutcomeCaught                   // negative control, FAIL as expected
	OutcomeUnchecked                // no verdict recorded (checker off)
	OutcomeFail                     // correct strategy, FAIL
	OutcomeNotCaught                // negative control, PASS: the checker missed it
	OutcomeError                    // the cell did not complete
)

// Outcome tells how the cell's verdict compares with what was expected.
func (c *Cell) Outcome() Outcome {
	switch {
	case c.Error != "":
		return OutcomeError
	case c.Invariants.Verdict == "":
		return OutcomeUnchecked
	case c.Broken && c.Invariants.Verdict == VerdictFail:
		return OutcomeCaught
	case c.Broken:
		return OutcomeNotCaught
	case c.Invariants.Verdict == VerdictPass:
		return OutcomePass
	default:
		return OutcomeFail
	}
}

// Good reports whether the outcome is the expected one.
func (o Outcome) Good() bool { return o == OutcomePass || o == OutcomeCaught }

// VerdictText is the verdict column: plain PASS/FAIL for correct
// strategies, and "expected FAIL, got …" for negative controls so nobody
// mistakes a caught control for a broken inbox.
func (c *Cell) VerdictText() string {
	switch c.Outcome() {
	case OutcomeError:
		return string(VerdictError)
	case OutcomeUnchecked:
		return "not checked"
	case OutcomeCaught, OutcomeNotCaught:
		return "expected FAIL, got " + string(c.Invariants.Verdict)
	default:
		return string(c.Invariants.Verdict)
	}
}

// RunVerdict sums a run up in one line.
func (r *Run) RunVerdict() (ok bool, text string) {
	var pass, fail, caught, missed, errs, unchecked, controls int
	for i := range r.Cells {
		c := &r.Cells[i]
		if c.Broken {
			controls++
		}
		switch c.Outcome() {
		case OutcomePass:
			pass++
		case OutcomeFail:
			fail++
		case OutcomeCaught:
			caught++
		case OutcomeNotCaught:
			missed++
		case OutcomeError:
			errs++
		case OutcomeUnchecked:
			unchecked++
		}
	}
	if len(r.Cells) == 0 {
		return false, "FAIL: the run has no cells (no broker × strategy completed)"
	}
	ok = fail == 0 && missed == 0 && errs == 0
	var parts []string
	parts = append(parts, fmt.Sprintf("%d of %d correct-strategy cells PASS", pass, len(r.Cells)-controls))
	if controls > 0 {
		parts = append(parts, fmt.Sprintf("%d of %d negative controls caught (expected FAIL, got FAIL)", caught, controls))
	}
	if errs > 0 {
		parts = append(parts, fmt.Sprintf("%d cells did not complete", errs))
	}
	if unchecked > 0 {
		parts = append(parts, fmt.Sprintf("%d cells not checked", unchecked))
	}
	head := VerdictPass
	if !ok {
		head = VerdictFail
	}
	return ok, string(head) + ": " + strings.Join(parts, "; ")
}

// KV is one flattened configuration entry.
type KV struct{ Key, Value string }

// FlattenJSON turns the workload spec into dotted key/value rows in the
// order the spec was written, so the report reads like the YAML file.
func FlattenJSON(raw json.RawMessage) ([]KV, error) {
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var out []KV
	var walk func(prefix string) error
	walk = func(prefix string) error {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{':
				n := 0
				for dec.More() {
					kt, err := dec.Token()
					if err != nil {
						return err
					}
					key := kt.(string)
					if prefix != "" {
						key = prefix + "." + key
					}
					if err := walk(key); err != nil {
						return err
					}
					n++
				}
				if n == 0 {
					out = append(out, KV{prefix, "{}"})
				}
			case '[':
				i := 0
				for dec.More() {
					if err := walk(prefix + "[" + strconv.Itoa(i) + "]"); err != nil {
						return err
					}
					i++
				}
				if i == 0 {
					out = append(out, KV{prefix, "[]"})
				}
			}
			_, err := dec.Token() // the closing delimiter
			return err
		case nil:
			out = append(out, KV{prefix, "null"})
		case string:
			out = append(out, KV{prefix, t})
		default:
			out = append(out, KV{prefix, fmt.Sprint(t)})
		}
		return nil
	}
	if err := walk(""); err != nil {
		return nil, fmt.Errorf("workload JSON: %w", err)
	}
	return out, nil
}

// PublishRate is the workload's publish_rate (events/s; 0 when the run
// published as fast as it could or searched for its rate).
func (r *Run) PublishRate() float64 {
	var w struct {
		Rate float64 `json:"publish_rate"`
	}
	_ = json.Unmarshal(r.Workload, &w)
	return w.Rate
}

// WorkloadName is the name field of the run's workload spec, if any.
func (r *Run) WorkloadName() string {
	var w struct {
		Name string `json:"name"`
	}
	_ = json.Unmarshal(r.Workload, &w)
	return w.Name
}
