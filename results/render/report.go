// Package render writes what package results holds for readers:
// report.md, report.html with its charts, the CSV exports, the terminal's
// summary table and conformance matrix, and the static site of `bench
// publish`. Measuring and rendering stay apart (vegeta's attack/report
// split): the writers only read result files, and only cmd/bench imports
// this package.
package render

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/inboxbench/inboxbench/results"
)

// Encoder renders a report to w; Markdown, HTML, CellsCSV and SeriesCSV
// are Encoders.
type Encoder func(w io.Writer, r *results.Report) error

// Output names one file a report writes and the encoder for it.
type Output struct {
	Name   string
	Encode Encoder
}

// Outputs lists what WriteFiles writes; csv adds the spreadsheets.
func Outputs(csv bool) []Output {
	out := []Output{{"report.md", Markdown}, {"report.html", HTML}}
	if csv {
		out = append(out, Output{"cells.csv", CellsCSV}, Output{"series.csv", SeriesCSV})
	}
	return out
}

// WriteFiles renders every output into dir and returns the paths written.
// Each file is rendered fully in memory first, so a failing encoder never
// leaves a half-written report behind.
func WriteFiles(dir string, r *results.Report, outs []Output) ([]string, error) {
	var paths []string
	for _, o := range outs {
		var buf bytes.Buffer
		if err := o.Encode(&buf, r); err != nil {
			return paths, fmt.Errorf("render %s: %w", o.Name, err)
		}
		p := filepath.Join(dir, o.Name)
		if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
			return paths, fmt.Errorf("write %s: %w (is the run directory writable?)", p, err)
		}
		paths = append(paths, p)
	}
	return paths, nil
}
